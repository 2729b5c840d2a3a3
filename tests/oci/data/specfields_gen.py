"""Derive the OCI field tree from the runtime-spec JSON schema the tests keep (tests/schemas/oci)."""
import json, os, sys
d = sys.argv[1]
docs = {n: json.load(open(os.path.join(d, n))) for n in os.listdir(d) if n.endswith(".json")}

def resolve(ref, cur):
    f, _, ptr = ref.partition("#")
    node = docs[f or cur]
    for p in [x for x in ptr.strip("/").split("/") if x]:
        node = node[p]
    return node, f or cur

def walk(node, cur, seen=()):
    if "$ref" in node:
        if node["$ref"] in seen:
            return None
        n, fn = resolve(node["$ref"], cur)
        return walk(n, fn, seen + (node["$ref"],))
    for comb in ("allOf", "oneOf", "anyOf"):
        if comb in node:
            subs = [walk(s, cur, seen) for s in node[comb]]
            objs = [s for s in subs if isinstance(s, dict)]
            if objs:
                out = {}
                for o in objs:
                    out.update(o)
                return out
            lists = [s for s in subs if isinstance(s, tuple)]
            return lists[0] if lists else None
    if "properties" in node:
        return {k: walk(v, cur, seen) for k, v in node["properties"].items()}
    if node.get("type") == "array" and "items" in node:
        c = walk(node["items"], cur, seen)
        return ("list", c) if c is not None else None
    if node.get("type") == "object":
        pp = node.get("patternProperties") or {}
        ap = node.get("additionalProperties")
        sub = next(iter(pp.values())) if pp else (ap if isinstance(ap, dict) else None)
        if sub is not None:
            c = walk(sub, cur, seen)
            return ("map", c) if c is not None else None
    return None

tree = walk(docs["config-schema.json"], "config-schema.json")
print(repr(tree))
