"""`nvidia-container-runtime` (and `.cdi`, `.legacy`): a shim in front of runc/crun.

Only `create` is intercepted (the bundle's config.json gets the GPU edits); every other
subcommand is exec'd straight through with identical arguments. This module is on the
hot path of every `runc state/start/kill/delete`, so it imports almost nothing up front:
no click, no logging, no config model. Errors are one line on stderr, exit status 1, and
the low-level runtime is then not started.
"""

from __future__ import annotations

import os
import sys

PROG = "nvidia-container-runtime"


def main() -> int:
    return run(sys.argv, None)


def main_cdi() -> int:
    return run(sys.argv, "cdi")


def main_legacy() -> int:
    return run(sys.argv, "legacy")


def version_text() -> str:
    from nct import OCI_SPEC_VERSION, UPSTREAM_COMPAT_VERSION, __version__

    return f"NVIDIA Container Runtime version {UPSTREAM_COMPAT_VERSION} (nct {__version__})\nspec: {OCI_SPEC_VERSION}\n"


def run(argv: list[str], forced_mode: str | None, environ=None) -> int:
    """Run the shim for `argv` (argv[0] = our own path). Returns only on error; on
    success the process becomes the low-level runtime."""
    from nct.runtime import argv as av

    env = os.environ if environ is None else environ
    args = list(argv[1:])
    version = av.has_version_flag(args)
    if version:
        _write_stdout(version_text())
    log = None
    try:
        from nct.runtime.log import Logger
        from nct.runtime.lookup import find_runtime
        from nct.runtime.settings import read_settings

        settings = read_settings(env)
        log_args = av.log_args(args)
        log = Logger.setup(settings.debug, settings.log_level, log_args)
        log.trace(f"Command line arguments: {args}")
        runtime = find_runtime(settings.runtimes, env.get("PATH"), self_path=argv[0] if argv else None)
        log.debug(f"Using low-level runtime {runtime}")
        if av.is_create(args):
            from nct.runtime.create import handle_create

            handle_create(args, settings, forced_mode, log, env)
        else:
            log.trace("Skipping modifier for non-create subcommand")
            if environ is None:
                from nct.runtime.passthrough import remember

                remember(settings, log, log_args)
        if version:
            _write_stdout("\n")
        # log files are O_CLOEXEC: they close on exec, and stay usable if exec fails
        from nct.sigreset import default_signals

        default_signals()
        try:
            os.execve(runtime, [runtime] + args, original_environ() if environ is None else env)
        except OSError as e:
            raise _Failure(f"failed to run low-level runtime {runtime}: {e.strerror}") from None
    except Exception as e:  # every failure is one line, never a traceback
        return fail(e, log)
    return 1  # not reached


def _write_stdout(text: str) -> None:
    """Unbuffered (exec discards Python's buffers); a closed stdout is not an error."""
    try:
        os.write(1, text.encode())
    except OSError:
        pass


def original_environ() -> dict:
    """The environment exactly as we were started with it.

    Python's C-locale coercion (PEP 538) adds LC_CTYPE=C.UTF-8 to os.environ at startup;
    the low-level runtime must see the engine's environment unchanged, so it comes from
    /proc/self/environ (the kernel's copy of the initial block)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            data = f.read()
    except OSError:
        return dict(os.environ)
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            out[key] = value
    return out


class _Failure(Exception):
    pass


def fail(error: BaseException, log=None) -> int:
    from nct.errors import NctError
    from nct.runtime.argv import ArgvError
    from nct.runtime.lookup import RuntimeNotFound

    if isinstance(error, (NctError, _Failure, RuntimeNotFound, ArgvError)) and str(error):
        msg = str(error)
    else:
        msg = f"unexpected error: {type(error).__name__}: {error}"
    msg = " ".join(msg.split())
    if log is not None:
        log.error(msg)
        log.close()
    try:
        sys.stderr.write(f"{PROG}: {msg}\n")
        sys.stderr.flush()
    except OSError:
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
