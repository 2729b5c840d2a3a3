"""The nvidia-cdi-hook operations on a container root, built on the same primitives as
apply.py. They run as OCI createContainer hooks: already in the container's mount namespace,
before pivot_root, with the container root given by the bundle. Nothing here reads the
container's environment; processes we start get an empty one."""

from __future__ import annotations

import os
import stat

from nct.container import syscalls as sc
from nct.container.rootfs import Root
from nct import jsonio
from nct.errors import ContainerError
from nct.limits import read_document

APP_PROFILE_DIR = "/etc/nvidia/nvidia-application-profiles-rc.d"
APP_PROFILE_FILE = APP_PROFILE_DIR + "/10-container.conf"


def container_root(state: dict | None = None, spec_path: str | None = None) -> str:
    """The container's root path, as upstream's OCI state helper: root.path of the bundle's
    config.json, a relative (or absent) one taken relative to the bundle directory; an
    absolute `root` in the state itself (crun) wins. `spec_path` (--container-spec naming a
    config.json rather than a state file) stands for <bundle>/config.json."""
    bundle = (state or {}).get("bundle") if spec_path is None else os.path.dirname(os.path.abspath(spec_path))
    if not isinstance(bundle, str) or not bundle:
        raise ContainerError("container state has no bundle")
    if state is not None and isinstance(state.get("root"), str) and state["root"]:
        return os.path.join(bundle, state["root"])
    if spec_path is None:
        spec_path = os.path.join(bundle, "config.json")
    try:
        with open(spec_path, "rb") as f:
            spec = jsonio.loads(read_document(f))
    except OSError as e:
        raise ContainerError(f"{spec_path}: {e.strerror}") from None
    except ValueError as e:
        raise ContainerError(f"{spec_path}: invalid JSON: {e}") from None
    root = spec.get("root") if isinstance(spec, dict) else None
    path = root.get("path") if isinstance(root, dict) else None
    if path is None:
        path = ""
    if not isinstance(path, str):
        raise ContainerError(f"{spec_path}: root.path must be a string")
    return os.path.join(bundle, path) if path else bundle


def open_root(path: str) -> Root:
    if os.path.normpath(path) == "/":
        raise ContainerError("container root must not be /")
    root = Root(path)
    # By identity, not by name: "//", "/./..", a symlink or a bind mount of / are / too.
    try:
        st, host = os.fstat(root.fd), os.stat("/")
    except OSError as e:
        root.close()
        raise ContainerError(f"container root {path}: {e.strerror}") from None
    if (st.st_dev, st.st_ino) == (host.st_dev, host.st_ino):
        root.close()
        raise ContainerError(f"container root {path} must not be /")
    return root


def create_symlinks(root: Root, links: list[str]) -> int:
    """--link TARGET::LINK. Returns how many links were created or replaced."""
    made = 0
    for spec in links:
        target, sep, link = spec.partition("::")
        if not sep or not target or not link:
            raise ContainerError(f"invalid --link {spec!r}: want TARGET::LINK")
        made += root.symlink(target, link)
    return made


def chmod_paths(root: Root, mode: int, paths: list[str]) -> None:
    for p in paths:
        try:
            root.chmod(p, mode)
        except FileNotFoundError:  # absent, or a dangling symlink: skipped, as upstream
            continue


