"""`nvidia-cdi-hook` (and `nvidia-ctk hook`): the OCI hooks CDI specs reference.

Compatibility rules from upstream: a hook this version does not know (an unknown subcommand,
or an unknown flag before any known one) prints a warning "Unsupported CDI hook" and exits 0,
so specs made by newer toolkits keep working; no hook at all warns "No CDI hook specified"
and exits 0; an unknown flag given to a known hook is an error (exit 1), as upstream. The
container comes from the OCI state on stdin (or --container-spec); nothing is read from the
container's environment.

Each hook is one process per container, so start-up is kept small: a well-formed invocation
(every one a spec writes) is parsed here, without click; anything else (help, --version, an
unknown hook or flag, a malformed argument) goes to the click front end
(nct.cli.cdi_hook_click), which owns those messages. `nct-steps HOOK ARGS... HOOK ARGS...`
runs several hooks, in order, in one process: the createContainer hook of the specs nct's
runtime writes itself in jit-cdi mode (nct.cdi.hooks); each step is exactly the hook it names.
"""

from __future__ import annotations

import os
import sys

PROG = "nvidia-cdi-hook"
STEPS_HOOK = "nct-steps"
SPEC_FLAG = "--container-spec"

# hook -> {flag: (key, repeatable)}; the click front end declares the same flags
FLAGS: dict[str, dict[str, tuple[str, bool]]] = {
    "create-symlinks": {"--link": ("links", True)},
    "update-ldcache": {"--folder": ("folders", True), "--ldconfig-path": ("ldconfig_path", False)},
    "chmod": {"--mode": ("mode", False), "--path": ("paths", True)},
    "enable-cuda-compat": {"--host-driver-version": ("host_driver_version", False),
                           "--host-cuda-version": ("host_cuda_version", False),
                           "--cuda-compat-container-root": ("cuda_compat_container_root", False)},
    "disable-device-node-modification": {},
    "update-application-profile": {},
    "noop": {},
}
DEFAULTS = {"ldconfig_path": "/sbin/ldconfig", "host_driver_version": "", "host_cuda_version": "",
            "cuda_compat_container_root": "/usr/local/cuda/compat"}
_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")

Step = tuple[str, dict]


def parse_steps(tokens: list[str] | tuple[str, ...]) -> list[Step] | None:
    """HOOK [--flag value | --flag=value]... (HOOK ...)... -> [(hook, options)], or None
    for anything not plainly well-formed (the click front end then explains it)."""
    steps: list[Step] = []
    i = 0
    while i < len(tokens):
        name = tokens[i]
        flags = FLAGS.get(name)
        if flags is None:
            return None
        opts: dict = {key: [] for key, many in flags.values() if many}
        i += 1
        while i < len(tokens) and tokens[i] not in FLAGS:
            flag, eq, value = tokens[i].partition("=")
            want = flags.get(flag) or ((SPEC_FLAG[2:].replace("-", "_"), False) if flag == SPEC_FLAG else None)
            if want is None:
                return None
            if not eq:
                if i + 1 >= len(tokens) or tokens[i + 1].startswith("-"):
                    return None
                value = tokens[i + 1]
                i += 1
            i += 1
            key, many = want
            if many:
                opts[key].append(value)
            elif key in opts:
                return None
            else:
                opts[key] = value
        for key, many in flags.values():
            if not many and key not in opts and key in DEFAULTS:
                opts[key] = DEFAULTS[key]
        if name == "chmod" and "mode" not in opts:
            return None
        steps.append((name, opts))
    return steps


def _env_flag(*names: str) -> bool | None:
    """A boolean flag's environment variable as click reads it (first non-empty one);
    None when its value is not a boolean."""
    for n in names:
        v = os.environ.get(n)
        if v:
            v = v.strip().lower()
            return True if v in _TRUE else False if v in _FALSE else None
    return False


def parse_argv(argv: list[str]) -> tuple[bool, list[Step]] | None:
    """[-d|--debug|--quiet]... HOOK args... -> (debug, steps); None: leave it to click."""
    debug = _env_flag("NVIDIA_CTK_DEBUG", "NVIDIA_CDI_DEBUG")
    quiet = _env_flag("NVIDIA_CTK_QUIET", "NVIDIA_CDI_QUIET")
    if debug is None or quiet is None:
        return None
    i = 0
    while i < len(argv) and argv[i] in ("-d", "--debug", "--quiet"):
        if argv[i] == "--quiet":
            quiet = True
        else:
            debug = True
        i += 1
    if i >= len(argv):
        return None
    if argv[i] == STEPS_HOOK:
        steps = parse_steps(argv[i + 1:])
        if not steps or any(name == STEPS_HOOK for name, _ in steps):
            return None
    else:
        steps = parse_steps(argv[i:])
        if steps is None or len(steps) != 1:
            return None
    return debug and not quiet, steps


class States:
    """Container roots by --container-spec (None: the state on stdin, read once)."""

    def __init__(self) -> None:
        self._roots: dict[str | None, str] = {}

    def root(self, container_spec: str | None) -> str:
        if container_spec not in self._roots:
            self._roots[container_spec] = state_root(container_spec)
        return self._roots[container_spec]


