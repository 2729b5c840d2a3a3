"""CDI spec files: strict loading (JSON or YAML), validation, minimum cdiVersion, saving.

A spec stays a plain dict in CDI's own field names (that is what gets injected and what
gets written); `Spec` wraps a validated one with where it came from. Loading is strict as
in the reference library: unknown fields, bad names, duplicate devices, empty device
edits and a cdiVersion too low for the content are all errors naming the file and field.
The strict checks here are a superset of the official JSON schema (upstream validates with
its own code too); the tests also apply the schema itself (tests/schema_check.py, passed as
`check=`), nct ships neither it nor jsonschema."""

from __future__ import annotations

import functools
import json
import os

from nct import jsonio
from nct.cdi import names, version
from nct.errors import NctError, SpecError
from nct.limits import MAX_NESTING_DEPTH, MAX_YAML_ALIAS_NODES, read_document, without_gc
from nct.record import Record, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from nct.hostcache import SpecCache

    # An extra check of a document (raises SpecError naming `source`): the tests' schema.
    DocCheck = Callable[[object, str], None]

HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
DEVICE_TYPES = ("", "b", "c", "u", "p")
SPEC_EXTENSIONS = (".json", ".yaml")

# Field tables: key -> type. Types: "str", "int", "uint32", "bool", "strlist", "gids",
# "strmap", or a nested table name.
_TABLES: dict[str, dict[str, str]] = {
    "spec": {"cdiVersion": "str", "kind": "str", "annotations": "strmap", "devices": "[device]",
             "containerEdits": "edits"},
    "device": {"name": "str", "annotations": "strmap", "containerEdits": "edits"},
    "edits": {"env": "strlist", "deviceNodes": "[node]", "hooks": "[hook]", "mounts": "[mount]",
              "intelRdt": "rdt", "additionalGids": "gids", "netDevices": "[netdev]"},
    "node": {"path": "str", "hostPath": "str", "type": "str", "major": "int", "minor": "int",
             "fileMode": "uint32", "permissions": "str", "uid": "uint32", "gid": "uint32"},
    "mount": {"hostPath": "str", "containerPath": "str", "options": "strlist", "type": "str"},
    "hook": {"hookName": "str", "path": "str", "args": "strlist", "env": "strlist", "timeout": "int"},
    "rdt": {"closID": "str", "l3CacheSchema": "str", "memBwSchema": "str", "schemata": "strlist",
            "enableMonitoring": "bool"},
    "netdev": {"hostInterfaceName": "str", "name": "str"},
}
_INT64 = (-(2**63), 2**63 - 1)
_UINT32 = (0, 2**32 - 1)


class Spec(Record, frozen=False):
    """A validated CDI spec and where it came from (priority: index of its spec dir)."""

    raw: dict
    path: str | None = None
    priority: int = 0
    vendor: str = field(init=False)
    cls: str = field(init=False)

    def __post_init__(self) -> None:
        self.vendor, self.cls = names.parse_kind(self.raw["kind"])

    @property
    def kind(self) -> str:
        return self.raw["kind"]

    @property
    def version(self) -> str:
        return version.normalize(self.raw["cdiVersion"]) or self.raw["cdiVersion"]

    @property
    def edits(self) -> dict:
        """The spec-level containerEdits ({} when absent)."""
        return self.raw.get("containerEdits") or {}

    @property
    def devices(self) -> dict[str, dict]:
        return {d["name"]: d for d in self.raw["devices"]}

    def qualified_names(self) -> list[str]:
        return [names.qualified_name(self.vendor, self.cls, d["name"]) for d in self.raw["devices"]]


