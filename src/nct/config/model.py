"""The config.toml model: upstream's keys, sections and defaults, as typed records (nct.record).

Attribute names are the TOML keys with '-' -> '_'; sections are nested records.
`nct.config.load.load_config()` fills these from a file (unknown keys are kept in `raw`).
"""

from __future__ import annotations

from nct.record import Record, field

DEFAULT_CAPABILITIES_SUPPORTED = "compat32,compute,display,graphics,ngx,utility,video"


class CliConfig(Record):
    """[nvidia-container-cli]"""

    root: str = ""
    path: str = ""
    environment: tuple[str, ...] = ()
    debug: str = ""
    ldcache: str = ""
    load_kmods: bool = True
    no_cgroups: bool = False
    no_pivot: bool = False
    user: str = ""
    ldconfig: str = "@/sbin/ldconfig"


class CdiModeConfig(Record):
    """[nvidia-container-runtime.modes.cdi]"""

    annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)
    default_kind: str = "nvidia.com/gpu"
    spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")


class CsvModeConfig(Record):
    """[nvidia-container-runtime.modes.csv]"""

    mount_spec_path: str = "/etc/nvidia-container-runtime/host-files-for-container.d"
    compat_container_root: str | None = None


class JitCdiModeConfig(Record):
    """[nvidia-container-runtime.modes.jit-cdi]"""

    nvcdi_feature_flags: tuple[str, ...] = ()
    nvcdi_disable_hooks: tuple[str, ...] = ()


class LegacyModeConfig(Record):
    """[nvidia-container-runtime.modes.legacy]"""

    cuda_compat_mode: str = "ldconfig"


class ModesConfig(Record):
    """[nvidia-container-runtime.modes]"""

    cdi: CdiModeConfig = field(default_factory=CdiModeConfig)
    csv: CsvModeConfig = field(default_factory=CsvModeConfig)
    jit_cdi: JitCdiModeConfig = field(default_factory=JitCdiModeConfig)
    legacy: LegacyModeConfig = field(default_factory=LegacyModeConfig)


class RuntimeConfig(Record):
    """[nvidia-container-runtime]"""

    debug: str = "/dev/null"
    log_level: str = "info"
    mode: str = "auto"
    runtimes: tuple[str, ...] = ("runc", "crun")
    modes: ModesConfig = field(default_factory=ModesConfig)


class HookConfig(Record):
    """[nvidia-container-runtime-hook]"""

    path: str = "nvidia-container-runtime-hook"
    skip_mode_detection: bool = False


class CtkConfig(Record):
    """[nvidia-ctk]"""

    path: str = "nvidia-ctk"


class FeaturesConfig(Record):
    """[features]: all off by default and omitted from the default file."""

    allow_cuda_compat_libs_from_container: bool = False
    allow_ldconfig_from_container: bool = False
    allow_unknown_oci_spec_fields: bool = False
    disable_cuda_compat_lib_hook: bool = False
    disable_imex_channel_creation: bool = False
    ignore_imex_channel_requests: bool = False
    no_additional_gids_for_device_nodes: bool = False


class Config(Record):
    """A whole config.toml. `source_path` is the file it came from (None = built-in defaults)."""

    accept_nvidia_visible_devices_as_volume_mounts: bool = False
    accept_nvidia_visible_devices_envvar_when_unprivileged: bool = True
    disable_require: bool = False
    supported_driver_capabilities: str = DEFAULT_CAPABILITIES_SUPPORTED
    swarm_resource: str = ""
    nvidia_container_cli: CliConfig = field(default_factory=CliConfig)
    nvidia_container_runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    nvidia_container_runtime_hook: HookConfig = field(default_factory=HookConfig)
    nvidia_ctk: CtkConfig = field(default_factory=CtkConfig)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)
    source_path: str | None = field(default=None, compare=False)
    raw: dict = field(default_factory=dict, compare=False, repr=False)
