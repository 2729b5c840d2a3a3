"""Apply ContainerEdits to a live container (nvidia-container-cli configure, the prestart hook).

Order of work, and why:
1. In this (host) process: device cgroup rules, then fork a worker.
2. Worker, still in the host mount namespace: open every host source as a detached mount
   (open_tree OPEN_TREE_CLONE) with its final mount flags already set, read the proc files to
   copy, and seal a copy of the host ldconfig. No source path is ever looked up in the
   container's view.
3. Worker: setns into /proc/PID/ns/mnt (no pid: stay), re-open the rootfs and check it is the
   same directory the host sees, then attach each source onto a target resolved and created
   inside the root (rootfs.Root): the /proc/driver/nvidia view first, then mounts
   shallowest-first, device nodes, symlinks, CUDA compat and an isolated ldconfig.
Errors travel back over a pipe as one line and are raised as ContainerError.

Kernels without open_tree/move_mount/fsmount (< 5.2) or mount_setattr (< 5.12), e.g. RHEL 8:
mount(2) instead (syscalls.new_mount_api() decides). A prestart hook runs before the
runtime pivots into the rootfs, so host paths still resolve in the container's namespace:
each source is opened there by its host path and must be the very file (device and inode)
stat'ed on the host side, then bound through /proc/self/fd magic links onto the in-root
target fd (no name is resolved twice) and remounted with its flags. A container that has
already pivoted (nvidia-container-cli configure after `runc create`) cannot be configured
that way: the identity check fails with a one-line error.
"""

from __future__ import annotations

import os
import stat

from nct import child
from nct.container import syscalls as sc
from nct.container.cgroups import DeviceRule, JailSite, allow_devices
from nct.container.rootfs import Root
from nct.edits.model import ContainerEdits, DeviceNodeEdit
from nct.errors import ContainerError
from nct.record import Record

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from nct.container.ldconfig import PendingLdconfig

DEVICE_ATTRS = sc.MOUNT_ATTR_RDONLY | sc.MOUNT_ATTR_NOSUID | sc.MOUNT_ATTR_NOEXEC
PROC_ATTRS = sc.MOUNT_ATTR_NODEV | sc.MOUNT_ATTR_NOSUID | sc.MOUNT_ATTR_NOEXEC
PROC_FILES = ("params", "version", "registry")
# fds the worker needs besides one per held source (Python, the root, cgroup, memfd, pipes).
FD_SLACK = 64
PIVOTED = ("the container has already pivoted into its root: without open_tree and mount_setattr "
           "(Linux < 5.12) a container can only be configured before it pivots, as a prestart hook does")


class ApplyOptions(Record):
    """Knobs of nvidia-container-cli configure (and config.toml) that change how edits apply.
    ldconfig: "@host-path" or a container path; driver_version: the host NVRM version, for
    CUDA compat; cuda_compat_mode: ldconfig | mount (treated as ldconfig) | disabled;
    proc_root: host procfs holding driver/nvidia (a sim node's root/proc); host_proc: procfs
    to find the container's pid/cgroups in."""

    no_cgroups: bool = False
    no_devbind: bool = False
    ldconfig: str = "@/sbin/ldconfig"
    no_ldconfig: bool = False
    no_pivot: bool = False
    driver_version: str | None = None
    cuda_version: str | None = None
    cuda_compat_mode: str = "ldconfig"
    proc_root: str = "/proc"
    host_proc: str = "/proc"


def device_rules(edits: ContainerEdits) -> list[DeviceRule]:
    rules: dict[DeviceRule, None] = {}  # ordered set: linear in the number of nodes
    for d in edits.device_nodes:
        acc = "".join(c for c in "rwm" if c in (d.permissions or "rw")) or "rw"
        rules[DeviceRule(d.type if d.type in ("b", "c") else "c", d.major, d.minor, acc)] = None
    return list(rules)


