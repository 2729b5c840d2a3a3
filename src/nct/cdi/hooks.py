"""ContainerEdits' data-only fields as nvidia-cdi-hook invocations.

The planner never emits our own hooks: it says `symlinks`, `ldconfig_folders`,
`proc_driver_gpus`, `cuda_compat_dir`. When edits are rendered into an OCI spec
(`nct.cdi.inject`) or a CDI spec (`nct.cdi.render`), this one function turns them into
createContainer hooks, so both renderings carry the same hooks in the same order:
create-symlinks, enable-cuda-compat, update-ldcache, disable-device-node-modification.
Every hook gets an explicit env: never the container's.

With `HookOptions.steps` (the runtime's own jit-cdi specs, never a CDI file written for
another engine) those hooks become one `nvidia-ctk hook nct-steps` hook running the same
steps in the same order in one process: one Python start per container instead of four
(nct.cli.cdi_hook; a spec from an older nct keeps working, the hooks are all still there)."""

from __future__ import annotations

import os
from nct.record import Record, field

from nct.edits.model import ContainerEdits, HookEdit

DEFAULT_HOOK_PATH = "/usr/bin/nvidia-cdi-hook"
DEFAULT_CUDA_COMPAT_DIR = "/usr/local/cuda/compat"
HOOK_ENV = ("NVIDIA_CTK_DEBUG=false",)
# Names accepted by --disable-hook/--enable-hook and nvcdi-disable-hooks.
CDI_HOOK_NAMES = ("create-symlinks", "chmod", "update-ldcache", "enable-cuda-compat",
                  "disable-device-node-modification", "update-application-profile")


class HookOptions(Record):
    """How our hooks are invoked. `disabled` holds hook names (or "all") to leave out."""

    hook_path: str = DEFAULT_HOOK_PATH
    ldconfig_path: str | None = None
    driver_version: str | None = None
    disabled: frozenset[str] = field(default_factory=frozenset)
    steps: bool = False  # the derived hooks as one `nct-steps` hook

    def enabled(self, name: str) -> bool:
        return "all" not in self.disabled and name not in self.disabled


def hook_argv0(hook_path: str) -> list[str]:
    """argv prefix: `nvidia-ctk hook` when the binary is nvidia-ctk, else `nvidia-cdi-hook`."""
    return ["nvidia-ctk", "hook"] if os.path.basename(hook_path) == "nvidia-ctk" else ["nvidia-cdi-hook"]


def cdi_hook(name: str, args: list[str] | tuple[str, ...] = (), opts: HookOptions | None = None) -> HookEdit:
    """One createContainer hook running `<hook binary> <name> args...` with a minimal env."""
    opts = opts or HookOptions()
    return HookEdit(hook_name="createContainer", path=opts.hook_path,
                    args=tuple(hook_argv0(opts.hook_path) + [name, *args]), env=HOOK_ENV)


def derived_hooks(edits: ContainerEdits, opts: HookOptions | None = None) -> list[HookEdit]:
    """The hooks that express `edits`' dir modes, symlinks, ldconfig folders, /proc view,
    CUDA compat and application profile, minus the disabled ones."""
    opts = opts or HookOptions()
    out: list[HookEdit] = []
    if edits.chmod_dirs and opts.enabled("chmod"):
        args = ["--mode", "755"]
        for d in dict.fromkeys(edits.chmod_dirs):
            args += ["--path", d]
        out.append(cdi_hook("chmod", args, opts))
    if edits.symlinks and opts.enabled("create-symlinks"):
        args = []
        seen = set()
        for s in edits.symlinks:
            if (s.target, s.link) not in seen:
                seen.add((s.target, s.link))
                args += ["--link", f"{s.target}::{s.link}"]
        out.append(cdi_hook("create-symlinks", args, opts))
    compat = bool(opts.driver_version) and bool(edits.ldconfig_folders or edits.cuda_compat_dir)
    if compat and opts.enabled("enable-cuda-compat"):
        args = [f"--host-driver-version={opts.driver_version}"]
        if edits.cuda_compat_dir and edits.cuda_compat_dir.rstrip("/") != DEFAULT_CUDA_COMPAT_DIR:
            args.append(f"--cuda-compat-container-root={edits.cuda_compat_dir}")
        out.append(cdi_hook("enable-cuda-compat", args, opts))
    else:
        compat = False
    if (edits.ldconfig_folders or compat) and opts.enabled("update-ldcache"):
        args = []
        if opts.ldconfig_path:
            args += ["--ldconfig-path", opts.ldconfig_path.lstrip("@")]
        for folder in dict.fromkeys(edits.ldconfig_folders):
            args += ["--folder", folder]
        out.append(cdi_hook("update-ldcache", args, opts))
    if edits.proc_driver_gpus is not None and opts.enabled("disable-device-node-modification"):
        out.append(cdi_hook("disable-device-node-modification", (), opts))
    if edits.app_profile and opts.enabled("update-application-profile"):
        out.append(cdi_hook("update-application-profile", (), opts))
    if opts.steps and len(out) > 1:
        return [steps_hook(out, opts)]
    return out


STEPS_HOOK = "nct-steps"  # nct.cli.cdi_hook runs it


def steps_hook(hooks: list[HookEdit], opts: HookOptions) -> HookEdit:
    """Our hooks (`<argv0> NAME ARGS...` each) as one `<argv0> nct-steps NAME ARGS... NAME
    ARGS...` createContainer hook."""
    argv0 = hook_argv0(opts.hook_path)
    args = argv0 + [STEPS_HOOK]
    for h in hooks:
        args += h.args[len(argv0):]
    return HookEdit(hook_name="createContainer", path=opts.hook_path, args=tuple(args), env=HOOK_ENV)


def hook_edits(edits: ContainerEdits, opts: HookOptions | None = None) -> list[HookEdit]:
    """All hooks of `edits`: its explicit hooks, then the derived ones, without repeats."""
    out: list[HookEdit] = []
    for h in list(edits.hooks) + derived_hooks(edits, opts):
        if h not in out:
            out.append(h)
    return out
