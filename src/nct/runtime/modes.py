"""Which mode a `create` runs in, and the spec modifiers each mode applies, in order.

Pure functions over plain data (the spec dict, a ContainerRequest, a Config) so that the
ordering rules are testable without a driver, a CDI registry or a low-level runtime.
"""

from __future__ import annotations

import os

from nct.errors import ConfigError, RequestError
from nct.request.model import is_qualified_cdi_name

VALID_MODES = ("auto", "legacy", "csv", "cdi", "jit-cdi")
JIT_KIND = "runtime.nvidia.com/gpu"
JIT_VENDOR = "runtime.nvidia.com"
NVIDIA_HOOK_NAMES = ("nvidia-container-runtime-hook", "nvidia-container-toolkit")

# Modifier names per resolved mode, applied in this order (upstream's table).
MODIFIERS = {
    "cdi": ("nvidia-hook-remover", "mode"),
    "jit-cdi": ("nvidia-hook-remover", "mode"),
    "csv": ("nvidia-hook-remover", "feature-gated", "mode"),
    "legacy": ("feature-gated", "graphics", "mode"),
}


def check_mode(mode: str) -> str:
    if mode not in VALID_MODES:
        raise ConfigError(
            f"nvidia-container-runtime.mode: invalid mode {mode!r} "
            f"(expected one of {', '.join(VALID_MODES)})"
        )
    return mode


def is_tegra(driver_root: str = "/") -> bool:
    """go-nvlib's Tegra test without NVML: nv_tegra_release or a tegra SoC family."""
    root = driver_root or "/"
    if os.path.exists(os.path.join(root, "etc/nv_tegra_release")):
        return True
    try:
        with open("/sys/devices/soc0/family") as f:
            return f.read().strip().lower().startswith("tegra")
    except OSError:
        return False


def resolve_mode(mode: str, devices: tuple[str, ...] | None, *, tegra: bool = False) -> str:
    """`auto` -> `cdi` when every requested device is a qualified CDI name, else
    `csv` on Tegra, else `jit-cdi` (our default: built from our own discovery)."""
    check_mode(mode)
    if mode != "auto":
        return mode
    if devices and all(is_qualified_cdi_name(d) for d in devices):
        return "cdi"
    return "csv" if tegra else "jit-cdi"


def qualify(devices: tuple[str, ...], default_kind: str) -> list[str]:
    """Fully-qualified, deduplicated CDI names; `none` (no devices) -> `<kind>=none`."""
    names = list(devices) or [""]
    out: dict[str, None] = {}  # ordered set: linear in the number of names
    for d in names:
        out[d if is_qualified_cdi_name(d) else f"{default_kind}={d or 'none'}"] = None
    return list(out)


def split_jit(names: list[str]) -> list[str] | None:
    """The device ids when every name is runtime.nvidia.com/gpu=<id>, None when none is;
    mixing the two is refused, as upstream does."""
    prefix = JIT_KIND + "="
    jit = [n[len(prefix):] for n in names if n.startswith(prefix)]
    if not jit:
        return None
    if len(jit) != len(names):
        others = [n for n in names if not n.startswith(prefix)]
        raise RequestError(
            f"requesting a CDI device with vendor {JIT_VENDOR!r} is not supported together "
            f"with other CDI devices ({', '.join(others)})"
        )
    return jit


def is_nvidia_hook(hook: object) -> bool:
    return isinstance(hook, dict) and os.path.basename(str(hook.get("path", ""))) in NVIDIA_HOOK_NAMES


def remove_nvidia_hooks(spec: dict) -> int:
    """nvidia-hook-remover: drop prestart hooks that run the legacy NVIDIA hook (docker
    --gpus adds one); returns how many were removed."""
    hooks = spec.get("hooks")
    if not isinstance(hooks, dict) or not isinstance(hooks.get("prestart"), list):
        return 0
    before = hooks["prestart"]
    kept = [h for h in before if not is_nvidia_hook(h)]
    removed = len(before) - len(kept)
    if removed:
        if kept:
            hooks["prestart"] = kept
        else:
            del hooks["prestart"]
    return removed


def add_legacy_hook(spec: dict, hook_path: str) -> bool:
    """legacy mode: append {path, args: [basename, "prestart"]} unless an NVIDIA hook is
    already a prestart hook; returns whether the spec changed."""
    hooks = spec.get("hooks")
    if not isinstance(hooks, dict):
        hooks = spec["hooks"] = {}
    prestart = hooks.get("prestart")
    if not isinstance(prestart, list):
        prestart = hooks["prestart"] = []
    if any(is_nvidia_hook(h) for h in prestart):
        return False
    prestart.append({"path": hook_path, "args": [os.path.basename(hook_path), "prestart"]})
    return True