def apply_edits(edits: ContainerEdits, rootfs: str, pid: int | None, options: ApplyOptions = ApplyOptions(), *,
                in_process: bool = False, early: PendingLdconfig | None = None) -> None:
    """Configure the container whose root is `rootfs` (a host path; with `pid`, the container's
    mount namespace is entered first). Raises ContainerError with one line on failure.

    The work happens in a forked child, so that the caller stays in its own mount namespace;
    `in_process=True` is for a disposable caller that exits right afterwards (the prestart
    hook process): it does the work itself, and is left in the container's namespace.
    `early` (in_process only): ldconfig's child, already forked by `early_ldconfig` (used, or
    cancelled when the plan needs no ldconfig run; always ended here)."""
    try:
        if not os.path.isabs(rootfs) or os.path.normpath(rootfs) == "/" or _is_host_root(rootfs):
            raise ContainerError(f"invalid rootfs {rootfs!r}: must be an absolute path other than /")
        if pid is not None and not options.no_cgroups:
            allow_devices(pid, device_rules(edits), options.host_proc)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    if in_process:
        os.umask(0o022)
        _work(edits, rootfs, pid, options, early)  # ends `early`
        return
    if early is not None:
        early.cancel()
    _run_in_child(lambda: _work(edits, rootfs, pid, options))


def early_ldconfig(rootfs: str, pid: int | None, options: ApplyOptions) -> PendingLdconfig | None:
    """For a disposable caller (the prestart hook): fork ldconfig's child before discovery, so
    that its move into the deny-all device cgroup (a cgroup migration: ~10-14 ms waiting for an
    RCU grace period on a v1 hierarchy) overlaps discovery, planning and mounting rather than
    delaying ldconfig. None when no ldconfig runs. Hand it to apply_edits(early=...).
    The caller exits right after: the child is not waited for once it has reported
    ldconfig's end (start_ldconfig's `reap`)."""
    if options.no_ldconfig:
        return None
    from nct.container import ldconfig

    return ldconfig.start_ldconfig(None, ldconfig=options.ldconfig, no_pivot=options.no_pivot,
                                   enter=_entry(rootfs, pid, options.host_proc), reap=False)


def _entry(rootfs: str, pid: int | None, host_proc: str) -> Callable[[], Root]:
    """Enter the container (`_enter`) through its mount namespace as it is now: the fd is
    opened here, host side, before ldconfig's child is forked, and both that child and the
    caller enter through it, so that both get the same namespace even if `pid` exits and
    its number is reused by another process meanwhile."""
    if pid is None:
        return lambda: _enter(rootfs, pid, host_proc)
    try:
        nsfd = _open_ns(pid, host_proc)
    except ContainerError as e:  # reported when entering, after any earlier error (no driver, say)
        err = e

        def fail() -> Root:
            raise err
        return fail
    return lambda: _enter(rootfs, pid, host_proc, nsfd)


def _open_ns(pid: int, host_proc: str) -> int:
    try:
        return os.open(f"{host_proc}/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ContainerError(f"container pid {pid}: {e.strerror}") from None


def _is_host_root(rootfs: str) -> bool:
    """Whether `rootfs` is our / by identity ("//", a symlink or a bind mount of / are)."""
    try:
        fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False  # reported when the root is opened
    try:
        st, host = os.fstat(fd), os.stat("/")
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino) == (host.st_dev, host.st_ino)


def _run_in_child(fn) -> None:
    """fn() in a forked child (it enters the container's namespaces); its error comes
    back as one line."""
    def body(w: int) -> int:
        try:
            sc.prctl(sc.PR_SET_PDEATHSIG, 9)  # never outlive the hook
            os.umask(0o022)  # created dirs 0755, files as asked, whatever umask the runtime had
            fn()
            return 0
        except ContainerError as e:
            os.write(w, str(e).encode()[:4000])
        except BaseException as e:  # noqa: BLE001 - an unexpected error still comes back as one line
            os.write(w, f"{type(e).__name__}: {e}".encode()[:4000])
        return 1

    pid, r = child.fork(body)
    done = child.collect(pid, r)
    if done.ok:
        return
    data, status = done.data, done.status
    raise ContainerError(data.decode(errors="replace") or f"configuring the container failed (status {status})")


