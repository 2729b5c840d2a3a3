"""`nvidia-container-runtime-hook` (alias `nvidia-container-toolkit`): the OCI prestart hook.

Upstream's hook execs the C `nvidia-container-cli`; ours configures the container directly,
with the same discovery and edits model as every other front end. Flags follow upstream's Go
`flag` package: `-debug`, `-version`, `-config FILE` (one or two dashes).
"""

from __future__ import annotations

import os
import sys

USAGE = "Usage: nvidia-container-runtime-hook [-debug] [-version] [-config FILE] prestart|poststart|poststop"
PROG = "nvidia-container-runtime-hook"


def _parse(argv: list[str]) -> tuple[dict, list[str]]:
    opts: dict = {"debug": False, "version": False, "config": None}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and not rest:
            name, eq, value = arg.lstrip("-").partition("=")
            if name in ("debug", "version"):
                opts[name] = value.lower() not in ("false", "0") if eq else True
            elif name == "config":
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise SystemExit(_usage_error("flag needs an argument: -config"))
                    value = argv[i]
                opts["config"] = value
            elif name in ("h", "help"):
                print(USAGE)
                raise SystemExit(0)
            else:
                raise SystemExit(_usage_error(f"flag provided but not defined: {arg}"))
        else:
            rest.append(arg)
        i += 1
    return opts, rest


def _usage_error(msg: str) -> int:
    print(msg, file=sys.stderr)
    print(USAGE, file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> None:
    """argv None: the hook process itself (console script), which leaves with os._exit."""
    global _IS_HOOK_PROCESS
    _IS_HOOK_PROCESS = argv is None
    if _IS_HOOK_PROCESS:
        import gc

        gc.disable()  # a short-lived process: no cycle collection during the imports
    argv = sys.argv[1:] if argv is None else argv
    opts, rest = _parse(argv)
    if opts["version"]:
        from nct import UPSTREAM_COMPAT_VERSION, __version__

        print(f"NVIDIA Container Runtime Hook version {UPSTREAM_COMPAT_VERSION} (nct {__version__})")
        raise SystemExit(0)
    if not rest:
        raise SystemExit(_usage_error("missing command"))
    command = rest[0]
    if command in ("poststart", "poststop"):
        raise SystemExit(0)
    if command != "prestart":
        raise SystemExit(_usage_error(f"unknown command: {command}"))

    from nct.errors import NctError

    try:
        from nct.hook.prestart import prestart

        prestart(sys.stdin.buffer.read(), config_path=opts["config"], debug=opts["debug"],
                 disposable=_IS_HOOK_PROCESS)
    except NctError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        _exit(1)
    except (OSError, ValueError) as exc:  # unexpected, but still one line
        print(f"{PROG}: {exc}", file=sys.stderr)
        _exit(1)
    except Exception as exc:  # noqa: BLE001 - a bug must still fail the container in one line
        print(f"{PROG}: internal error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        _exit(1)
    _exit(0)


def _exit(code: int) -> None:
    """Flush and leave without interpreter teardown (a few ms per container). Only when
    run as the hook process: callers in the same interpreter (tests) get SystemExit."""
    if not _IS_HOOK_PROCESS:
        raise SystemExit(code)
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


_IS_HOOK_PROCESS = False


if __name__ == "__main__":  # pragma: no cover
    main()
