"""The pass-through cache: what the toolkit launcher needs to exec the low-level runtime
itself for `state`, `kill`, `delete`, `exec`... without starting Python (issue 14).

After a pass-through of its own, the shim (running inside a self-contained toolkit) leaves
the settings it used in TOOLKIT/python/.passthrough-cache; packaging/toolkit/launcher.c reads
them and execs the runtime directly while they still hold, and starts Python on any doubt.

The file is NUL-separated text, every field NUL-terminated:

    nct-passthrough 2               format
    <key of python/NCT-TOOLKIT>     which toolkit install wrote it (python/ is replaced on upgrade)
    <NVIDIA_CTK_CONFIG_FILE_PATH>   the two variables that choose config.toml ("" when unset)
    <XDG_CONFIG_HOME>
    <config.toml path>              as resolved from them
    <key of config.toml>            "-" when there was none (built-in defaults)
    <config.toml content>           the bytes the settings were parsed from ("" when none)
    <debug file>                    [nvidia-container-runtime] debug
    <N>, <runtime 1>...<runtime N>  [nvidia-container-runtime] runtimes
    end

A key is "dev:ino:size:mtime:mtime_ns:ctime:ctime_ns" (stat_key). The launcher also reads
config.toml and compares its bytes with the recorded content: timestamps are only as fine
as the filesystem keeps them (1 s on ext4 with 128-byte inodes, NFS, older kernels' coarse
clock), so a same-size rewrite in the same tick keeps the whole key. Paths, variables and
runtime names are the bytes Python's system calls use (os.fsencode: the locale's encoding,
which need not be UTF-8). The launcher looks the
runtime up itself ($PATH as it is now, the shim excluded), so only config.toml's content is
cached, never a lookup result. It is written only when the pass-through logged nothing (level
info or quieter, no --debug, no warnings), so the launcher writes nothing either, apart from
creating the log files Python would have opened. Trust: the file sits in the toolkit's own
python/ (whoever can write there can replace the interpreter), mode 0644, or 0600 when
config.toml is not readable by others (the cache holds its bytes); the launcher refuses it
unless it is a regular file, not a symlink, owned by root or the caller, not group/other
writable. Imports only os and sys (hot path).
"""

from __future__ import annotations

import os
import sys

MAGIC = "nct-passthrough 2"
NAME = ".passthrough-cache"
MARKER = "NCT-TOOLKIT"
MAX_RUNTIMES = 40
CACHE_MAX = 16384  # the launcher's buffer
_QUIET = ("panic", "fatal", "error", "warning", "info")


def stat_key(st: os.stat_result) -> str:
    """The identity of a file's content, as the launcher spells it."""
    return "%d:%d:%d:%d:%d:%d:%d" % (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns // 10**9,
                                     st.st_mtime_ns % 10**9, st.st_ctime_ns // 10**9, st.st_ctime_ns % 10**9)


def _cacheable_runtime(name: str) -> bool:
    """Names the launcher looks up exactly as nct.runtime.lookup does: bare names, and
    absolute paths that abspath leaves unchanged."""
    if not name or "\0" in name:
        return False
    return "/" not in name or (os.path.isabs(name) and os.path.abspath(name) == name)


def encode(toolkit_key: str, environ, settings) -> bytes | None:
    """The cache file's bytes for these settings; None when they cannot be cached."""
    if settings.config_key is None or not 0 < len(settings.runtimes) <= MAX_RUNTIMES:
        return None
    if not all(_cacheable_runtime(r) for r in settings.runtimes):
        return None
    try:
        content = settings.config_text.encode("utf-8")  # the file's bytes (it was strict UTF-8)
        fields = [MAGIC.encode(), toolkit_key.encode(), os.fsencode(environ.get("NVIDIA_CTK_CONFIG_FILE_PATH", "")),
                  os.fsencode(environ.get("XDG_CONFIG_HOME", "")), os.fsencode(settings.path),
                  settings.config_key.encode(), content, os.fsencode(settings.debug),
                  str(len(settings.runtimes)).encode(), *(os.fsencode(r) for r in settings.runtimes), b"end"]
    except UnicodeError:  # a name the locale's encoding cannot spell: Python fails on it anyway
        return None
    if any(b"\0" in f for f in fields):
        return None
    data = b"".join(f + b"\0" for f in fields)
    return data if len(data) <= CACHE_MAX else None


def remember(settings, log, log_args) -> None:
    """After a pass-through that logged nothing: leave the settings for the launcher.
    Silent on every failure (a read-only toolkit just keeps starting Python)."""
    if log_args.debug or log_args.version or log.warnings or log.lines or log.level not in _QUIET:
        return  # the launcher writes no log records: only a call whose Python wrote none
    prefix = sys.prefix
    try:
        toolkit_key = stat_key(os.stat(os.path.join(prefix, MARKER)))
    except OSError:
        return  # not a self-contained toolkit (a venv, a system Python)
    data = encode(toolkit_key, os.environ, settings)
    if data is None:
        return
    # it holds config.toml's bytes: readable by others only when config.toml is
    mode = 0o644
    if settings.exists:
        try:
            if not os.stat(settings.path).st_mode & 0o004:
                mode = 0o600
        except OSError:
            return
    path = os.path.join(prefix, NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)  # also as the launcher trusts it, or it would stay unused
            if st.st_mode == 0o100000 | mode and st.st_uid == os.geteuid() and os.read(fd, len(data) + 1) == data:
                return
        finally:
            os.close(fd)
    except OSError:
        pass
    tmp = "%s.%d" % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