def params_without_modify(data: bytes) -> bytes | None:
    """The params file with `ModifyDeviceFiles: 1` made 0, as upstream's hook rewrites it: line
    by line (newline-terminated, a CR before it dropped), only a line that is exactly that
    (not `ModifyDeviceFiles: 11`, nor one with extra spaces); a line exactly
    `ModifyDeviceFiles: 0` means nothing to do. None when nothing changes."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out, changed = [], False
    for line in lines:
        line = line[:-1] if line.endswith(b"\r") else line
        if line == b"ModifyDeviceFiles: 0":
            return None
        if line == b"ModifyDeviceFiles: 1":
            line, changed = b"ModifyDeviceFiles: 0", True
        out.append(line + b"\n")
    return b"".join(out) if changed else None


def disable_device_node_modification(root: Root, host_params: str = "/proc/driver/nvidia/params") -> bool:
    """Show the container a copy of the driver params with ModifyDeviceFiles: 0 (so CUDA in
    the container never tries to create device nodes). No-op unless the host says 1."""
    try:
        with open(host_params, "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return False
    data = params_without_modify(raw)
    if data is None:
        return False
    try:
        target = root.open("/proc/driver/nvidia/params", os.O_PATH)
    except FileNotFoundError:
        return False
    try:
        if not sc.new_mount_api():
            _params_copy_mount2(root, target, data)
            return True
        attrs = sc.MOUNT_ATTR_RDONLY | sc.MOUNT_ATTR_NODEV | sc.MOUNT_ATTR_NOSYMFOLLOW
        mnt = sc.fsmount_tmpfs({"mode": "0555"}, sc.MOUNT_ATTR_NODEV | sc.MOUNT_ATTR_NOSUID | sc.MOUNT_ATTR_NOEXEC,
                               "params copy")
        try:
            fd = os.open("nvct-params", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=mnt)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            try:  # bind the file straight out of the detached tmpfs (recent kernels)
                src = sc.open_tree(mnt, "nvct-params", sc.OPEN_TREE_CLONE | sc.OPEN_TREE_CLOEXEC)
            except ContainerError:  # older kernels: the tmpfs must be mounted first (as upstream)
                holder = root.mkdirs(f"/run/nvidia-ctk-hook-{os.urandom(16).hex()[:12]}")
                try:
                    sc.move_mount(mnt, "", holder, "", sc.MOVE_MOUNT_F_EMPTY_PATH | sc.MOVE_MOUNT_T_EMPTY_PATH,
                                  "params copy")
                finally:
                    os.close(holder)
                src = sc.open_tree(mnt, "nvct-params", sc.OPEN_TREE_CLONE | sc.OPEN_TREE_CLOEXEC)
        finally:
            os.close(mnt)
        try:
            sc.mount_setattr(src, attrs, what="params copy")
            sc.move_mount(src, "", target, "", sc.MOVE_MOUNT_F_EMPTY_PATH | sc.MOVE_MOUNT_T_EMPTY_PATH,
                          "/proc/driver/nvidia/params")
        finally:
            os.close(src)
    finally:
        os.close(target)
    return True


def _params_copy_mount2(root: Root, target: int, data: bytes) -> None:
    """disable_device_node_modification on a kernel without the new mount API (< 5.12): a
    tmpfs on a fresh in-root holder dir, the copy written there, bound onto `target` through
    fd magic links (mount(2) takes paths only), then remounted read-only."""
    holder_path = f"/run/nvidia-ctk-hook-{os.urandom(16).hex()[:12]}"
    holder = root.mkdirs(holder_path)
    try:
        under = os.fstat(holder).st_dev
        sc.mount("tmpfs", sc.fd_path(holder), "tmpfs", sc.MS_NODEV | sc.MS_NOSUID | sc.MS_NOEXEC, "mode=0555",
                 what="params copy")
    finally:
        os.close(holder)
    mnt = root.open(holder_path, os.O_PATH | os.O_DIRECTORY)
    try:
        if os.fstat(mnt).st_dev == under:
            raise ContainerError(f"mount {holder_path}: target changed while mounting in container root {root.path}")
        fd = os.open("nvct-params", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=mnt)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        src = os.open("nvct-params", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=mnt)
        try:
            sc.mount(sc.fd_path(src), sc.fd_path(target), None, sc.MS_BIND, what="/proc/driver/nvidia/params")
        finally:
            os.close(src)
    finally:
        os.close(mnt)
    fd = root.open("/proc/driver/nvidia/params", os.O_PATH)
    try:
        sc.mount(None, sc.fd_path(fd), None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NODEV | sc.MS_NOSUID,
                 what="options of /proc/driver/nvidia/params")
    finally:
        os.close(fd)


def gpu_minor_mask(root: Root) -> int:
    """Bitmask of the minors (0-63) of the /dev/nvidiaN char devices in the container."""
    mask = 0
    for name in root.listdir("/dev"):
        # nvidiaN (not `re`: the hooks' start-up imports stay small)
        if not (name.startswith("nvidia") and name[6:].isdecimal()):
            continue
        st = root.lstat(f"/dev/{name}")
        if st is None or not stat.S_ISCHR(st.st_mode):
            continue
        minor = os.minor(st.st_rdev)
        if minor < 64:
            mask |= 1 << minor
    return mask


def application_profile(mask: int) -> str:
    return (
        "{\n"
        '    "profiles": [\n'
        "        {\n"
        '            "name": "_container_",\n'
        f'            "settings": [ "EGLVisibleDGPUDevices", {hex(mask)} ]\n'
        "        }\n"
        "    ],\n"
        '    "rules": [\n'
        "        {\n"
        '            "pattern": [],\n'
        '            "profile": "_container_"\n'
        "        }\n"
        "    ]\n"
        "}\n"
    )


def update_application_profile(root: Root) -> bool:
    mask = gpu_minor_mask(root)
    if not mask:
        return False
    os.close(root.mkdirs("/etc/nvidia"))
    os.close(root.mkdirs(APP_PROFILE_DIR, 0o555))
    root.write_file(APP_PROFILE_FILE, application_profile(mask).encode(), 0o444)
    return True
