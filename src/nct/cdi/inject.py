"""Apply edits to an OCI spec dict with the CDI merge rules.

One engine (`apply_cdi_edits`) works on CDI containerEdits dicts; `apply_edits_to_spec`
renders ContainerEdits to that form first (our hooks included), so the JIT path and CDI
registry injection merge identically:
- env: an existing KEY is replaced in place, new keys appended;
- deviceNodes: missing type/major/minor/fileMode filled from a stat of the host node,
  uid/gid default to process.user's when > 0, a device with the same path is replaced,
  b/c devices get a `linux.resources.devices` allow rule (access default "rwm");
- mounts: a mount at the same destination is replaced, then all mounts are stably sorted
  by path depth (ties by destination);
- hooks: appended to the named list (unknown name -> error);
- additionalGids: appended to process.user.additionalGids (0 skipped, no repeats);
- intelRdt replaced, netDevices set.
The spec is edited in place and returned."""

from __future__ import annotations

import os
import stat as stat_mod

from nct.cdi.hooks import DEFAULT_HOOK_PATH, HookOptions
from nct.edits.model import ContainerEdits
from nct.errors import SpecError

HOOK_LISTS = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")


def apply_edits_to_spec(spec: dict, edits: ContainerEdits, *, hook_path: str = DEFAULT_HOOK_PATH,
                        ldconfig_path: str | None = None, driver_version: str | None = None,
                        disabled_hooks: tuple[str, ...] | frozenset[str] = (),
                        steps: bool = False) -> dict:
    """Render `edits` into the OCI `spec` (in place; returned). `symlinks`,
    `ldconfig_folders`, `proc_driver_gpus` and CUDA compat become createContainer hooks
    running `hook_path` (one `nct-steps` hook with `steps`; see nct.cdi.hooks)."""
    from nct.cdi.render import edits_to_cdi

    opts = HookOptions(hook_path=hook_path, ldconfig_path=ldconfig_path,
                       driver_version=driver_version, disabled=frozenset(disabled_hooks),
                       steps=steps)
    return apply_cdi_edits(spec, edits_to_cdi(edits, opts, with_type=True))


# --- the merge engine ----------------------------------------------------------------

def _obj(parent: dict, key: str, where: str) -> dict:
    v = parent.get(key)
    if v is None:
        v = parent[key] = {}
    elif not isinstance(v, dict):
        raise SpecError(f"OCI spec: {where} must be an object")
    return v


def _lst(parent: dict, key: str, where: str) -> list:
    v = parent.get(key)
    if v is None:
        v = parent[key] = []
    elif not isinstance(v, list):
        raise SpecError(f"OCI spec: {where} must be an array")
    return v


def host_device_info(host_path: str) -> tuple[str, int, int, int]:
    """(type, major, minor, permission bits) of a host device node; SpecError otherwise."""
    try:
        st = os.stat(host_path)
    except OSError as e:
        raise SpecError(f"CDI device node {host_path}: cannot stat: {e.strerror}") from None
    if stat_mod.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat_mod.S_ISBLK(st.st_mode):
        kind = "b"
    elif stat_mod.S_ISFIFO(st.st_mode):
        kind = "p"
    else:
        raise SpecError(f"CDI device node {host_path}: not a device node")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat_mod.S_IMODE(st.st_mode)


def fill_device_node(node: dict) -> dict:
    """A copy of a CDI deviceNode with type/major/minor/fileMode completed from the host
    node, as the reference library does: no stat when type and a major (or type p) are
    given; a declared type must match the host's."""
    d = dict(node)
    host = d.get("hostPath") or d["path"]
    dtype = d.get("type", "")
    if dtype and (d.get("major", 0) != 0 or dtype == "p"):
        return d
    htype, major, minor, mode = host_device_info(host)
    if not dtype:
        d["type"] = htype
    elif dtype != htype and not (dtype == "u" and htype == "c"):
        raise SpecError(f"CDI device node {d['path']}: type {dtype!r} but host {host} is {htype!r}")
    if d.get("fileMode") is None:
        d["fileMode"] = mode
    if d["type"] != "p" and d.get("major", 0) == 0:
        d["major"], d["minor"] = major, minor
    return d


def _depth(dest: str) -> int:
    return os.path.normpath(dest).count("/")


def _key(entry: dict, name: str) -> str | None:
    """entry[name] when it is a string (a spec may hold anything: only strings match)."""
    v = entry.get(name)
    return v if isinstance(v, str) else None


