"""`nvidia-ctk cdi generate`: placeholder until it is assigned.

The click wiring (every upstream flag) lives in nct.cdi.cli and hands a GenerateOptions
to `generate()`; whoever implements generation replaces the body of `generate()` (build
the spec with nct.cdi.render.build_spec from the planner's common_edits/gpu_edits/
mig_edits and write it with nct.cdi.spec.save_spec, or print it when output is None)."""

from __future__ import annotations

from dataclasses import dataclass

from nct.errors import NctError


@dataclass(frozen=True)
class GenerateOptions:
    """The command line of `cdi generate`, as parsed (None = not given)."""

    output: str | None = None
    format: str | None = None  # json | yaml; None = from the output's extension, else yaml
    mode: str = "auto"
    driver_root: str | None = None  # None = NVIDIA_CTK_DRIVER_ROOT / config / "/"
    dev_root: str | None = None  # None = driver root
    device_name_strategies: tuple[str, ...] = ("index", "uuid")
    hook_path: str | None = None  # --nvidia-cdi-hook-path / --nvidia-ctk-path
    ldconfig_path: str | None = None
    vendor: str | None = None  # None = mode default (nvidia.com, management.nvidia.com)
    cls: str | None = None  # None = mode default (gpu, gds, ...)
    config_search_paths: tuple[str, ...] = ()
    library_search_paths: tuple[str, ...] = ()
    csv_files: tuple[str, ...] = ()
    csv_ignore_patterns: tuple[str, ...] = ()
    csv_compat_container_root: str | None = None
    disable_hooks: tuple[str, ...] = ()
    enable_hooks: tuple[str, ...] = ()
    feature_flags: tuple[str, ...] = ()
    no_all_device: bool = False
    device_ids: tuple[str, ...] = ("all",)
    config_path: str | None = None  # nvidia-ctk --config
    quiet: bool = False
    debug: bool = False


def generate(opts: GenerateOptions) -> None:
    """Generate the spec described by `opts` (not implemented yet)."""
    raise NctError("cdi generate is not implemented yet in this build of nct")
