"""The shim's logger: logrus-compatible lines to the config's debug file and to the
engine's `--log` file (both, like a multiwriter), text or `--log-format json`.

No `logging` import: the shim runs on every runc call. Files are opened append/create 0644
(parents 0755) when the logger is made, never with `--version`, never for /dev/null.
"""

from __future__ import annotations

import os
import time

# logrus levels, most severe first; a record is written when its rank <= the logger's.
LEVELS = {"panic": 0, "fatal": 1, "error": 2, "warning": 3, "info": 4, "debug": 5, "trace": 6}
_ALIASES = {"warn": "warning"}


def parse_level(name: str) -> str | None:
    """logrus.ParseLevel: case-insensitive names; None when invalid."""
    n = (name or "").strip().lower()
    n = _ALIASES.get(n, n)
    return n if n in LEVELS else None


def _quote(s: str) -> str:
    """JSON string escaping without importing json."""
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch < " ":
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _timestamp(now: float | None = None) -> str:
    """RFC 3339 with the local offset, as logrus writes it."""
    t = time.localtime(now)
    off = t.tm_gmtoff or 0
    if off == 0:
        zone = "Z"
    else:
        sign = "+" if off > 0 else "-"
        off = abs(off)
        zone = "%s%02d:%02d" % (sign, off // 3600, (off % 3600) // 60)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + zone


def _open_log(path: str) -> int | None:
    if not path or path == os.devnull:
        return None
    parent = os.path.dirname(os.path.normpath(path))
    if parent and parent != ".":
        os.makedirs(parent, 0o755, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


class Logger:
    """Writes records at or above `level` to every open file descriptor."""

    def __init__(self, fds: list[int] | None = None, level: str = "info", json: bool = False):
        self.fds = fds or []
        self.level = level
        self.json = json
        self.warnings: list[str] = []
        self.lines = 0  # records written (the pass-through cache needs a call that wrote none)

    @classmethod
    def setup(cls, debug_file: str, config_level: str, args) -> "Logger":
        """Build the logger from config (`debug`, `log-level`) and the engine's LogArgs."""
        level = "debug" if args.debug else parse_level(config_level)
        problems = []
        if level is None:
            problems.append(f"invalid log-level {config_level!r}; using info")
            level = "info"
        fds: list[int] = []
        if not args.version:
            for path in (debug_file, args.file):
                try:
                    fd = _open_log(path)
                except OSError as e:
                    problems.append(f"failed to open log file {path}: {e.strerror}")
                    continue
                if fd is not None:
                    fds.append(fd)
        log = cls(fds, level, json=(args.format == "json"))
        for p in problems:
            log.warning(p)
        return log

    def enabled(self, level: str) -> bool:
        return bool(self.fds) and LEVELS[level] <= LEVELS[self.level]

    def log(self, level: str, msg: str) -> None:
        if not self.enabled(level):
            return
        ts = _timestamp()
        if self.json:
            line = '{"level":%s,"msg":%s,"time":%s}\n' % (_quote(level), _quote(msg), _quote(ts))
        else:
            line = 'time=%s level=%s msg=%s\n' % (_quote(ts), level, _quote(msg))
        data = line.encode("utf-8", "replace")
        self.lines += 1
        for fd in self.fds:
            try:
                os.write(fd, data)
            except OSError:
                pass

    def error(self, msg: str) -> None:
        self.log("error", msg)

    def warning(self, msg: str) -> None:
        self.warnings.append(msg)
        self.log("warning", msg)

    def info(self, msg: str) -> None:
        self.log("info", msg)

    def debug(self, msg: str) -> None:
        self.log("debug", msg)

    def trace(self, msg: str) -> None:
        self.log("trace", msg)

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []
