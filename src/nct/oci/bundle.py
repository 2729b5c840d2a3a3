"""Read and write an OCI spec file (a bundle's config.json).

The spec stays a plain dict so fields we do not know survive a round trip unchanged;
only the parts nct reads or edits are type-checked (`check_spec_types`), each failure a
one-line SpecError naming the file and the key."""

from __future__ import annotations

from nct import jsonio
from nct.errors import SpecError
from nct.fileio import atomic_write

CONFIG_NAME = "config.json"


def read_spec_file(path: str) -> dict:
    """Load an OCI spec file; SpecError for a missing file, bad JSON (line and column), or
    a document that is not an object."""
    return jsonio.read_object(path, SpecError, missing="no such file (is the bundle path right?)",
                              cannot_read="cannot read: {}",
                              not_object="the OCI spec must be a JSON object, not {}")


def dump_spec(spec: dict) -> bytes:
    """Compact JSON, as upstream writes it back."""
    try:
        return jsonio.dumps_compact(spec).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from \\ud800-style escapes: keep them escaped
        return jsonio.dumps_compact(spec, ensure_ascii=True).encode("ascii")


def write_spec_file(path: str, spec: dict, *, durable: bool = True) -> None:
    data = dump_spec(spec)
    try:
        atomic_write(path, data, durable=durable)
    except OSError as e:
        raise SpecError(f"{path}: cannot write: {e.strerror or e}") from None


# --- type checks of the parts nct reads or edits -------------------------------------

def _want(path: str, key: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise SpecError(f"{path}: {key} must be {what}, not {jsonio.type_name(value)}")


def _str_list(path: str, key: str, value: object) -> None:
    _want(path, key, value, list, "an array of strings")
    for i, item in enumerate(value if isinstance(value, list) else ()):
        _want(path, f"{key}[{i}]", item, str, "a string")


def _int(path: str, key: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{path}: {key} must be an integer, not {jsonio.type_name(value)}")


def check_spec_types(spec: dict, path: str = CONFIG_NAME) -> None:
    """Type-check what nct reads or edits: ociVersion, process (env, user, capabilities),
    root.path, mounts, hooks, annotations, linux.devices, linux.resources.devices.
    Absent parts are fine; present ones must have the OCI types."""
    if "ociVersion" in spec:
        _want(path, "ociVersion", spec["ociVersion"], str, "a string")
    proc = spec.get("process")
    if proc is not None:
        _want(path, "process", proc, dict, "an object")
        if proc.get("env") is not None:
            _str_list(path, "process.env", proc["env"])
        if proc.get("args") is not None:
            _str_list(path, "process.args", proc["args"])
        user = proc.get("user")
        if user is not None:
            _want(path, "process.user", user, dict, "an object")
            for k in ("uid", "gid"):
                if user.get(k) is not None:
                    _int(path, f"process.user.{k}", user[k])
            gids = user.get("additionalGids")
            if gids is not None:
                _want(path, "process.user.additionalGids", gids, list, "an array of integers")
                for i, g in enumerate(gids):
                    _int(path, f"process.user.additionalGids[{i}]", g)
        caps = proc.get("capabilities")
        if caps is not None:
            if isinstance(caps, list):  # OCI 1.0.0-rc1..rc5: a flat list
                _str_list(path, "process.capabilities", caps)
            else:
                _want(path, "process.capabilities", caps, dict, "an object")
                for k, v in caps.items():
                    if v is not None:
                        _str_list(path, f"process.capabilities.{k}", v)
    root = spec.get("root")
    if root is not None:
        _want(path, "root", root, dict, "an object")
        if root.get("path") is not None:
            _want(path, "root.path", root["path"], str, "a string")
    mounts = spec.get("mounts")
    if mounts is not None:
        _want(path, "mounts", mounts, list, "an array")
        for i, m in enumerate(mounts):
            _want(path, f"mounts[{i}]", m, dict, "an object")
            _want(path, f"mounts[{i}].destination", m.get("destination"), str, "a string")
            for k in ("source", "type"):
                if m.get(k) is not None:
                    _want(path, f"mounts[{i}].{k}", m[k], str, "a string")
            if m.get("options") is not None:
                _str_list(path, f"mounts[{i}].options", m["options"])
    hooks = spec.get("hooks")
    if hooks is not None:
        _want(path, "hooks", hooks, dict, "an object")
        for stage, lst in hooks.items():
            if lst is None:
                continue
            _want(path, f"hooks.{stage}", lst, list, "an array")
            for i, h in enumerate(lst):
                _want(path, f"hooks.{stage}[{i}]", h, dict, "an object")
                _want(path, f"hooks.{stage}[{i}].path", h.get("path"), str, "a string")
    ann = spec.get("annotations")
    if ann is not None:
        _want(path, "annotations", ann, dict, "an object")
        for k, v in ann.items():
            _want(path, f"annotations.{k}", v, str, "a string")
    linux = spec.get("linux")
    if linux is not None:
        _want(path, "linux", linux, dict, "an object")
        devs = linux.get("devices")
        if devs is not None:
            _want(path, "linux.devices", devs, list, "an array")
            for i, d in enumerate(devs):
                _want(path, f"linux.devices[{i}]", d, dict, "an object")
                _want(path, f"linux.devices[{i}].path", d.get("path"), str, "a string")
        res = linux.get("resources")
        if res is not None:
            _want(path, "linux.resources", res, dict, "an object")
            rules = res.get("devices")
            if rules is not None:
                _want(path, "linux.resources.devices", rules, list, "an array")
                for i, r in enumerate(rules):
                    _want(path, f"linux.resources.devices[{i}]", r, dict, "an object")


# --- strict decode: fields the OCI runtime spec defines, at every depth -----------------

def unknown_fields(spec: dict) -> list[str]:
    """Dotted names of the fields the OCI runtime spec does not define, in document order,
    at any depth (upstream's strict Go decode refuses the first of them). Free-form maps
    (annotations, sysctl, unified, ...) take any key; a value of the wrong type is left to
    check_spec_types and the runtime."""
    from nct.oci.specfields import FIELDS

    out: list[str] = []

    def scan(obj: object, shape: object, label: str) -> None:
        if shape is None:
            return
        if isinstance(shape, dict):
            if isinstance(obj, dict):
                for k, v in obj.items():
                    where = f"{label}.{k}" if label else k
                    if k in shape:
                        scan(v, shape[k], where)
                    else:
                        out.append(where)
            return
        kind, inner = shape if isinstance(shape, tuple) else ("", None)  # FIELDS: ("list"|"map", shape)
        if kind == "list" and isinstance(obj, list):
            for i, v in enumerate(obj):
                scan(v, inner, f"{label}[{i}]")
        elif kind == "map" and isinstance(obj, dict):
            for k, v in obj.items():
                scan(v, inner, f"{label}.{k}")

    scan(spec, FIELDS, "")
    return out