def state_root(container_spec: str | None) -> str:
    """Container root from the OCI state: on stdin, or in the file --container-spec names
    (upstream's meaning; "-" is stdin). A file without `bundle` is taken as the bundle's
    config.json itself (nct's older reading of the flag)."""
    from nct import jsonio
    from nct.container.hooks import container_root
    from nct.errors import ContainerError

    from_file = container_spec and container_spec != "-"
    state = jsonio.read_object(container_spec if from_file else None, ContainerError,
                               where=None if from_file else "container state on stdin", not_object="not a JSON object")
    if from_file and "bundle" not in state:
        return container_root(None, container_spec)
    return container_root(state)


def run_step(name: str, o: dict, states: States, ldconfig=None) -> str | None:
    """Run one hook on the container; returns its debug message, if any. `ldconfig`: an
    update-ldcache step's child, started early (nct.container.ldconfig.start_ldconfig)."""
    from nct.container.hooks import open_root

    spec = o.get("container_spec")
    if name == "noop":
        return None
    if name == "create-symlinks":
        from nct.container.hooks import create_symlinks

        if not o["links"]:
            return None
        with open_root(states.root(spec)) as root:
            n = create_symlinks(root, list(o["links"]))
        return f"created {n} symlinks"
    if name == "update-ldcache":
        from nct.container.ldconfig import run_ldconfig

        if ldconfig is not None:
            ldconfig.run(list(o["folders"]), write_conf=True)
            return f"updated ld cache of {ldconfig.root.path} for {list(o['folders'])}"
        with open_root(states.root(spec)) as root:
            run_ldconfig(root, list(o["folders"]), ldconfig="@" + o["ldconfig_path"], write_conf=True)
        return f"updated ld cache of {root.path} for {list(o['folders'])}"
    if name == "chmod":
        from nct.container.hooks import chmod_paths
        from nct.errors import ContainerError

        try:
            value = int(o["mode"], 8)
        except ValueError:
            raise ContainerError(f"invalid --mode {o['mode']!r}: want an octal mode") from None
        if o["paths"]:
            with open_root(states.root(spec)) as root:
                chmod_paths(root, value, list(o["paths"]))
        return None
    if name == "enable-cuda-compat":
        from nct.container.compat import enable_compat

        if not o["host_driver_version"] and not o["host_cuda_version"]:
            return None
        with open_root(states.root(spec)) as root:
            written = enable_compat(root, o["cuda_compat_container_root"], o["host_driver_version"] or None,
                                    o["host_cuda_version"] or None)
        return f"compat: {written or 'not used'}"
    if name == "disable-device-node-modification":
        from nct.container.hooks import disable_device_node_modification

        from nct.driver.rootpath import proc_root

        with open_root(states.root(spec)) as root:
            disable_device_node_modification(root, f"{proc_root()}/driver/nvidia/params")
        return None
    if name == "update-application-profile":
        from nct.container.hooks import update_application_profile

        with open_root(states.root(spec)) as root:
            update_application_profile(root)
        return None
    raise AssertionError(name)


def error_line(name: str | None, e: Exception) -> str | None:
    """The one line a failed hook prints (None: not an error the hook reports itself)."""
    from nct.errors import NctError

    if isinstance(e, NctError):
        return f"{PROG}: {e}"
    if isinstance(e, (OSError, ValueError)):  # an unexpected image layout: one line, no traceback
        msg = str(e)
        if isinstance(e, OSError) and e.strerror:
            msg = f"{e.filename}: {e.strerror}" if e.filename is not None else e.strerror
        where = f"{name}: " if name else ""
        return f"{PROG}: {where}{' '.join(msg.splitlines())}"
    return None


def run_steps(steps: list[Step], debug: bool) -> int:
    """Run the steps in order, stopping at the first failure (exit status 1). When an
    update-ldcache step comes after others, its ldconfig child is forked first and enters
    its jail while those run (nct.container.ldconfig.start_ldconfig)."""
    os.umask(0o022)  # parents we create are 0755 whatever umask the runtime passed on
    states = States()
    early = None
    name = None
    try:
        ld = next((i for i, (n, _) in enumerate(steps) if n == "update-ldcache"), 0)
        if ld:
            from nct.container.hooks import open_root
            from nct.container.ldconfig import start_ldconfig

            name, o = steps[ld]
            root = open_root(states.root(o.get("container_spec")))
            try:
                early = start_ldconfig(root, ldconfig="@" + o["ldconfig_path"])
            except BaseException:
                root.close()
                raise
        for i, (name, o) in enumerate(steps):
            msg = run_step(name, o, states, early if i == ld else None)
            if debug and msg:
                print(f"{PROG}: {msg}", file=sys.stderr)
    except Exception as e:
        line = error_line(name, e)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1
    finally:
        if early is not None:
            early.cancel()
            if early.root is not None:
                early.root.close()
    return 0


def main() -> int | None:
    parsed = parse_argv(sys.argv[1:])
    if parsed is not None:
        return run_steps(parsed[1], parsed[0])
    from nct.cli.cdi_hook_click import cdi_hook

    cdi_hook(prog_name=PROG)
    return None


def __getattr__(name: str):
    """The click groups (`nct cdi-hook`, `nvidia-ctk hook`), built on first use."""
    if name in ("cdi_hook", "ctk_hook"):
        from nct.cli import cdi_hook_click

        return getattr(cdi_hook_click, name)
    raise AttributeError(name)
