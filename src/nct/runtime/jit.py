"""The runtime's device injection: just-in-time edits from our own discovery (upstream's
in-memory `runtime.nvidia.com` CDI spec), CDI spec dirs, feature-gated device classes
and the legacy graphics extras. Imported only on `create`.

Orchestration only: every decision is the planner's (nct.edits), rendering into the
OCI spec is nct.cdi.inject's.
"""

from __future__ import annotations

from nct.edits.model import ContainerEdits
from nct.errors import SpecError


def _plan_options(cfg):
    from nct.edits.planner import PlanOptions

    flags = set(cfg.nvidia_container_runtime.modes.jit_cdi.nvcdi_feature_flags)
    return PlanOptions(
        target="spec",
        no_additional_gids=(cfg.features.no_additional_gids_for_device_nodes
                            or "no-additional-gids-for-device-nodes" in flags),
        # upstream's runtime evaluates NVIDIA_REQUIRE_* only in csv mode
        check_requirements=False,
    )


def _apply(spec: dict, edits: ContainerEdits, cfg, hook_path: str, driver_version: str | None,
           steps: bool = False) -> dict:
    """`steps`: the in-container hooks as one `nct-steps` process (nct.cdi.hooks)."""
    from nct.cdi.inject import apply_edits_to_spec

    return apply_edits_to_spec(
        spec, edits, hook_path=hook_path, driver_version=driver_version,
        disabled_hooks=tuple(cfg.nvidia_container_runtime.modes.jit_cdi.nvcdi_disable_hooks),
        steps=steps,
    )


def jit_edits(node, request, cfg) -> ContainerEdits:
    """Common edits + the requested GPUs/MIG devices (+ IMEX channels, gated classes)."""
    from nct.edits.planner import plan

    return plan(node, request, _plan_options(cfg))


def jit_inject(spec: dict, node, request, cfg, hook_path: str) -> dict:
    return _apply(spec, jit_edits(node, request, cfg), cfg, hook_path, node.driver_version, steps=True)


def gated_inject(spec: dict, request, cfg, hook_path: str) -> dict:
    """legacy/csv: only the gated classes' nodes (the legacy hook brings the driver)."""
    from nct.driver.discover import roots_from_config
    from nct.edits.classes import gated_edits

    edits = gated_edits(roots_from_config(cfg), request.gated_modes, _plan_options(cfg))
    if edits.is_empty():
        return spec
    return _apply(spec, edits, cfg, hook_path, None)


def graphics_inject(spec: dict, node, request, cfg, hook_path: str) -> dict:
    from nct.edits.planner import graphics_edits

    edits = graphics_edits(node, request)
    if edits.is_empty():
        return spec
    return _apply(spec, edits, cfg, hook_path, None)


def inject_from_registry(spec: dict, names: list[str], spec_dirs, log) -> dict:
    """Inject qualified CDI devices from the spec dirs (no auto-refresh: read once)."""
    from nct.cdi.registry import Registry

    registry = Registry(tuple(spec_dirs))
    for err in registry.errors:
        log.warning(f"CDI registry: {err}")
    _, missing = registry.resolve(names)
    if missing:
        raise SpecError(
            f"unresolvable CDI devices {', '.join(missing)} (spec dirs: {', '.join(spec_dirs)})"
        )
    return registry.inject(spec, names)


__all__ = ["jit_edits", "jit_inject", "gated_inject", "graphics_inject", "inject_from_registry"]
