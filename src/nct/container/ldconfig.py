"""Run ldconfig against a container root without ever touching the host.

The host ldconfig ("@/sbin/ldconfig", ".real" preferred) is opened and checked (a static ELF)
before anything else happens and run from a sealed memfd copy of that open file (made by the
child, checked again), so the binary we run cannot be swapped by the image. A forked child
then enters a deny-all device cgroup (made through cgroups.JailSite, opened on the host side), takes its
own mount namespace, makes every mount private, binds a copy of the container root whose
every mount is nodev,nosuid (and read-only below the root: no writes into volumes) onto the
root, pivots into it (chroot with --no-pivot, or when pivot_root is refused), hides /sys, /dev and /proc behind
read-only tmpfs mounts, leaves the host's network, IPC, UTS and PID namespaces, keeps only
CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER (bounding, effective, permitted, inheritable; no new
privileges) and forks ldconfig as PID 1 of its new PID namespace (so it can neither see nor
signal a host process, even a root-owned one), which execs the memfd (a static ELF: a dynamic
loader would come from the image) with an empty environment. The child in between arms a
SIGALRM (a FIFO in the image must not block it forever) and dies of it, taking ldconfig with
it (parent-death signal and the end of its PID namespace). From
there on every path ldconfig (or we) touch resolves inside the container root by construction:
an image whose /etc is a symlink to a host path just writes inside its own rootfs.
"""

from __future__ import annotations

import fcntl
import os
import resource
import select
import _signal as signal  # not `signal`: its enums import `enum` (~1.5 ms per container)
import stat
import struct

from nct import child  # here, not in _fork_child: by then the process may be in the container's root
from nct.container import syscalls as sc
from nct.container.cgroups import DeviceJail, JailSite
from nct.container.rootfs import Root, open_regular, unescape_mount_field
from nct.errors import ContainerError
from nct.limits import shown
from nct.sigreset import default_signals

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Sequence

MFD_EXEC = 0x10
# Bytes of the host ldconfig copied into memory on each start (glibc's static one: ~1 MB);
# a configured file past it (a huge or sparse one) is refused, not copied.
MAX_LDCONFIG_SIZE = 64 << 20
OUTPUT_TAIL = 64 << 10  # bytes of ldconfig's output kept for the error message
LD_SO_CONF = b"include /etc/ld.so.conf.d/*.conf\n"
CACHE_TEMP = "/etc/ld.so.cache~"  # glibc ldconfig: open(O_CREAT|O_WRONLY|O_TRUNC), then rename
# Seconds ldconfig may run (blocked time included: SIGALRM, set right before execve); the
# parent kills it a little later still, in case it ignores the alarm.
LDCONFIG_TIMEOUT = 30
# All that ldconfig keeps after execve (uid 0): read and write the cache and conf files
# whatever their owner and modes. No CAP_SYS_ADMIN, CAP_SYS_CHROOT, CAP_SYS_PTRACE, CAP_KILL,
# ... and no CAP_DAC_READ_SEARCH: CAP_DAC_OVERRIDE already grants every read and search, and
# CAP_DAC_READ_SEARCH alone allows open_by_handle_at(), which opens any inode of the filesystem
# under the rootfs (the host's "/" when the rootfs is a plain directory) from inside the root.
LDCONFIG_CAPS = (sc.CAP_CHOWN, sc.CAP_DAC_OVERRIDE, sc.CAP_FOWNER)
_PT_INTERP = 3


def host_ldconfig(spec: str) -> str | None:
    """Host path of the ldconfig to run for a config value; None = use the container's own.
    Upstream's normalisation: "@/sbin/ldconfig" or "@/sbin/ldconfig.real" -> /sbin/ldconfig.real
    when it exists, else /sbin/ldconfig (a configured .real that is missing falls back)."""
    if not spec.startswith("@"):
        return None
    path = spec[1:]
    path = path[:-len(".real")] if path.endswith(".real") else path
    if os.path.exists(path + ".real"):
        return path + ".real"
    return path