def sort_mounts(mounts: list) -> None:
    """Stable sort by path depth, then destination (parents before children)."""
    mounts.sort(key=lambda m: (_depth(m.get("destination", "")), m.get("destination", "")))


def apply_cdi_edits(spec: dict, edits: dict) -> dict:
    """Apply one CDI containerEdits dict to the OCI `spec` (in place; returned)."""
    if not edits:
        return spec
    env_new = edits.get("env") or []
    user_uid = user_gid = None
    proc = spec.get("process")
    if isinstance(proc, dict) and isinstance(proc.get("user"), dict):
        user_uid, user_gid = proc["user"].get("uid"), proc["user"].get("gid")

    if env_new:
        proc = _obj(spec, "process", "process")
        env = _lst(proc, "env", "process.env")
        index: dict[str, int] = {}
        for i, e in enumerate(env):
            index.setdefault(e.split("=", 1)[0], i)
        for e in env_new:
            k = e.split("=", 1)[0]
            if k in index:
                env[index[k]] = e
            else:
                env.append(e)
                index[k] = len(env) - 1

    nodes = edits.get("deviceNodes") or []
    if nodes:
        linux = _obj(spec, "linux", "linux")
        devices = _lst(linux, "devices", "linux.devices")
        rules = None
        added: dict[str, dict] = {}  # by path, the last one wins (appended after the others)
        for raw in nodes:
            d = fill_device_node(raw)
            dev: dict = {"path": d["path"], "type": d["type"], "major": d.get("major", 0),
                         "minor": d.get("minor", 0)}
            if d.get("fileMode") is not None:
                dev["fileMode"] = d["fileMode"]
            uid = d.get("uid", user_uid if isinstance(user_uid, int) and user_uid > 0 else None)
            gid = d.get("gid", user_gid if isinstance(user_gid, int) and user_gid > 0 else None)
            if uid is not None:
                dev["uid"] = uid
            if gid is not None:
                dev["gid"] = gid
            added.pop(dev["path"], None)
            added[dev["path"]] = dev
            if dev["type"] in ("b", "c"):
                access = d.get("permissions") or "rwm"
                if access == "none":
                    access = ""
                if rules is None:
                    rules = _lst(_obj(linux, "resources", "linux.resources"), "devices",
                                 "linux.resources.devices")
                rules.append({"allow": True, "type": dev["type"], "major": dev["major"],
                              "minor": dev["minor"], "access": access})
        # one pass over the existing devices: linear in the spec's and the edits' sizes
        devices[:] = [x for x in devices if not (isinstance(x, dict) and _key(x, "path") in added)]
        devices.extend(added.values())

    mounts_new = edits.get("mounts") or []
    if mounts_new:
        mounts = _lst(spec, "mounts", "mounts")
        new_mounts: dict[str, dict] = {}  # by destination, the last one wins
        for m in mounts_new:
            om: dict = {"destination": m["containerPath"]}
            if m.get("type"):
                om["type"] = m["type"]
            om["source"] = m["hostPath"]
            if m.get("options"):
                om["options"] = list(m["options"])
            new_mounts.pop(om["destination"], None)
            new_mounts[om["destination"]] = om
        mounts[:] = [x for x in mounts if not (isinstance(x, dict) and _key(x, "destination") in new_mounts)]
        mounts.extend(new_mounts.values())
        sort_mounts(mounts)

    for h in edits.get("hooks") or []:
        name = h.get("hookName")
        if name not in HOOK_LISTS:
            raise SpecError(f"CDI hook {h.get('path')}: unknown hook name {name!r}")
        oh: dict = {"path": h["path"]}
        for k in ("args", "env"):
            if h.get(k):
                oh[k] = list(h[k])
        if h.get("timeout") is not None:
            oh["timeout"] = h["timeout"]
        _lst(_obj(spec, "hooks", "hooks"), name, f"hooks.{name}").append(oh)

    if edits.get("intelRdt") is not None:
        _obj(spec, "linux", "linux")["intelRdt"] = dict(edits["intelRdt"])

    gids = [g for g in edits.get("additionalGids") or [] if g != 0]
    if gids:
        user = _obj(_obj(spec, "process", "process"), "user", "process.user")
        have = _lst(user, "additionalGids", "process.user.additionalGids")
        seen = {g for g in have if isinstance(g, int)}
        for g in gids:
            if g not in seen:
                seen.add(g)
                have.append(g)

    for nd in edits.get("netDevices") or []:
        net = _obj(_obj(spec, "linux", "linux"), "netDevices", "linux.netDevices")
        net[nd["hostInterfaceName"]] = {"name": nd["name"]}
    return spec