# --- parsing ------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _yaml_loader():
    """A safe loader that keeps plain scalars as strings (except null): fields are then
    typed by the CDI field tables, as the reference library's YAML-to-JSON step does, so
    `name: 0` is the device "0" and `fileMode: 0644` is octal."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml when available
        pass

    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag == "tag:yaml.org,2002:null"]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return Loader


def _check_yaml_depth(text: str, source: str) -> None:
    """SpecError when YAML collections nest deeper than MAX_NESTING_DEPTH, or its aliases
    stand for more than MAX_YAML_ALIAS_NODES nodes once expanded. Read as the parser's event
    stream (libyaml's parser is iterative): composing a too deep document recurses on the C
    stack and crashes the process, or raises RecursionError; aliases are shared objects
    after loading, but every step after it (merging edits, JSON for the cache) expands them."""
    import yaml

    loader = _yaml_loader()(text)
    try:
        depth = nodes = aliased = 0
        sizes: dict[str, int] = {}  # anchor -> nodes it stands for, its own aliases expanded
        open_: list[tuple[str | None, int]] = []  # (anchor, nodes before it) of open collections
        start, end = yaml.CollectionStartEvent, yaml.CollectionEndEvent
        while True:
            event = loader.get_event()
            if event is None:
                return
            if isinstance(event, start):
                depth += 1
                if depth > MAX_NESTING_DEPTH:
                    raise SpecError(f"{source}: invalid YAML: nested deeper than {MAX_NESTING_DEPTH} levels")
                open_.append((event.anchor, nodes))
                nodes += 1
            elif isinstance(event, end):
                depth -= 1
                anchor, before = open_.pop()
                if anchor is not None:
                    sizes[anchor] = nodes - before
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor, 1)
                nodes += size
                aliased += size
                if aliased > MAX_YAML_ALIAS_NODES:
                    raise SpecError(f"{source}: invalid YAML: its aliases stand for more than "
                                    f"{MAX_YAML_ALIAS_NODES} nodes (write the entries out, or use fewer aliases)")
    finally:
        loader.dispose()


def parse_spec_data(data: bytes | str, source: str, *, fmt: str | None = None) -> tuple[dict, bool]:
    """Decode a spec document. Returns (dict, from_yaml). JSON for fmt 'json' or a .json
    source, YAML otherwise (JSON documents are valid YAML too)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SpecError(f"{source}: not UTF-8 text at byte {e.start}") from None
    if fmt is None:
        fmt = "json" if source.endswith(".json") or data.lstrip().startswith("{") else "yaml"
    if fmt == "json":
        try:
            doc = jsonio.loads(data)
        except json.JSONDecodeError as e:
            raise SpecError(f"{source}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        except ValueError as e:  # nesting beyond nct.limits.MAX_NESTING_DEPTH
            raise SpecError(f"{source}: invalid JSON: {e}") from None
        from_yaml = False
    else:
        import yaml
        try:
            _check_yaml_depth(data, source)
            docs = [d for d in without_gc(list, yaml.load_all(data, Loader=_yaml_loader())) if d is not None]
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e)
            raise SpecError(f"{source}: invalid YAML{at}: {problem}") from None
        if len(docs) > 1:
            raise SpecError(f"{source}: more than one YAML document")
        doc = docs[0] if docs else None
        from_yaml = True
    if doc is None:
        raise SpecError(f"{source}: empty CDI spec")
    if not isinstance(doc, dict):
        raise SpecError(f"{source}: a CDI spec must be an object/mapping")
    return doc, from_yaml


def _yaml_int(s: str) -> int:
    t = s.replace("_", "")
    sign = -1 if t.startswith("-") else 1
    t = t.lstrip("+-")
    if t.startswith(("0x", "0X")):
        return sign * int(t[2:], 16)
    if t.startswith(("0o", "0O")):
        return sign * int(t[2:], 8)
    if t.startswith(("0b", "0B")):
        return sign * int(t[2:], 2)
    if len(t) > 1 and t.startswith("0"):
        return sign * int(t, 8)  # YAML 1.1 octal, as Go's yaml reads 0644
    return sign * int(t, 10)


_YAML_BOOLS = {"true": True, "yes": True, "on": True, "y": True,
               "false": False, "no": False, "off": False, "n": False}


def _typed(value: object, typ: str, where: str, from_yaml: bool) -> object:
    """Check (and, for YAML, convert) one field; SpecError naming `where` when wrong."""
    if typ in ("str",):
        if not isinstance(value, str):
            raise SpecError(f"{where}: must be a string")
        return value
    if typ in ("int", "uint32"):
        if from_yaml and isinstance(value, str):
            try:
                value = _yaml_int(value)
            except ValueError:
                raise SpecError(f"{where}: must be an integer, not {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: must be an integer")
        lo, hi = _UINT32 if typ == "uint32" else _INT64
        if not lo <= value <= hi:
            raise SpecError(f"{where}: {value} out of range")
        return value
    if typ == "bool":
        if from_yaml and isinstance(value, str) and value.lower() in _YAML_BOOLS:
            return _YAML_BOOLS[value.lower()]
        if not isinstance(value, bool):
            raise SpecError(f"{where}: must be a boolean")
        return value
    if typ in ("strlist", "gids"):
        if not isinstance(value, list):
            raise SpecError(f"{where}: must be a list")
        item = "str" if typ == "strlist" else "uint32"
        return [_typed(v, item, f"{where}[{i}]", from_yaml) for i, v in enumerate(value)]
    if typ == "strmap":
        if not isinstance(value, dict):
            raise SpecError(f"{where}: must be a map of strings")
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k:
                raise SpecError(f"{where}: keys must be non-empty strings")
            if v is None:
                v = ""
            out[k] = _typed(v, "str", f"{where}.{k}", from_yaml)
        return out
    if typ.startswith("["):
        if not isinstance(value, list):
            raise SpecError(f"{where}: must be a list")
        return [_typed(v, typ[1:-1], f"{where}[{i}]", from_yaml) for i, v in enumerate(value)]
    table = _TABLES[typ]
    if not isinstance(value, dict):
        raise SpecError(f"{where}: must be an object" if where else "must be an object")
    out = {}
    for k, v in value.items():
        if k not in table:
            raise SpecError(f"{where}: unknown field {k!r}" if where else f"unknown field {k!r}")
        if v is None:  # null is the zero value, as in the reference decoder
            continue
        out[k] = _typed(v, table[k], f"{where}.{k}" if where else k, from_yaml)
    return out


def _env_error(env: list[str], where: str) -> None:
    for i, e in enumerate(env):
        if e.find("=") <= 0:
            raise SpecError(f"{where}[{i}]: invalid environment variable {e!r}, should be KEY=VALUE")


def _check_edits(e: dict, where: str) -> None:
    _env_error(e.get("env", []), f"{where}.env")
    for i, n in enumerate(e.get("deviceNodes", [])):
        w = f"{where}.deviceNodes[{i}]"
        if not n.get("path"):
            raise SpecError(f"{w}: missing device path")
        if n.get("type", "") not in DEVICE_TYPES:
            raise SpecError(f"{w}: device {n['path']!r}: invalid type {n['type']!r}")
        perms = n.get("permissions", "")
        if perms != "none" and any(c not in "rwm" for c in perms):
            raise SpecError(f"{w}: device {n['path']!r}: invalid permissions {perms!r}")
    for i, m in enumerate(e.get("mounts", [])):
        w = f"{where}.mounts[{i}]"
        if not m.get("hostPath"):
            raise SpecError(f"{w}: missing hostPath")
        if not m.get("containerPath"):
            raise SpecError(f"{w}: missing containerPath")
    for i, h in enumerate(e.get("hooks", [])):
        w = f"{where}.hooks[{i}]"
        if h.get("hookName") not in HOOK_NAMES:
            raise SpecError(f"{w}: invalid hook name {h.get('hookName')!r}")
        if not h.get("path"):
            raise SpecError(f"{w}: hook {h['hookName']!r} has no path")
        _env_error(h.get("env", []), f"{w}.env")
        if "timeout" in h and h["timeout"] <= 0:
            raise SpecError(f"{w}: timeout must be greater than zero")
    for i, d in enumerate(e.get("netDevices", [])):
        w = f"{where}.netDevices[{i}]"
        if not d.get("hostInterfaceName") or not d.get("name"):
            raise SpecError(f"{w}: hostInterfaceName and name are required")


def edits_empty(e: dict) -> bool:
    return not any(e.get(k) for k in ("env", "deviceNodes", "hooks", "mounts", "intelRdt",
                                      "additionalGids", "netDevices"))


def validate_spec(doc: dict, source: str = "<spec>", *, from_yaml: bool = False) -> dict:
    """Strictly check a decoded spec and return it with YAML scalars typed.
    SpecError ('<source>: <field>: <problem>') on the first problem."""
    try:
        return _validate(doc, from_yaml)
    except SpecError as e:
        raise SpecError(f"{source}: {e}") from None


def _validate(doc: dict, from_yaml: bool) -> dict:
    spec = _typed(doc, "spec", "", from_yaml)
    if not isinstance(spec, dict):  # (_typed has checked it is a mapping)
        raise SpecError("not a mapping")
    for req in ("cdiVersion", "kind", "devices"):
        if req not in spec:
            raise SpecError(f"missing required field {req!r}")
    declared = version.normalize(spec["cdiVersion"])
    if declared is None:
        raise SpecError(f"invalid cdiVersion {spec['cdiVersion']!r}")
    names.parse_kind(spec["kind"])
    if not spec["devices"]:
        raise SpecError("no devices")
    seen: set[str] = set()
    for i, d in enumerate(spec["devices"]):
        name = d.get("name")
        if name is None:
            raise SpecError(f"devices[{i}]: missing device name")
        err = names.device_name_error(name)
        if err:
            raise SpecError(f"devices[{i}]: {err}")
        if name in seen:
            raise SpecError(f"duplicate device name {name!r}")
        seen.add(name)
        if edits_empty(d.get("containerEdits") or {}):
            raise SpecError(f"device {name!r} has no containerEdits")
        _check_edits(d["containerEdits"], f"devices[{i}].containerEdits")
    _check_edits(spec.get("containerEdits") or {}, "containerEdits")
    needed = version.minimum_version(spec)
    if version.key(declared) < version.key(needed):
        raise SpecError(f"cdiVersion {spec['cdiVersion']} is too low for the content,"
                        f" must be at least v{needed}")
    return spec


def spec_from_data(data: bytes | str, source: str = "<spec>", *, fmt: str | None = None,
                   priority: int = 0, check: DocCheck | None = None) -> Spec:
    """A validated Spec from a file's bytes; `check` also applies to the document (for
    JSON before the strict validation, for YAML after it has typed the scalars)."""
    doc, from_yaml = parse_spec_data(data, source, fmt=fmt)
    if check is not None and not from_yaml:
        check(doc, source)
    spec = validate_spec(doc, source, from_yaml=from_yaml)
    if check is not None and from_yaml:  # YAML scalars are typed by validate_spec first
        check(spec, source)
    return Spec(spec, path=None if source.startswith("<") else source, priority=priority)


def load_spec(path: str, *, priority: int = 0, check: DocCheck | None = None, cache: SpecCache | None = None) -> Spec:
    """Read and strictly validate one spec file; `check` also applies (spec_from_data) and
    bypasses the cache.
    `cache` (nct.hostcache.SpecCache): reuse the validated document of this very file (same
    device, inode, size, mtime, ctime) instead of parsing YAML again (~8 ms for 8 GPUs)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())  # the identity of exactly the bytes read
            key = cache.key(path, st) if cache is not None and check is None else None  # None: no caching
            if cache is not None and key is not None:
                hit = cache.get(key)
                if isinstance(hit, dict):
                    try:
                        return Spec(hit, path=path, priority=priority)
                    except (KeyError, TypeError, ValueError, NctError):
                        pass  # not a document we stored: parse the file
            data = read_document(f)
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise SpecError(f"{path}: {e}") from None
    spec = spec_from_data(data, path, priority=priority, check=check)
    if cache is not None and key is not None:
        cache.put(key, spec.raw)
    return spec


# --- writing ------------------------------------------------------------------------

def format_for_path(path: str, fmt: str | None = None) -> tuple[str, str]:
    """(path, format): the extension picks the format; a path without .json/.yaml/.yml
    gets the format's extension appended (yaml when neither is given), as upstream."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".json":
        return path, "json"
    if ext in (".yaml", ".yml"):
        return path, "yaml"
    fmt = (fmt or "yaml").lower()
    if fmt not in ("json", "yaml"):
        raise SpecError(f"invalid format {fmt!r}, should be json or yaml")
    return f"{path}.{fmt}", fmt


def with_minimum_version(spec: dict) -> dict:
    """A copy of `spec` whose cdiVersion is the minimum its content needs, first key."""
    out = {"cdiVersion": version.minimum_version(spec)}
    out.update((k, v) for k, v in spec.items() if k != "cdiVersion")
    return out


def dump_spec(spec: dict, fmt: str = "yaml") -> str:
    """Serialise a spec: JSON (2-space indent, field order kept) or YAML (sorted keys, with
    a leading '---' as nvidia-ctk writes)."""
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    return _yaml_dump(spec)


def _yaml_dump(doc: dict) -> str:
    import yaml

    base: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's when there

    class Dumper(base):
        def ignore_aliases(self, data) -> bool:  # shared sub-objects are written out in full
            return True

    return yaml.dump(doc, Dumper=Dumper, explicit_start=True, default_flow_style=False,
                     sort_keys=True, width=4096, allow_unicode=True)


def save_spec(spec: dict, path: str, *, fmt: str | None = None, set_version: bool = True) -> str:
    """Validate and atomically write a spec (mode 0644); returns the path written.
    `set_version` rewrites cdiVersion to the minimum the content needs."""
    from nct.fileio import atomic_write

    path, fmt = format_for_path(path, fmt)
    if set_version:
        spec = with_minimum_version(spec)
    validate_spec(spec, path)
    data = dump_spec(spec, fmt).encode("utf-8")
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        atomic_write(path, data, mode=0o644, keep_owner=False)
    except OSError as e:
        raise SpecError(f"{path}: cannot write: {e.strerror or e}") from None
    return path


def spec_file_name(vendor: str, cls: str, transient_id: str | None = None) -> str:
    """Upstream's generated spec name: 'vendor-class' or 'vendor-class_<id>'."""
    base = f"{vendor}-{cls}".replace("/", "-")
    return f"{base}_{transient_id}" if transient_id else base