def _check_static_elf(fd: int, path: str) -> None:
    """Refuse anything but an ELF executable without a PT_INTERP header: run inside the
    container root, a dynamic loader (or a script's "#!" interpreter) would come from the image."""
    head = os.pread(fd, 64, 0)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise ContainerError(f"ldconfig {path}: not an ELF executable (a script's interpreter would "
                             "be loaded from the container root)")
    end = "<" if head[5] == 1 else ">"
    if head[4] == 2 and len(head) < 64:
        raise ContainerError(f"ldconfig {path}: truncated ELF header")
    if head[4] == 2:
        phoff, = struct.unpack_from(end + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
    else:
        phoff, = struct.unpack_from(end + "I", head, 28)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
    # every field is the file's: bound them by the file before using them as an offset/size
    if phentsize < 4 or phnum > 4096 or phoff + phentsize * phnum > os.fstat(fd).st_size:
        raise ContainerError(f"ldconfig {path}: malformed ELF program headers")
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        raise ContainerError(f"ldconfig {path}: truncated ELF program headers")
    for i in range(phnum):
        if struct.unpack_from(end + "I", table, i * phentsize)[0] == _PT_INTERP:
            raise ContainerError(f"ldconfig {path}: dynamically linked (PT_INTERP); its interpreter "
                                 "would be loaded from the container root, use a static ldconfig")


def sealed_copy(path: str) -> int:
    """A sealed, read-only memfd holding a copy of executable `path` (a static ELF)."""
    src = open_static(path)
    try:
        return seal_copy(src, path)
    finally:
        os.close(src)


def open_static(path: str) -> int:
    """`path` opened for reading (close-on-exec), once checked to be a regular file holding
    a static ELF executable: what seal_copy copies."""
    try:  # O_PATH first: a device node or FIFO named here is refused without being opened
        ref = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        raise ContainerError(f"ldconfig {path}: {e.strerror}") from None
    try:
        st = os.fstat(ref)
        if not stat.S_ISREG(st.st_mode):
            raise ContainerError(f"ldconfig {path}: not a regular file")
        _check_size(st.st_size, path)
        src = os.open(sc.fd_path(ref), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ContainerError(f"ldconfig {path}: {e.strerror}") from None
    finally:
        os.close(ref)
    try:
        _check_static_elf(src, path)
    except BaseException:
        os.close(src)
        raise
    return src


def seal_copy(src: int, path: str) -> int:
    """A sealed, read-only memfd holding a copy of the file open as `src` (open_static's;
    left open), checked again as copied (the file may have changed since it was checked)."""
    try:
        mfd = os.memfd_create("nct-ldconfig", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | MFD_EXEC)
    except OSError:
        mfd = os.memfd_create("nct-ldconfig", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        size = os.fstat(src).st_size
        _check_size(size, path)  # again: it may have grown since open_static
        off = 0
        while off < size:
            n = os.sendfile(mfd, src, off, size - off)
            if n <= 0:
                break
            off += n
        os.fchmod(mfd, 0o555)
        fcntl.fcntl(mfd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        _check_static_elf(mfd, path)
    except BaseException:
        os.close(mfd)
        raise
    return mfd


def _check_size(size: int, path: str) -> None:
    if size > MAX_LDCONFIG_SIZE:
        raise ContainerError(f"ldconfig {path}: {size} bytes, over {MAX_LDCONFIG_SIZE} (no ldconfig is that "
                             "large): configure the path of a real static ldconfig")


def system_dirs(root: Root) -> list[str]:
    """The container's default library dirs (Debian multiarch vs lib64 layouts)."""
    if root.stat("/etc/debian_version") is not None:
        triplet = os.uname().machine + "-linux-gnu"
        return [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib"]
    return ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]


def conf_folders(folders: list[str]) -> list[str]:
    """Folders with duplicates removed, order kept (by hash: linear)."""
    return list(dict.fromkeys("/" + f.strip("/") for f in folders))


# Bounds on following the image's ld.so.conf includes (hostile input: cycles, huge globs).
MAX_CONF_FILES = 256        # conf files read in all
MAX_INCLUDE_DEPTH = 16      # include nesting
MAX_GLOB_NAMES = 4096       # directory entries (and listings) of all include patterns together
CONF_READ_LIMIT = 1 << 20   # bytes read of each conf file
MAX_CONF_BYTES = 1 << 20    # bytes read of all conf files together
MAX_PATTERN = 4096          # characters of one include pattern (PATH_MAX: longer ones match nothing)
MAX_GLOB_STEPS = 1 << 20    # pattern-against-name steps of all include patterns together


def _one(name_c: str, pat: str, j: int) -> tuple[bool, int, int]:
    """Match one name character against the pattern token at pat[j] (not `*`): (matched,
    index after the token, pattern characters looked at)."""
    c = pat[j]
    if c == "?":
        return True, j + 1, 1
    if c == "[":
        k = j + 1
        neg = k < len(pat) and pat[k] in "!^"
        k += neg
        ok, first = False, True
        while k < len(pat) and (pat[k] != "]" or first):
            first = False
            lo = pat[k]
            if k + 2 < len(pat) and pat[k + 1] == "-" and pat[k + 2] != "]":
                ok |= lo <= name_c <= pat[k + 2]
                k += 3
            else:
                ok |= name_c == lo
                k += 1
        if k >= len(pat):  # no closing bracket: a literal "["
            return name_c == "[", j + 1, k - j
        return ok != neg, k + 1, k + 1 - j
    if c == "\\" and j + 1 < len(pat):
        return name_c == pat[j + 1], j + 2, 2
    return name_c == c, j + 1, 1


def glob_match(name: str, pat: str, steps: list[int] | None = None) -> bool:
    """glob(3)'s match of one path component: `*`, `?`, `[...]` (`!` or `^` negates, ranges),
    `\\` escapes; a leading `.` only matches a literal one (no regular expressions). Every
    other token matches exactly one character, so only the last `*` ever needs to take one
    more character (no backtracking over earlier stars): O(len(name) * len(pat)) at worst,
    and `steps[0]` (when given) is a budget of pattern characters looked at, shared by the
    caller's matches: once spent, nothing more matches."""
    if name.startswith(".") and not pat.startswith("."):
        return False
    budget = steps if steps is not None else [1 << 62]
    i = j = 0
    star_j, star_i = -1, 0
    while i < len(name):
        if budget[0] <= 0:
            return False
        budget[0] -= 1
        if j < len(pat):
            if pat[j] == "*":
                star_j, star_i = j, i
                j += 1
                continue
            ok, after, cost = _one(name[i], pat, j)
            budget[0] -= cost
            if ok:
                i, j = i + 1, after
                continue
        if star_j < 0:  # a mismatch with no star to widen
            return False
        star_i += 1  # the last star takes one more character
        i, j = star_i, star_j + 1
    while j < len(pat) and pat[j] == "*":
        j += 1
    return j == len(pat)


def _glob(root: Root, pattern: str, budget: list[int], steps: list[int]) -> list[str]:
    """In-root paths matching an absolute glob pattern, sorted (as glob(3)); directories are
    listed through the in-root resolution, budget[0] entries at most, checked before each
    listing (beyond that the rest is not matched: its dirs count as unknown, which only
    repeats them in our ld.so.conf.d file); `steps` bounds the matching work (glob_match)."""
    if len(pattern) > MAX_PATTERN:
        return []
    found = [""]
    literal: list[str] = []  # plain components since the last wildcard one: appended at once
    for comp in [c for c in pattern.split("/") if c] + [None]:
        if comp is not None and not any(ch in comp for ch in "*?["):
            literal.append(comp.replace(chr(92), ""))
            continue
        if literal:  # one join per run (appending component by component is quadratic)
            tail = "/" + "/".join(literal)
            found = [d + tail for d in found]
            literal = []
        if comp is None:
            break
        nxt: list[str] = []
        for d in found:
            if budget[0] <= 0:  # past the bound: what was matched so far
                return sorted(nxt)
            names = root.listdir(d or "/", limit=budget[0] + 1)
            budget[0] -= max(1, len(names))  # a listing costs one at least (empty dirs too)
            if budget[0] < 0:
                return sorted(nxt)
            nxt.extend(f"{d}/{n}" for n in sorted(names) if glob_match(n, comp, steps))
        found = nxt
    return sorted(found)


def conf_lines(text: str) -> tuple[list[str], list[str]]:
    """(directories, include patterns) of one ld.so.conf file, as ldconfig reads it: `#` starts
    a comment, `include` takes whitespace-separated glob patterns, `hwcap` lines are ignored,
    any other line is one directory (an `=TYPE` suffix and trailing slashes dropped)."""
    dirs: list[str] = []
    includes: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        word = line.split(None, 1)
        if word[0] == "include" and len(word) == 2:
            includes.extend(word[1].split())
        elif word[0] == "hwcap":
            continue
        elif line.startswith("/"):
            dirs.append("/" + line.split("=", 1)[0].strip().strip("/"))
    return dirs, includes


def _listed_in_conf(root: Root) -> set[str]:
    """Directories the container's loader already knows from /etc/ld.so.conf and every file
    its `include` lines name (custom ones too; relative patterns are relative to the including
    file's directory, as ldconfig reads them). An absent /etc/ld.so.conf counts as the one
    we create. Files are read in-root, regular files only, with bounds on their number, size
    and nesting; a file reached twice (an include cycle) is read once. Past a bound the rest
    counts as unknown (those dirs are listed again in our file: harmless)."""
    seen: set[str] = set()
    visited: set[tuple[int, int]] = set()
    todo: list[tuple[str, int]] = [("/etc/ld.so.conf", 0)]
    reads, left, budget, steps = 0, MAX_CONF_BYTES, [MAX_GLOB_NAMES], [MAX_GLOB_STEPS]
    while todo:
        name, depth = todo.pop(0)
        fd = open_regular(root, name)
        if fd is None:
            if name != "/etc/ld.so.conf" or root.lstat(name) is not None:
                continue
            text = LD_SO_CONF.decode()
        else:
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) in visited:
                    continue
                visited.add((st.st_dev, st.st_ino))
                reads += 1
                if reads > MAX_CONF_FILES or left <= 0:  # past a bound: the rest counts as unknown
                    break
                data = os.read(fd, min(CONF_READ_LIMIT, left))
                left -= len(data)
                text = data.decode(errors="replace")
            finally:
                os.close(fd)
        dirs, includes = conf_lines(text)
        seen.update(dirs)
        if depth >= MAX_INCLUDE_DEPTH:
            continue
        here = name.rsplit("/", 1)[0] or "/"
        for pat in includes:
            full = pat if pat.startswith("/") else f"{here.rstrip('/')}/{pat}"
            todo.extend((p, depth + 1) for p in _glob(root, full, budget, steps))
            del todo[2 * MAX_CONF_FILES:]
    return seen


def prepare_conf(root: Root, folders: list[str]) -> list[tuple[str, bytes]]:
    """Files the update-ldcache hook writes: ld.so.conf.d entries for folders not already
    configured (00-nvcr-*) and for the container's system dirs (zz-nvcr-*)."""
    known = _listed_in_conf(root)
    system = system_dirs(root)
    ours = [f for f in conf_folders(folders) if f not in known and f not in system]
    files: list[tuple[str, bytes]] = []
    tag = os.urandom(16).hex()[:10]
    if ours:
        files.append((f"/etc/ld.so.conf.d/00-nvcr-{tag}.conf", ("\n".join(ours) + "\n").encode()))
    sys_new = [d for d in system if d not in known]
    if sys_new:
        files.append((f"/etc/ld.so.conf.d/zz-nvcr-{tag}.conf", ("\n".join(sys_new) + "\n").encode()))
    return files


MUSL_DEFAULT = ["/lib", "/usr/local/lib", "/usr/lib"]


def update_musl_path(root: Root, folders: list[str]) -> bool:
    """Alpine (musl has no ld cache): append new folders to /etc/ld-musl-<arch>.path,
    starting from musl's built-in default when the file does not exist yet."""
    if root.stat("/etc/alpine-release") is None:
        return False
    path = f"/etc/ld-musl-{os.uname().machine}.path"
    current: list[str] = []
    try:
        fd = root.open_regular(path)
    except FileNotFoundError:
        current = list(MUSL_DEFAULT)
    else:
        try:
            text = os.read(fd, 1 << 20).decode(errors="replace")
        finally:
            os.close(fd)
        current = [p for line in text.splitlines() for p in line.replace(":", " ").split() if p]
    have = set(current)
    new = [f for f in conf_folders(folders) if f not in have]
    if new:
        root.write_file(path, ("\n".join(current + new) + "\n").encode(), 0o644)
    return True


# Kernel filesystems that lead out of the root or to host state: a procfs anywhere in the
# root (`-v /proc:/host/proc`) has /proc/PID/root and fd magic links into any host process
# ldconfig may ptrace (uid 0, capabilities a subset of its own), whose root mount is
# writable; sysfs, cgroupfs, debugfs... expose host state. ldconfig reads libraries only.
KERNEL_FS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "bpf", "configfs",
    "efivarfs", "pstore", "binfmt_misc", "fusectl", "nsfs", "mqueue", "devpts", "devtmpfs",
    "hugetlbfs", "selinuxfs", "rpc_pipefs", "nfsd"})
_DETACH_ROUNDS = 8


def _mnt_id(proc: int, fd: int) -> int | None:
    with open(f"../self/fdinfo/{fd}", opener=lambda p, fl: os.open(p, fl | os.O_CLOEXEC, dir_fd=proc)) as f:
        for line in f:
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
    return None


def _detach_kernel_mounts(proc: int) -> None:
    """After pivoting into the sealed copy: detach every kernel filesystem mount (KERNEL_FS)
    reachable in it. `proc` is a directory fd in the host's procfs (opened before entering
    the container's mount namespace, whose /proc may be the container's own); our own
    mountinfo and fdinfo are read through it. A mount is detached only when the path
    resolves to it (not to something mounted over it); repeated until none is left, else
    ldconfig does not run (fails closed)."""
    for _ in range(_DETACH_ROUNDS):
        with open("../self/mountinfo", opener=lambda p, fl: os.open(p, fl | os.O_CLOEXEC, dir_fd=proc)) as f:
            text = f.read()
        found = False
        for line in text.splitlines():
            left, _, right = line.partition(" - ")
            fields = left.split(" ")
            if len(fields) < 5 or not right or right.split(" ")[0] not in KERNEL_FS:
                continue
            point = unescape_mount_field(fields[4])
            if point == "/":
                raise ContainerError(f"ldconfig's view of the container root is a {right.split(' ')[0]} mount")
            try:
                fd = _open_mount_point(point)
            except OSError:
                continue  # gone (below a mount detached already) or hidden below another mount
            try:
                if _mnt_id(proc, fd) != int(fields[0]):
                    continue  # something else is mounted over it: that hides it
                parent = _open_mount_point(point.rsplit("/", 1)[0] or "/")
            finally:
                os.close(fd)
            try:
                os.fchdir(parent)
                sc.umount2(point.rsplit("/", 1)[1], sc.MNT_DETACH | sc.UMOUNT_NOFOLLOW)
            finally:
                os.close(parent)
                os.chdir("/")
            found = True
        if not found:
            return
    raise ContainerError("cannot detach the kernel filesystems mounted in the container root from ldconfig's view")


def _hide(path: str) -> None:
    """Read-only empty tmpfs over a real directory (not a symlink) of the new root."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        try:
            sc.mount("tmpfs", path, "tmpfs", sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC, "mode=0555")
        except ContainerError as e:  # still inside the root: hiding is defence in depth
            os.write(2, f"warning: cannot hide {path}: {e}\n".encode())


# Mount flags every mount of ldconfig's view of the root gets: no device node and no set-id
# file of the image (or of a volume) means anything there.
SEALED_ATTRS = sc.MOUNT_ATTR_NODEV | sc.MOUNT_ATTR_NOSUID


def mounts_at_or_below(mountinfo: str, top: str) -> list[str]:
    """Mount points in a mountinfo text that are `top` or lie below it, shallowest first."""
    top = top.rstrip("/") or "/"
    prefix = top if top == "/" else top + "/"
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ", 5)
        if len(fields) < 5:
            continue
        point = unescape_mount_field(fields[4])
        if point == top or point.startswith(prefix):
            points.append(point)
    points.sort(key=lambda p: p.count("/"))
    return points


def _open_mount_point(point: str) -> int:
    """O_PATH fd of an absolute mount point from mountinfo, opened one component at a time
    (O_NOFOLLOW, each relative to its parent): a volume's host path may be longer than
    PATH_MAX (a deep `VOLUME` in the image), which a single open() refuses (ENAMETOOLONG)."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for comp in (c for c in point.split("/") if c):
            nxt = os.open(comp, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _seal_mounts_mount2(top: str, root: Root) -> None:
    """mount(2) fallback for SEALED_ATTRS (no mount_setattr: Linux < 5.12): remount every
    mount at or below `top` (our private copies), keeping its other flags, and check each.
    Mounts below the root are made read-only as well: ldconfig, as host root, must not
    write into a volume (a bind mount a non-root container user may not be able to write)
    through an image symlink; the image's own filesystem is the root mount."""
    text = root._proc("mountinfo")  # through the host procfs fd: not whatever /proc is here
    keep_mask = sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC
    for point in mounts_at_or_below(text, top):
        try:
            fd = _open_mount_point(point)
        except (FileNotFoundError, NotADirectoryError):
            continue  # below an overmount or gone: not reachable from the root either
        except OSError as e:  # fail closed: a mount we cannot seal must not stay in the view
            raise ContainerError(f"nodev view of {point[:200]}: {e.strerror}") from None
        try:
            keep = os.fstatvfs(fd).f_flag & keep_mask
            if point.rstrip("/") != top.rstrip("/"):
                keep |= sc.MS_RDONLY
            sc.mount(None, sc.fd_path(fd), None, sc.MS_REMOUNT | sc.MS_BIND | keep | sc.ms_flags(SEALED_ATTRS),
                     what=f"nodev view of {point}")
            if not os.fstatvfs(fd).f_flag & sc.MS_NODEV:
                raise ContainerError(f"mount {point}: still allows device nodes after remounting nodev")
        finally:
            os.close(fd)


def _sealed_root(root: Root) -> int:
    """In our private mount namespace: bind the container root onto itself (recursively) with
    every mount of the copy nodev,nosuid (and every mount below the root read-only: no
    writes into volumes), and return an O_PATH fd of it. ldconfig sees the
    root only through this copy, so a device node the image ships (/etc/ld.so.cache~ as a
    block device, a lib*.so link to one, a conf entry) cannot be opened as a device. The
    container's own mounts are not changed (the copy is private). Fails closed."""
    want = os.fstat(root.fd)
    fd = os.open(root.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (want.st_dev, want.st_ino):
            raise ContainerError(f"container root {root.path} changed while entering it")
        if sc.new_mount_api():
            tree = sc.open_tree(fd, "", sc.OPEN_TREE_CLONE | sc.OPEN_TREE_CLOEXEC | sc.AT_RECURSIVE | sc.AT_EMPTY_PATH)
            try:
                # every mount below the root read-only too (volumes: see _seal_mounts_mount2)
                sc.mount_setattr(tree, SEALED_ATTRS | sc.MOUNT_ATTR_RDONLY, recursive=True,
                                 what=f"container root {root.path}")
                if not os.fstatvfs(fd).f_flag & sc.MS_RDONLY:  # the root itself as it was
                    sc.mount_setattr(tree, 0, sc.MOUNT_ATTR_RDONLY, what=f"container root {root.path}")
                sc.move_mount(tree, "", fd, "", sc.MOVE_MOUNT_F_EMPTY_PATH | sc.MOVE_MOUNT_T_EMPTY_PATH,
                              "container root")
            except BaseException:
                os.close(tree)
                raise
        else:
            real = os.readlink(f"../self/fd/{fd}", dir_fd=root.proc_dir())  # its name here, symlinks resolved
            sc.mount(sc.fd_path(fd), sc.fd_path(fd), None, sc.MS_BIND | sc.MS_REC)
            _seal_mounts_mount2(real, root)
            tree = os.open(real, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            st = os.fstat(tree)
            if (st.st_dev, st.st_ino) != (want.st_dev, want.st_ino):
                os.close(tree)
                raise ContainerError(f"container root {root.path} changed while entering it")
        if not os.fstatvfs(tree).f_flag & sc.MS_NODEV:
            os.close(tree)
            raise ContainerError(f"container root {root.path}: cannot mount it nodev for ldconfig")
        return tree
    finally:
        os.close(fd)


def _enter_root(root: Root, no_pivot: bool) -> None:
    """In a fresh private mount namespace, make a nodev,nosuid copy of the container root our
    "/". The root is re-opened by path in the new namespace (an fd from before unshare still
    points at the old namespace's mounts) and checked to be the same directory."""
    sc.unshare(sc.CLONE_NEWNS)
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    tree = _sealed_root(root)
    if not no_pivot:
        try:
            os.fchdir(tree)
            sc.pivot_root(".", ".")
            sc.umount2(".", sc.MNT_DETACH)
            os.chdir("/")
            return
        except ContainerError as e:  # e.g. the root is initramfs: chroot below (still private)
            os.write(2, f"warning: pivot_root refused ({e}); using chroot\n".encode())
    os.fchdir(tree)
    os.chroot(".")
    os.chdir("/")


def run_ldconfig(root: Root, folders: list[str], *, ldconfig: str = "@/sbin/ldconfig",
                 write_conf: bool = False, extra_files: Sequence[tuple[str, bytes]] = (),
                 no_pivot: bool = False, ldconfig_fd: int | None = None, jail_site: JailSite | None = None) -> None:
    """Update the container's /etc/ld.so.cache for `folders` (container paths).

    write_conf=False: the dirs are passed on ldconfig's command line (nvidia-container-cli
    configure). write_conf=True: they are recorded in /etc/ld.so.conf.d (the CDI hook).
    `extra_files` are written (in-root) before ldconfig runs. `jail_site`: where ldconfig's
    deny-all device cgroup is made (cgroups.JailSite, opened on the host side by a caller in
    the container's mount namespace; opened here when None). The cgroup exists only while
    ldconfig runs. (start_ldconfig + PendingLdconfig.run, back to back.)
    """
    pending = start_ldconfig(root, ldconfig=ldconfig, no_pivot=no_pivot, ldconfig_fd=ldconfig_fd,
                             jail_site=jail_site)
    pending.run(folders, write_conf=write_conf, extra_files=extra_files)


def start_ldconfig(root: Root | None, *, ldconfig: str = "@/sbin/ldconfig", no_pivot: bool = False,
                   ldconfig_fd: int | None = None, jail_site: JailSite | None = None,
                   enter: Callable[[], Root] | None = None, reap: bool = True) -> PendingLdconfig:
    """Fork ldconfig's child now and let it move into its deny-all device cgroup while the
    caller goes on (attaching mounts, creating links): the move waits for an RCU grace
    period (~9 ms on kernels whose cgroup hierarchy lacks `favordynmods`), which then
    overlaps the caller's work. The child does nothing else (no pivot, no fd closed, no exec)
    until PendingLdconfig.run sends it its command line; cancel() (or the caller's death)
    ends it. The same child, the same confinement, as run_ldconfig's.
    `root` None: fork it before the caller enters the container (host side, so that its
    cgroup move also overlaps the host-side work); the child then calls `enter()` (which
    enters the container's mount namespace and opens its root, as the caller does) once it
    has its command line, and the caller hands over its own Root with `attach()`.
    `reap` False (a disposable caller only, which exits right after: the prestart hook):
    once the child has reported ldconfig's end, it is not waited for. Its exit tears down
    the namespaces it unshared (the mount namespace's waits for an RCU grace period,
    ~0.5-2 ms); the caller's reaper (runc, the engine's shim, init) collects it, and it
    leaves and removes its jail itself."""
    return PendingLdconfig(root, ldconfig, no_pivot, ldconfig_fd, jail_site, enter, reap)


class PendingLdconfig:
    """ldconfig's child, forked and in its jail, waiting for run() (or cancel())."""

    def __init__(self, root: Root | None, ldconfig: str, no_pivot: bool, ldconfig_fd: int | None,
                 jail_site: JailSite | None, enter: Callable[[], Root] | None = None, reap: bool = True) -> None:
        self.root, self.ldconfig, self.pid, self.reap = root, ldconfig, 0, reap
        self.enter = enter  # the caller enters the same way (the same namespace fd)
        self.site = jail_site if jail_site is not None else JailSite()
        self.own_site = jail_site is None
        self.own_fd = ldconfig_fd is None
        self.fd = ldconfig_fd
        self.go_w = self.err_r = self.status_r = -1
        self.jail: DeviceJail | None = None
        try:
            self.host = host_ldconfig(ldconfig)
            copy_of = None
            if self.host is not None and self.own_fd:
                # checked here (a bad ldconfig fails the caller before anything is done);
                # copied into its sealed memfd by the child, off the caller's path
                self.fd, copy_of = open_static(self.host), self.host
            self.jail = self.site.jail()
            self.pid, self.err_r, self.status_r, self.go_w = _fork_child(root, self.fd, no_pivot, self.jail, enter,
                                                                         remover=not reap, copy_of=copy_of)
        except BaseException:
            self._close()
            raise

    def attach(self, root: Root) -> None:
        """The caller's Root, once it has entered the container (a child forked with `enter`)."""
        self.root = root

    def run(self, folders: list[str], *, write_conf: bool = False,
            extra_files: Sequence[tuple[str, bytes]] = ()) -> None:
        """Write the configuration (in-root) and run ldconfig in the waiting child."""
        left = False
        try:
            root = self.root
            if root is None:
                raise ContainerError("ldconfig: run() before attach()")
            if write_conf and update_musl_path(root, folders):
                return
            if self.host is None:
                argv0 = self.ldconfig
                if root.stat(self.ldconfig + ".real") is not None:
                    argv0 = self.ldconfig + ".real"
            else:
                argv0 = self.host
            files: list[tuple[str, bytes]] = list(extra_files)
            args = ["-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"]
            if write_conf:
                files.extend(prepare_conf(root, folders))
            else:
                args.extend(conf_folders(folders))
            command = _command([argv0, *args])
            # Writes happen in-root from here (the child is chrooted anyway).
            root.create_file_if_absent("/etc/ld.so.conf", LD_SO_CONF, 0o644)
            # ldconfig truncates its temp file in place: one the image ships that is not a
            # regular file (a device node) would fail it on our nodev view (or, unconfined,
            # be written to).
            root.remove_unless_regular(CACHE_TEMP)
            for path, data in files:
                root.write_file(path, data, 0o644)
            if self.jail is not None and self.jail.problem:  # the nodev view still keeps devices out
                os.write(2, f"warning: ldconfig runs without a deny-all device cgroup ({self.jail.problem})\n"
                         .encode())
            go_w, self.go_w = self.go_w, -1
            try:
                _send(go_w, command)
            except BrokenPipeError:  # the child died before reading it: _finish says why
                pass
            pid, err_r, status_r = self.pid, self.err_r, self.status_r
            self.pid, self.err_r, self.status_r = 0, -1, -1
            done = _collect(pid, err_r, status_r, self.reap)
            # not reaped: the child may still be in the jail; it removes it once out
            left = not done.reaped
            _check(root, done)
        finally:
            self._close(remove_jail=not left)

    def cancel(self) -> None:
        """End the waiting child without running ldconfig (the caller failed, or no ldconfig)."""
        self._close()

    def _close(self, remove_jail: bool = True) -> None:
        if self.go_w >= 0:  # EOF without a command line: the child exits
            os.close(self.go_w)
            self.go_w = -1
        if self.pid:
            pid, err_r, self.pid, self.err_r = self.pid, self.err_r, 0, -1
            child.collect(pid, err_r, LDCONFIG_TIMEOUT + 5, tail=OUTPUT_TAIL)
        if self.status_r >= 0:
            os.close(self.status_r)
            self.status_r = -1
        if self.jail is not None:
            self.jail.close(remove=remove_jail)
            self.jail = None
        if self.own_site:
            self.site.close()
            self.own_site = False
        if self.own_fd and self.fd is not None:
            os.close(self.fd)
            self.fd = None


MAX_COMMAND = 1 << 20  # bytes of ldconfig's command line sent to the waiting child


def _command(argv: list[str]) -> bytes:
    """ldconfig's argv as sent to the waiting child (NUL-separated); one over MAX_COMMAND is
    refused before anything is written (the child would refuse it too: never a truncated
    command line)."""
    data = b"\0".join(a.encode(errors="surrogateescape") for a in argv)
    if len(data) > MAX_COMMAND:
        raise ContainerError(f"ldconfig command line of {len(data)} bytes is over {MAX_COMMAND}: "
                             "fewer or shorter library folders, or record them in ld.so.conf.d")
    return data


def _send(go_w: int, data: bytes) -> None:
    """The command line to the waiting child, then EOF."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(go_w, view):]
    finally:
        os.close(go_w)


def _receive(go_r: int) -> list[str]:
    """In the child: the argv run() sent ([] when cancelled). More than MAX_COMMAND bytes is
    an error, never a truncated command line (its last folder cut short, the rest dropped)."""
    chunks, size = [], 0
    while True:
        b = os.read(go_r, 65536)
        if not b:
            break
        chunks.append(b)
        size += len(b)
        if size > MAX_COMMAND:
            raise ContainerError(f"command line over {MAX_COMMAND} bytes")
    os.close(go_r)
    data = b"".join(chunks)
    return [a.decode(errors="surrogateescape") for a in data.split(b"\0")] if data else []


def _wait_status(status: int) -> int:
    """In the middle child: its exit code once it has reported ldconfig's wait status (the
    caller uses the report). Never by dying of ldconfig's signal: a SIGSEGV passed on that
    way dumped this root process's memory (the caller's) as a core file into the container
    root."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _fork_child(root: Root | None, exe_fd: int | None, no_pivot: bool, jail: DeviceJail,
                enter: Callable[[], Root] | None = None, remover: bool = False,
                copy_of: str | None = None) -> tuple[int, int, int, int]:
    """Fork ldconfig's child: it enters the jail, then waits for its command line on a pipe
    (and, with `root` None, then calls `enter()` for its Root). Returns (pid, its output's
    read end, its status pipe's read end, the command pipe's write end). Once ldconfig has
    ended, the child closes its ends of the output pipe and writes ldconfig's wait status on
    the status pipe (child.collect's `status_r`), which ldconfig never holds (it only has the
    output pipe): its report cannot be forged. `remover` (a caller that does not wait for
    the child): the child first forks a process that stays out of the jail and removes it
    once the child is gone (_fork_remover). `copy_of`: `exe_fd` is that host file, open
    (open_static); the child runs a sealed copy it makes (seal_copy)."""
    # the host's procfs: the container's /proc may not show us
    proc = root.proc_dir() if root is not None else os.open("/proc/self", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    try:
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
    except BaseException:
        os.close(go_r)
        os.close(go_w)
        raise

    def body(err_w: int) -> int:  # never returns into the caller's code
        code = 127
        rt = root
        exe = exe_fd
        try:
            os.close(go_w)
            os.close(status_r)
            os.dup2(err_w, 2)
            os.dup2(err_w, 1)
            # stdin: an empty pipe, not /dev/null: in a container that has already pivoted
            # (configure --pid), "/dev/null" is the container's, which it may have replaced
            # by any node (a watchdog arms when opened)
            empty_r, empty_w = os.pipe()
            os.close(empty_w)
            os.dup2(empty_r, 0)
            os.close(empty_r)
            sc.prctl(sc.PR_SET_PDEATHSIG, 9)
            sc.prctl(sc.PR_SET_NAME, b"nvc:[ldconfig]")
            sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
            sc.prctl(sc.PR_SET_DUMPABLE, 0)  # holds the caller's memory: never a core file
            gone_w = _fork_remover(jail) if remover else -1  # before entering: it stays out of the jail
            jail.enter()  # no device node may be opened from here on (ldconfig is forked below)
            if copy_of is not None and exe_fd is not None:  # from the caller's fd: no path looked up
                exe = seal_copy(exe_fd, copy_of)
            argv = _receive(go_r)  # blocks until run() (EOF: cancelled, or the parent died)
            if not argv:
                return 0
            argv0, args = argv[0], argv[1:]
            host_proc = proc
            if rt is None:
                if enter is None:
                    raise ContainerError("no container root to run ldconfig in")
                rt = enter()  # the container's mount namespace, as the caller's
                os.close(proc)
                host_proc = rt.proc_dir()  # opened host side by enter(), as the caller's Root
            # only what ldconfig needs may outlive the fork: the caller's fds (one per
            # mounted source, say; the jail's, now used) would exhaust RLIMIT_NOFILE below
            keep = {rt.fd, host_proc, status_w} | ({exe} if exe is not None else set())
            sc.close_fds_except(keep | ({gone_w} if gone_w >= 0 else set()))
            last_cap = sc.cap_last_cap()  # before pivoting
            _enter_root(rt, no_pivot)
            _detach_kernel_mounts(host_proc)
            os.close(host_proc)
            for d in ("/proc", "/sys", "/dev"):
                _hide(d)
            # No host network, IPC, hostname or processes; then only the capabilities ldconfig needs.
            sc.unshare(sc.CLONE_NEWNET | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS | sc.CLONE_NEWPID)
            sc.limit_caps(LDCONFIG_CAPS, last_cap)
            resource.setrlimit(resource.RLIMIT_CPU, (10, 10))
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash writes nothing into the root
            alive_r, alive_w = os.pipe2(os.O_CLOEXEC)  # closes when this process is gone
            ld_pid = os.fork()
            if ld_pid == 0:  # PID 1 of the new PID namespace: ldconfig
                os.close(alive_w)
                os.close(status_w)  # close-on-exec too: ldconfig only ever has the output pipe
                sc.prctl(sc.PR_SET_PDEATHSIG, 9)
                # the parent may have died before the prctl (getppid() is 0 in a new PID
                # namespace): its end of the pipe is then closed, and nothing would stop us
                if select.select([alive_r], [], [], 0)[0]:
                    os._exit(code)
                default_signals()  # ldconfig gets default dispositions and no blocked signal
                sc.seccomp_deny()  # last: nothing below needs a denied call but execve
                if exe is not None:
                    os.execve(exe, [argv0] + args, {})
                os.execve(argv0, [argv0] + args, {})
            os.close(alive_r)
            os.close(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(LDCONFIG_TIMEOUT)  # PID 1 would ignore SIGALRM: the timeout lives here
            # ldconfig's own status, not any child's (the remover is one: its end is not ldconfig's)
            status = os.waitpid(ld_pid, 0)[1]
            # ldconfig is gone: our ends of the output pipe next, so that the caller reads
            # it to its end now, not after this process's exit (namespace teardown), then
            # the status it waits for
            for fd in (1, 2):  # (err_w itself went with close_fds_except)
                os.close(fd)
            child.report_status(status_w, status)
            code = _wait_status(status)
        except BaseException as e:  # noqa: BLE001 - report anything, then die
            try:
                os.write(2, f"ldconfig: {e}\n".encode())
            except OSError:
                pass
        return code

    try:
        pid, err_r = child.fork(body, error_exit=127)
    except BaseException:
        os.close(go_w)
        os.close(status_r)
        raise
    finally:
        os.close(go_r)
        os.close(status_w)
        if root is None:
            os.close(proc)
    return pid, err_r, status_r, go_w


def _fork_remover(jail: DeviceJail) -> int:
    """In ldconfig's child, before it enters the jail (for a caller that does not wait for
    the child): fork a process that removes the jail once the child (and so ldconfig, PID 1
    of the child's PID namespace) is gone. It holds none of the caller's fds (stdin, stdout,
    stderr, which a runtime reads to their end; the output pipe) and no parent-death signal:
    it also cleans up after a killed caller. Returns the write end of the pipe whose end it
    waits for (-1 when there is no jail to remove); the child keeps it open until it exits."""
    if jail.parent_fd < 0:
        return -1
    gone_r, gone_w = os.pipe2(os.O_CLOEXEC)
    if os.fork() == 0:
        try:
            os.close(gone_w)
            os.closerange(0, 3)  # the caller's stdio (dup2'd over, but never held here)
            os.setsid()  # out of the caller's process group: no terminal's SIGINT or SIGTSTP
            sc.close_fds_except({gone_r, jail.procs_fd, jail.parent_fd})
            sc.prctl(sc.PR_SET_NAME, b"nvc:[ldconf-rm]")
            os.chdir("/")
            os.read(gone_r, 1)  # EOF: the child is gone (it leaves the jail just after)
            jail.close()
        finally:
            os._exit(0)
    os.close(gone_r)
    return gone_w


def _collect(pid: int, err_r: int, status_r: int, reap: bool = True) -> child.Finished:
    """Wait for the child's ldconfig (`reap` False: not for the child's own exit once it
    has reported ldconfig's)."""
    # only the tail is ever shown: what an image's ldconfig (or the host one warning about
    # each of a hostile configuration's lines) prints is not all kept
    return child.collect(pid, err_r, LDCONFIG_TIMEOUT + 5, tail=OUTPUT_TAIL, status_r=status_r, reap=reap)


def _check(root: Root, done: child.Finished) -> None:
    """A ContainerError with ldconfig's last line when it failed."""
    tail, status, killed = done.data, done.status, done.timed_out  # killed: ignored its alarm
    out = tail.decode(errors="replace").strip()
    if killed or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM):
        raise ContainerError(f"ldconfig in container root {root.path} timed out "
                             f"(after {LDCONFIG_TIMEOUT}s; a FIFO or device in its configuration?)")
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        last = shown(out.splitlines()[-1], 300) if out else f"exit status {rc}"
        raise ContainerError(f"ldconfig in container root {root.path} failed: {last}")
