"""Minimal parsing of a low-level runtime command line (runc/crun style).

The shim sits on every runc invocation, so this module imports nothing: it only answers
"is this `create`?", "where is the bundle?", "was --version asked?" and "where does the
engine want logs?". Everything else in argv is handed to the low-level runtime untouched.
"""

from __future__ import annotations

# Global flags of runc/crun that take a separate value (`--root X`). Knowing them lets us
# find the real subcommand in `--root X --log create.log create ...`.
_VALUE_FLAGS = frozenset({"root", "log", "log-format", "log-level", "criu", "rootless", "cgroup-manager"})
# Subcommands of runc/crun; when the first positional is one of them it *is* the subcommand.
_SUBCOMMANDS = frozenset({
    "checkpoint", "create", "delete", "events", "exec", "features", "help", "init", "kill",
    "list", "pause", "ps", "restore", "resume", "run", "spec", "start", "state", "update",
    "mounts", "version",
})


def _flag_name(arg: str) -> str | None:
    """'--bundle=x' -> 'bundle', '-b' -> 'b'; None for a positional."""
    if not arg.startswith("-") or arg == "-":
        return None
    return arg.split("=", 1)[0].lstrip("-")


def is_bundle_flag(arg: str) -> bool:
    """-b / --bundle in any dash count (upstream accepts -bundle and --b too)."""
    return _flag_name(arg) in ("b", "bundle")


def has_version_flag(args: list[str]) -> bool:
    """`--version` (any dash count) anywhere in argv."""
    for a in args:
        if a.startswith("-") and a.lstrip("-") == "version":
            return True
    return False


def is_create(args: list[str]) -> bool:
    """Whether argv (without argv[0]) runs the `create` subcommand.

    The first positional that is not the value of a known value-taking flag is the
    subcommand. If it is not a known subcommand (an unknown global flag with a separate
    value hid it), fall back to upstream's rule: any `create` token that is not the value
    of -b/--bundle.
    """
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = _flag_name(a)
        if name is None:
            if a in _SUBCOMMANDS:
                return a == "create"
            break
        if "=" not in a and (name in _VALUE_FLAGS or name in ("b", "bundle")):
            skip = True
    return _literal_create(args)


def _literal_create(args: list[str]) -> bool:
    prev_bundle = False
    for a in args:
        if not prev_bundle and is_bundle_flag(a):
            prev_bundle = "=" not in a
            continue
        if not prev_bundle and a == "create":
            return True
        prev_bundle = False
    return False


class ArgvError(ValueError):
    """argv that the shim cannot act on (e.g. --bundle without a value)."""


def bundle_dir(args: list[str]) -> str | None:
    """The bundle from --bundle X, --bundle=X, -b X, -b=X (any dash count; last wins).

    None when absent (the caller uses the current directory).
    """
    bundle = None
    i = 0
    while i < len(args):
        a = args[i]
        if is_bundle_flag(a):
            if "=" in a:
                bundle = a.split("=", 1)[1]
            elif i + 1 < len(args):
                bundle = args[i + 1]
                i += 1
            else:
                raise ArgvError("bundle option requires an argument")
        i += 1
    return bundle


class LogArgs:
    """What the engine passed for logging: --log FILE, --log-format FMT, --debug, --version."""

    __slots__ = ("file", "format", "debug", "version")

    def __init__(self, file: str = "", format: str = "", debug: bool = False, version: bool = False):
        self.file = file
        self.format = format
        self.debug = debug
        self.version = version


def log_args(args: list[str]) -> LogArgs:
    """Scan argv like upstream's logger does: --log/--log-format take `=V` or the next token."""
    out = LogArgs()
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if not a.startswith("-"):
            continue
        key, eq, value = a.partition("=")
        key = key.lstrip("-")
        if key == "version":
            out.version = True
        elif key == "debug":
            out.debug = True
        elif key in ("log", "log-format"):
            if not eq:
                if i >= len(args):
                    continue
                value = args[i]
                i += 1
            if key == "log":
                out.file = value
            else:
                out.format = value
    return out