class _Source:
    """A host object to mount: a detached mount opened before entering the container (fd),
    or, without the new mount API, its host path and identity (fd -1; see the docstring)."""

    __slots__ = ("fd", "st", "target", "is_dir", "host_path", "attrs", "detached")

    def __init__(self, fd: int, st: os.stat_result, target: str, host_path: str, attrs: int) -> None:
        self.fd, self.st, self.target, self.host_path, self.attrs = fd, st, target, host_path, attrs
        self.is_dir = stat.S_ISDIR(st.st_mode)
        self.detached = fd >= 0


def _open_source(host_path: str, target: str, attrs: int) -> _Source:
    try:
        st = os.stat(host_path)
    except OSError as e:
        raise ContainerError(f"host file {host_path}: {e.strerror}") from None
    if not sc.new_mount_api():
        return _Source(-1, st, target, host_path, attrs)
    fd = sc.open_tree(-100, host_path, sc.OPEN_TREE_CLONE | sc.OPEN_TREE_CLOEXEC)
    if attrs:
        sc.mount_setattr(fd, attrs, what=host_path)
    return _Source(fd, os.fstat(fd), target, host_path, attrs)


def _release(src: _Source) -> None:
    """Close a source's detached mount once it is attached (or failed to be): only the
    sources not yet attached hold an fd."""
    if src.fd >= 0:
        os.close(src.fd)
        src.fd = -1


def _bind(src: _Source, tfd: int) -> None:
    """Mount `src` onto the target fd (an O_PATH fd resolved inside the root)."""
    if src.detached:
        sc.move_mount(src.fd, "", tfd, "", sc.MOVE_MOUNT_F_EMPTY_PATH | sc.MOVE_MOUNT_T_EMPTY_PATH, src.target)
        return
    try:
        sfd = os.open(src.host_path, os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        sfd, err = -1, e.strerror
    try:
        st = os.fstat(sfd) if sfd >= 0 else None
        if st is None or (st.st_dev, st.st_ino) != (src.st.st_dev, src.st.st_ino):
            raise ContainerError(f"host file {src.host_path} is not the same in the container's mount namespace "
                                 f"({err if st is None else 'another file'}): {PIVOTED}")
        sc.mount(sc.fd_path(sfd), sc.fd_path(tfd), None, sc.MS_BIND, what=src.target)
    finally:
        if sfd >= 0:
            os.close(sfd)


def _remount(fd: int, attrs: int, what: str) -> None:
    """mount(2) only: set a fresh bind mount's flags (fd: its root), keeping those it has."""
    keep = os.fstatvfs(fd).f_flag & (sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    sc.mount(None, sc.fd_path(fd), None, sc.MS_REMOUNT | sc.MS_BIND | keep | sc.ms_flags(attrs),
             what=f"options of {what}")


def _attach(root: Root, src: _Source) -> None:
    """Mount a prepared source onto its target inside the root, then verify it is there."""
    tfd = root.mount_target(src.target, src.is_dir)
    try:
        _bind(src, tfd)
    finally:
        os.close(tfd)
        _release(src)
    fd = root.open(src.target)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (src.st.st_dev, src.st.st_ino):
            raise ContainerError(f"mount {src.target}: target changed while mounting in container root {root.path}")
        if src.attrs and not src.detached:
            _remount(fd, src.attrs, src.target)
    finally:
        os.close(fd)


def _enter(rootfs: str, pid: int | None, host_proc: str, nsfd: int | None = None) -> Root:
    """Enter the container's mount namespace and open its root, checking it is the directory
    the host knows as `rootfs` (or, once the runtime has pivoted, the namespace's /).
    `nsfd`: that namespace, opened earlier (`_entry`); kept open."""
    try:
        want = os.stat(rootfs)
    except OSError as e:
        raise ContainerError(f"rootfs {rootfs}: {e.strerror}") from None
    if pid is None:
        return Root(rootfs)
    own_ns = nsfd is None
    if nsfd is None:
        nsfd = _open_ns(pid, host_proc)
    proc_self = os.open("/proc/self", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # ours, for Root's mount checks
    # the host's mount table, for Root's volume checks: an open mountinfo keeps showing the
    # namespace it was opened in (after a pivot the container's table lacks the host's mounts)
    host_mounts = (os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC), os.path.realpath(rootfs))
    try:
        sc.setns(nsfd, sc.CLONE_NEWNS, f"mount namespace of pid {pid}")
    except BaseException:
        os.close(host_mounts[0])
        raise
    finally:
        if own_ns:
            os.close(nsfd)
    for candidate in (rootfs, "/"):
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
            if candidate == "/" and not sc.new_mount_api():
                os.close(host_mounts[0])
                raise ContainerError(PIVOTED)
            return Root(candidate, proc_self=proc_self, host_mounts=host_mounts)
    os.close(host_mounts[0])
    raise ContainerError(f"rootfs {rootfs} not found in the mount namespace of pid {pid}")


def _proc_copies(proc_root: str) -> dict[str, bytes]:
    out = {}
    for name in PROC_FILES:
        try:
            with open(f"{proc_root}/driver/nvidia/{name}", "rb") as f:
                data = f.read(1 << 20)
        except OSError:
            continue
        if name == "params":
            # libnvidia-container's rule: the first "ModifyDeviceFiles: 1" gets its digit set to 0
            data = data.replace(b"ModifyDeviceFiles: 1", b"ModifyDeviceFiles: 0", 1)
        out[name] = data
    return out


def _tmpfs(root: Root, path: str, target: int) -> int:
    """Mount a tmpfs (0555, nodev,nosuid,noexec) on the in-root directory fd `target` (the
    directory `path`); returns an fd of the new tmpfs's root, to fill it through."""
    if sc.new_mount_api():
        mnt = sc.fsmount_tmpfs({"mode": "0555"}, PROC_ATTRS, path)
        try:
            sc.move_mount(mnt, "", target, "", sc.MOVE_MOUNT_F_EMPTY_PATH | sc.MOVE_MOUNT_T_EMPTY_PATH, path)
        except BaseException:
            os.close(mnt)
            raise
        return mnt
    under = os.fstat(target).st_dev
    sc.mount("tmpfs", sc.fd_path(target), "tmpfs", sc.ms_flags(PROC_ATTRS), "mode=0555", what=path)
    mnt = root.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    if os.fstat(mnt).st_dev == under:
        os.close(mnt)
        raise ContainerError(f"mount {path}: target changed while mounting in container root {root.path}")
    return mnt


def _proc_view(root: Root, files: dict[str, bytes], gpus: list[tuple[str, _Source]]) -> None:
    """tmpfs (0555, nodev,nosuid,noexec) at /proc/driver/nvidia with copies of the driver's
    proc files and the selected GPUs' dirs bind-mounted under gpus/."""
    target = _proc_target(root)
    try:
        mnt = _tmpfs(root, "/proc/driver/nvidia", target)
    finally:
        os.close(target)
    try:
        for name, data in files.items():
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=mnt)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        if gpus:
            os.mkdir("gpus", 0o555, dir_fd=mnt)
        for bus, src in gpus:
            os.mkdir(f"gpus/{bus}", 0o555, dir_fd=mnt)
            tfd = os.open(f"gpus/{bus}", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=mnt)
            try:
                _bind(src, tfd)
            finally:
                os.close(tfd)
                _release(src)
            if src.attrs and not src.detached:
                fd = os.open(f"gpus/{bus}", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=mnt)
                try:
                    _remount(fd, src.attrs, f"/proc/driver/nvidia/gpus/{bus}")
                finally:
                    os.close(fd)
    finally:
        os.close(mnt)


def _proc_target(root: Root) -> int:
    """/proc/driver/nvidia in the container. When the container's procfs has no such dir (no
    real driver loaded: simulated nodes), a tmpfs over /proc/driver provides one."""
    try:
        return root.mkdirs("/proc/driver/nvidia")
    except ContainerError:
        pass
    drv = root.mkdirs("/proc/driver")
    try:
        mnt = _tmpfs(root, "/proc/driver", drv)
        try:
            os.mkdir("nvidia", 0o555, dir_fd=mnt)
        finally:
            os.close(mnt)
    finally:
        os.close(drv)
    return root.mkdirs("/proc/driver/nvidia")


def _depth(path: str) -> int:
    return len([c for c in path.split("/") if c])


def _work(edits: ContainerEdits, rootfs: str, pid: int | None, options: ApplyOptions,
          early: PendingLdconfig | None = None) -> None:
    from nct.container import ldconfig

    run_ld = not options.no_ldconfig and (edits.ldconfig_folders or edits.cuda_compat_dir)
    pending = early
    try:
        # -- host side: open everything we will mount or run --
        # One detached mount (fd) per source is held until the container side attaches (and
        # closes) it: the fd limit follows the plan, so no number of mounts is too many.
        held = len(edits.mounts) + (0 if options.no_devbind else len(edits.device_nodes))
        held += len(edits.proc_driver_gpus or ())
        if held and sc.new_mount_api():
            sc.ensure_nofile(held + FD_SLACK, f"mounting {held} files and devices")
        if pending is not None and not run_ld:
            pending.cancel()
            pending = None
        if run_ld and pending is None:
            ld_fd = None
            host_ld = ldconfig.host_ldconfig(options.ldconfig)
            if host_ld is not None:
                ld_fd = ldconfig.sealed_copy(host_ld)
            jails = JailSite()  # host side: the container's view may lack our cgroup
            # ldconfig's child first, host side: its move into the deny-all device cgroup (a
            # cgroup migration, ~10-14 ms waiting for an RCU grace period on a v1 hierarchy)
            # overlaps opening the sources and the mounting below; it enters the container itself
            pending = ldconfig.start_ldconfig(None, ldconfig=options.ldconfig, no_pivot=options.no_pivot,
                                              ldconfig_fd=ld_fd, jail_site=jails,
                                              enter=_entry(rootfs, pid, options.host_proc))
        _host_then_container(edits, rootfs, pid, options, pending)
    finally:
        if pending is not None:
            pending.cancel()


def _host_then_container(edits: ContainerEdits, rootfs: str, pid: int | None, options: ApplyOptions,
                         pending: PendingLdconfig | None) -> None:
    """Open every source host side, enter the container, attach them, then run ldconfig."""
    from nct.container import compat

    mounts = []
    for m in sorted(edits.mounts, key=lambda m: _depth(m.container_path)):
        if m.type not in (None, "bind", "rbind"):
            raise ContainerError(f"mount {m.container_path}: unsupported mount type {m.type}")
        mounts.append(_open_source(m.host_path, m.container_path, sc.attrs_from_options(m.options)))
    devices: list[tuple[DeviceNodeEdit, _Source | None, int]] = []
    for d in edits.device_nodes:
        if options.no_devbind:
            try:
                st = os.stat(d.host_path)
                mode = d.file_mode or st.st_mode
            except OSError:
                mode = d.file_mode or (stat.S_IFCHR | 0o666)
            devices.append((d, None, mode))
        else:
            devices.append((d, _open_source(d.host_path, d.path, DEVICE_ATTRS), 0))
    proc_files: dict[str, bytes] = {}
    gpu_dirs: list[tuple[str, _Source]] = []
    if edits.proc_driver_gpus is not None:
        proc_files = _proc_copies(options.proc_root)
        for bus in edits.proc_driver_gpus:
            gpu_dir = f"{options.proc_root}/driver/nvidia/gpus/{bus}"
            gpu_dirs.append((bus, _open_source(gpu_dir, bus, sc.MOUNT_ATTR_RDONLY | PROC_ATTRS)))

    # -- container side --
    # through the namespace fd ldconfig's child enters (_entry), when there is one
    root = pending.enter() if pending is not None and pending.enter is not None else \
        _enter(rootfs, pid, options.host_proc)
    if pending is not None:
        pending.attach(root)
    if edits.proc_driver_gpus is not None:  # first: MIG capability files are mounted into it
        _proc_view(root, proc_files, gpu_dirs)
    for src in mounts:
        _attach(root, src)
    for d, node_src, mode in devices:
        if node_src is not None:
            _attach(root, node_src)
        else:
            root.mknod(d.path, mode, d.major, d.minor)
    for s in edits.symlinks:
        root.symlink(s.target, s.link)
    if edits.cuda_compat_dir and options.cuda_compat_mode != "disabled":
        compat.enable_compat(root, edits.cuda_compat_dir, options.driver_version, options.cuda_version,
                             legacy=True)
    if pending is not None:
        pending.run(list(edits.ldconfig_folders))
