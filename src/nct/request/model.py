"""ContainerRequest: the container's side of the plan, parsed from its spec + config.toml."""

from __future__ import annotations

from nct.record import Record, field


class ContainerRequest(Record):
    """What one container asks for.

    `devices` holds the requested ids as written ("all", "0", "GPU-...", "0000:01:00.0",
    "1:0", "MIG-...", or fully-qualified CDI names); an empty tuple means `none`: the driver
    but no GPU. A container that asks for nothing (void/unset) has no request at all
    (parsers return None) and is left untouched.
    """

    devices: tuple[str, ...]
    capabilities: frozenset[str] = frozenset({"compute", "utility"})
    requirements: tuple[str, ...] = ()  # NVIDIA_REQUIRE_* / CUDA_VERSION expressions, ANDed
    mig_config: str | None = None  # NVIDIA_MIG_CONFIG_DEVICES (privileged only)
    mig_monitor: str | None = None  # NVIDIA_MIG_MONITOR_DEVICES (privileged only)
    imex_channels: tuple[str, ...] = ()
    privileged: bool = False  # CAP_SYS_ADMIN in the bounding set
    cuda_compat_mode: str = "ldconfig"  # ldconfig | mount | hook | disabled
    gated_modes: tuple[str, ...] = ()  # runtime only: gds, mofed, gdrcopy, nvswitch
    source: str = "env"  # where the devices came from: env | mounts | annotations
    env: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


def is_qualified_cdi_name(name: str) -> bool:
    """vendor/class=name with all three parts non-empty."""
    kind, sep, dev = name.partition("=")
    vendor, slash, cls = kind.partition("/")
    return bool(sep and slash and vendor and cls and dev)
