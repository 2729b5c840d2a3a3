"""Safe path handling inside a container root (securejoin semantics, fd based).

Every container path is resolved relative to an open fd of the root: each component is opened
with O_NOFOLLOW relative to its parent's fd; a symlink is read and its target re-interpreted
inside the root (absolute targets restart at the root, ".." never climbs above it), exactly as
a process chrooted into the rootfs would see it. The kernel does the same with openat2
RESOLVE_IN_ROOT, used for plain look-ups when available. Results are O_PATH fds, so what we
mount on, write to or create in is the object we resolved (no TOCTOU on path strings).
"""

from __future__ import annotations

import errno
import os
import stat

from nct.container import syscalls as sc
from nct.errors import ContainerError

MAX_SYMLINKS = 40
_O_PATH = os.O_PATH | os.O_CLOEXEC
# Tests flip this to exercise the component walk even where openat2 exists.
USE_OPENAT2 = True


def _comps(path: str) -> list[str]:
    return [c for c in path.split("/") if c not in ("", ".")]


def unescape_mount_field(field: str) -> str:
    """A mountinfo path field with its octal escapes (\\040 for a space...) decoded (the one
    decoder: nct.container.ldconfig and nct.sim.run use it too)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        esc = field[i + 1:i + 4]
        if field[i] == "\\" and len(esc) == 3 and all(c in "01234567" for c in esc):
            out.append(chr(int(esc, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mountinfo_table(text: str) -> dict[int, tuple[str, str, str, str]]:
    """mount id -> (root of the mount within its filesystem, filesystem type, device
    "major:minor", mount point)."""
    table = {}
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(" "), right.split(" ")
        if len(fields) >= 5 and rfields and fields[0].isdigit():
            table[int(fields[0])] = (fields[3], rfields[0], fields[2], unescape_mount_field(fields[4]))
    return table


def _no_nul(path: str, root: str) -> None:
    """A path read from the image (an ld.so.conf include) may hold a NUL byte: the same
    one-line ContainerError whichever way it is resolved (os.open raises ValueError, and a
    C string passed to openat2 would end at the NUL)."""
    if "\0" in path:
        raise ContainerError(f"{path.split(chr(0), 1)[0]}...: a path with a NUL byte in container root {root}")


def _mounted_outside(mounts: dict[int, tuple[str, str, str, str]], dev: str, top: str) -> bool:
    """Whether filesystem `dev` is mounted anywhere not at or below path `top`."""
    prefix = top.rstrip("/") + "/"
    return any(d == dev and not (p == top or p.startswith(prefix)) for _, _, d, p in mounts.values())


class Root:
    """An open container root directory. Close it (or use `with`) when done.

    `proc_self`: an fd of this process's /proc/self in the host's procfs, taken before
    entering the container's mount namespace (where /proc may be the container's own, which
    does not show us); opened from /proc/self when first needed otherwise."""

    def __init__(self, path: str, fd: int | None = None, proc_self: int | None = None,
                 host_mounts: tuple[int, str] | None = None):
        self.path = path
        self._proc_self = proc_self if proc_self is not None else -1
        # (fd of the host's /proc/self/mountinfo opened before entering the container's mount
        # namespace: it keeps showing the host's table; the rootfs's real path there)
        self._host_mounts = host_mounts
        self._root_mnt: int | None = None
        self._mounts: dict[int, tuple[str, str, str, str]] = {}
        self._root_path: str | None = None  # the root's path in this mount namespace
        try:
            self.fd = fd if fd is not None else os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise ContainerError(f"container root {path}: {e.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._proc_self >= 0:
            os.close(self._proc_self)
            self._proc_self = -1
        if self._host_mounts is not None:
            os.close(self._host_mounts[0])
            self._host_mounts = None

    # ---- the image's own filesystem (issue 9 §5) --------------------------------------------
    def proc_dir(self) -> int:
        """An O_PATH fd of a process directory in the host's procfs (see `proc_self`); callers
        name files as "../self/...": the process that reads, even after a fork."""
        if self._proc_self < 0:
            self._proc_self = os.open("/proc/self", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return self._proc_self

    def reopen(self, fd: int, flags: int) -> int:
        """Re-open the object of (O_PATH) fd `fd` with `flags` through its magic link in our
        procfs, never through the path "/proc/self/fd/N": inside a container's mount
        namespace that /proc is the container's, and may name anything."""
        return os.open(f"../self/fd/{fd}", flags | os.O_CLOEXEC, dir_fd=self.proc_dir())

    def _proc(self, name: str) -> str:
        fd = os.open(f"../self/{name}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc_dir())
        try:
            chunks: list[bytes] = []
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    return b"".join(chunks).decode(errors="replace")
                chunks.append(b)
        finally:
            os.close(fd)

    def _mount_id(self, fd: int) -> int:
        for line in self._proc(f"fdinfo/{fd}").splitlines():
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
        raise OSError(errno.ENOSYS, "no mnt_id in fdinfo")

    def own_filesystem(self, dir_fd: int) -> bool:
        """Whether directory `dir_fd` is on the image's own filesystem: the mount of the root
        itself, or a tmpfs the runtime made for the container (/dev, /run: a fresh tmpfs, its
        mount root "/"). A volume (a bind mount of a host or shared directory) is not."""
        if self._root_mnt is None:
            self._root_mnt = self._mount_id(self.fd)
        mnt = self._mount_id(dir_fd)
        if mnt == self._root_mnt:
            return True
        st_dev = os.fstat(dir_fd).st_dev
        entry = self._mounts.get(mnt)
        if entry is None or entry[2] != f"{os.major(st_dev)}:{os.minor(st_dev)}":
            # not seen, or a stale entry: mount ids are reused, and a container that can mount
            # may have put a volume where a tmpfs we looked at was
            self._mounts = _mountinfo_table(self._proc("mountinfo"))
        mount_root, fstype, dev, _ = self._mounts.get(mnt, ("?", "?", "?", "?"))
        if fstype != "tmpfs" or mount_root != "/":
            return False
        # a host tmpfs bound whole (`-v /dev/shm:/x`, a tmpfs named volume, a pod's
        # memory emptyDir) has mount root "/" too, but is also mounted outside the root
        if self._root_path is None:
            self._root_path = os.readlink(f"../self/fd/{self.fd}", dir_fd=self.proc_dir())
        if _mounted_outside(self._mounts, dev, self._root_path):
            return False
        if self._host_mounts is None:  # (after a pivot the host's mounts are not in our table)
            return True
        fd, host_root = self._host_mounts
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while b := os.read(fd, 1 << 16):
            chunks.append(b)
        return not _mounted_outside(_mountinfo_table(b"".join(chunks).decode(errors="replace")), dev, host_root)

    def _creatable(self, dir_fd: int, path: str, what: str = "create") -> None:
        """Refuse to create (or replace) anything in a directory outside the image's own
        filesystem: as host root we could write where the container's user cannot, into a
        volume shared with the host or other containers (an image symlink leads there)."""
        try:
            own = self.own_filesystem(dir_fd)
        except OSError as e:
            raise ContainerError(f"{path} in container root {self.path}: cannot tell which mount its directory "
                                 f"is on ({e.strerror})") from None
        if not own:
            where = "its directory is" if what == "create" else "it is"
            raise ContainerError(f"refusing to {what} {path} in container root {self.path}: {where} on a "
                                 "volume, not the image's own filesystem (an image symlink into a bind mount?)")

    def __enter__(self) -> "Root":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- resolution ------------------------------------------------------------------------
    def _walk(self, path: str, *, create_dirs: bool, follow_last: bool, want: str | None = None,
              mode: int = 0o755) -> tuple[int, str]:
        """Resolve `path` in the root; returns (O_PATH fd, in-root path). create_dirs creates
        missing directories (the last one too when want == "dir")."""
        _no_nul(path, self.path)
        stack: list[tuple[str, int]] = []  # (name, fd) below the root
        todo = _comps(path)
        todo.reverse()
        links = 0

        def cur() -> int:
            return stack[-1][1] if stack else self.fd

        def where() -> str:
            return "/" + "/".join(n for n, _ in stack)

        try:
            while todo:
                comp = todo.pop()
                last = not todo
                if comp == "..":
                    if stack:
                        os.close(stack.pop()[1])
                    continue
                try:
                    fd = os.open(comp, _O_PATH | os.O_NOFOLLOW, dir_fd=cur())
                except FileNotFoundError:
                    if not create_dirs or (last and want != "dir"):
                        raise
                    self._creatable(cur(), f"{where().rstrip('/')}/{comp}")
                    try:
                        os.mkdir(comp, mode, dir_fd=cur())
                    except FileExistsError:
                        pass  # raced with a creator: look again
                    except OSError as e:
                        raise ContainerError(f"mkdir {where().rstrip('/')}/{comp} in container root "
                                             f"{self.path}: {e.strerror}") from None
                    todo.append(comp)
                    continue
                st = os.fstat(fd)
                if stat.S_ISLNK(st.st_mode) and (follow_last or not last):
                    links += 1
                    if links > MAX_SYMLINKS:
                        os.close(fd)
                        raise ContainerError(f"{path}: too many levels of symbolic links in container root {self.path}")
                    target = os.readlink(comp, dir_fd=cur())
                    os.close(fd)
                    if target.startswith("/"):
                        while stack:
                            os.close(stack.pop()[1])
                    new = _comps(target)
                    new.reverse()
                    todo.extend(new)
                    continue
                if not last and not stat.S_ISDIR(st.st_mode):
                    os.close(fd)
                    raise ContainerError(
                        f"{path}: {where().rstrip('/')}/{comp} is not a directory in container root {self.path}")
                stack.append((comp, fd))
            if not stack:
                return os.dup(self.fd), "/"
            name, fd = stack.pop()
            inroot = where().rstrip("/") + "/" + name
            return fd, inroot
        except FileNotFoundError:
            raise
        except OSError as e:
            raise ContainerError(f"{path} in container root {self.path}: {e.strerror}") from None
        finally:
            for _, fd in stack:
                os.close(fd)

    def open(self, path: str, flags: int = _O_PATH, *, follow: bool = True) -> int:
        """Open an existing path in the root. Raises FileNotFoundError when it does not exist."""
        _no_nul(path, self.path)
        if USE_OPENAT2 and follow:
            try:
                return sc.openat2(self.fd, path, flags | os.O_CLOEXEC,
                                  sc.RESOLVE_IN_ROOT | sc.RESOLVE_NO_MAGICLINKS)
            except sc.SyscallError as e:
                if e.errno == errno.ENOENT:
                    raise FileNotFoundError(errno.ENOENT, f"{path} in {self.path}") from None
                if e.errno not in (errno.ENOSYS, errno.EPERM, errno.EXDEV, errno.ELOOP):
                    raise ContainerError(f"{path} in container root {self.path}: {os.strerror(e.errno)}") from None
        fd, _ = self._walk(path, create_dirs=False, follow_last=follow)
        if flags & os.O_PATH and flags & ~(os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_DIRECTORY) == 0:
            if flags & os.O_DIRECTORY and not stat.S_ISDIR(os.fstat(fd).st_mode):
                os.close(fd)
                raise ContainerError(f"{path} in container root {self.path}: not a directory")
            return fd
        try:  # re-open the resolved object with the wanted flags, without a path lookup
            return self.reopen(fd, flags)
        except OSError as e:
            raise ContainerError(f"{path} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(fd)

    def open_regular(self, path: str, *, follow: bool = True) -> int:
        """A read-only fd of the regular file at `path`. The object is opened O_PATH (which
        never reaches a driver or blocks on a FIFO), checked to be a regular file, and only
        then re-opened for reading through its fd: a device node, FIFO or socket the image
        put there is refused (ContainerError) without ever being opened. FileNotFoundError
        when absent."""
        fd = self.open(path, _O_PATH | (0 if follow else os.O_NOFOLLOW), follow=follow)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ContainerError(f"{path} in container root {self.path}: not a regular file")
            return self.reopen(fd, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:
            raise ContainerError(f"{path} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(fd)

    def resolve(self, path: str) -> str:
        """The in-root path `path` resolves to (symlinks followed inside the root)."""
        fd, inroot = self._walk(path, create_dirs=False, follow_last=True)
        os.close(fd)
        return inroot

    def lstat(self, path: str) -> os.stat_result | None:
        """lstat of the last component (parents resolved in-root); None when absent."""
        try:
            fd, _ = self._walk(path, create_dirs=False, follow_last=False)
        except FileNotFoundError:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def stat(self, path: str) -> os.stat_result | None:
        try:
            fd = self.open(path)
        except FileNotFoundError:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    # ---- creation --------------------------------------------------------------------------
    def mkdirs(self, path: str, mode: int = 0o755) -> int:
        """O_PATH fd of directory `path`, creating missing components (mode 0755)."""
        fd, inroot = self._walk(path, create_dirs=True, follow_last=True, want="dir", mode=mode)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise ContainerError(f"{path}: {inroot} is a file where a directory is needed in container root {self.path}")
        return fd

    def parent(self, path: str, create: bool = True) -> tuple[int, str]:
        """(O_PATH fd of the parent directory, last component) of a container path."""
        comps = _comps(path)
        if not comps or comps[-1] == "..":
            raise ContainerError(f"{path}: not a file path in container root {self.path}")
        head = "/" + "/".join(comps[:-1])
        if create:
            return self.mkdirs(head), comps[-1]
        fd, _ = self._walk(head, create_dirs=False, follow_last=True)
        return fd, comps[-1]

    def mount_target(self, path: str, directory: bool, mode: int = 0o644, _depth: int = 0) -> int:
        """O_PATH fd of a mount target: a directory, or a non-directory file (created empty
        when absent). A symlink at `path` is followed inside the root, as runc does."""
        if directory:
            return self.mkdirs(path)
        pfd, name = self.parent(path)
        try:
            for _ in range(MAX_SYMLINKS):
                try:
                    fd = os.open(name, _O_PATH | os.O_NOFOLLOW, dir_fd=pfd)
                except FileNotFoundError:
                    self._creatable(pfd, path)
                    try:
                        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                         mode, dir_fd=pfd))
                    except FileExistsError:
                        pass
                    continue
                st = os.fstat(fd)
                if stat.S_ISLNK(st.st_mode):
                    os.close(fd)
                    inroot = self._walk(path, create_dirs=False, follow_last=False)
                    os.close(inroot[0])
                    target = os.readlink(name, dir_fd=pfd)
                    base = inroot[1].rsplit("/", 1)[0] or "/"
                    dest = target if target.startswith("/") else base + "/" + target
                    if _depth >= MAX_SYMLINKS:
                        raise ContainerError(f"{path}: too many levels of symbolic links in container root {self.path}")
                    return self.mount_target(dest, directory, mode, _depth + 1)
                if stat.S_ISDIR(st.st_mode):
                    os.close(fd)
                    raise ContainerError(f"{path}: is a directory where a file is needed in container root {self.path}")
                return fd
            raise ContainerError(f"{path}: could not create mount target in container root {self.path}")
        except OSError as e:
            raise ContainerError(f"{path} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(pfd)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Atomically replace `path` with `data` (temp file in the same dir + rename)."""
        pfd, name = self.parent(path)
        tmp = f".{name}.nct-{os.urandom(16).hex()[:8]}"
        try:
            self._creatable(pfd, path)
        except ContainerError:
            os.close(pfd)
            raise
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=pfd)
            try:
                os.write(fd, data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except OSError as e:
            try:
                os.unlink(tmp, dir_fd=pfd)
            except OSError:
                pass
            raise ContainerError(f"write {path} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(pfd)

    def create_file_if_absent(self, path: str, data: bytes, mode: int = 0o644) -> bool:
        """Create `path` with `data` unless something (even a dangling link) is there."""
        pfd, name = self.parent(path)
        try:
            try:
                os.lstat(name, dir_fd=pfd)
                return False
            except FileNotFoundError:
                pass
        finally:
            os.close(pfd)
        self.write_file(path, data, mode)
        return True

    def remove_unless_regular(self, path: str) -> bool:
        """Unlink `path` when it exists and is not a regular file or directory (a device node,
        FIFO, socket or symlink where a program will create a file). Returns whether it did."""
        try:
            pfd, name = self.parent(path, create=False)
        except FileNotFoundError:
            return False
        try:
            try:
                st = os.lstat(name, dir_fd=pfd)
            except FileNotFoundError:
                return False
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                return False
            self._creatable(pfd, path)
            os.unlink(name, dir_fd=pfd)
            return True
        except OSError as e:
            raise ContainerError(f"remove {path} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(pfd)

    def symlink(self, target: str, link: str) -> bool:
        """Make `link` a symlink to `target` (atomically replacing a non-directory there).
        Returns False when it already pointed there."""
        pfd, name = self.parent(link)
        try:
            try:
                if os.readlink(name, dir_fd=pfd) == target:
                    return False
            except OSError:
                pass
            try:
                if stat.S_ISDIR(os.lstat(name, dir_fd=pfd).st_mode):
                    raise ContainerError(f"symlink {link}: a directory is in the way in container root {self.path}")
            except FileNotFoundError:
                pass
            self._creatable(pfd, link)
            tmp = f".{name}.nct-{os.urandom(16).hex()[:8]}"
            os.symlink(target, tmp, dir_fd=pfd)
            try:
                os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            except OSError:
                os.unlink(tmp, dir_fd=pfd)
                raise
            return True
        except OSError as e:
            raise ContainerError(f"symlink {link} -> {target} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(pfd)

    def mknod(self, path: str, mode: int, major: int, minor: int) -> None:
        """Create a device node unless something is already there."""
        pfd, name = self.parent(path)
        try:
            try:
                os.lstat(name, dir_fd=pfd)
                return  # something is already there
            except FileNotFoundError:
                pass
            self._creatable(pfd, path)
            os.mknod(name, mode, os.makedev(major, minor), dir_fd=pfd)
        except FileExistsError:
            pass
        except OSError as e:
            raise ContainerError(f"mknod {path} in container root {self.path}: {e.strerror}") from None
        finally:
            os.close(pfd)

    def chmod(self, path: str, mode: int) -> bool:
        """chmod the resolved object when its mode differs; EPERM is ignored (as upstream).
        Only on the image's own filesystem (see _creatable): an image symlink must not lead
        host root to change the modes of a volume's (a host directory's) files."""
        fd = self.open(path)
        try:
            st = os.fstat(fd)
            if stat.S_IMODE(st.st_mode) == mode:
                return False
            self._creatable(fd, path, "change the mode of")
            try:
                os.chmod(f"../self/fd/{fd}", mode, dir_fd=self.proc_dir())
            except PermissionError:
                return False
            except OSError as e:
                raise ContainerError(f"chmod {path} in container root {self.path}: {e.strerror}") from None
            return True
        finally:
            os.close(fd)

    def listdir(self, path: str, limit: int | None = None) -> list[str]:
        """Names in directory `path` of the root ([] when it is not one); with `limit`, at
        most that many (an image's directory may hold millions: they are not all read)."""
        try:
            fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, ContainerError):
            return []
        try:
            if limit is None:
                return os.listdir(fd)
            names: list[str] = []
            with os.scandir(fd) as it:
                for entry in it:
                    if len(names) >= limit:
                        break
                    names.append(entry.name)
            return names
        finally:
            os.close(fd)


def open_regular(root: Root, path: str) -> int | None:
    """`root.open_regular(path)`, or None when the file is absent or not a regular file (for
    best-effort reads: conf files, notes)."""
    try:
        return root.open_regular(path)
    except (FileNotFoundError, ContainerError):
        return None
