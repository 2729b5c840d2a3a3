"""What an engine edit is asked to do, and what it produced.  Engine modules are pure:
text in, text out, plus a record of what they changed so it can be undone later."""

from __future__ import annotations

from nct.record import Record, field

DEFAULT_CONFIG = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf",
}
DEFAULT_DROP_IN = {
    "docker": None,
    "containerd": "/etc/containerd/conf.d/99-nvidia.toml",
    "crio": "/etc/crio/crio.conf.d/99-nvidia.toml",
}
DEFAULT_RUNTIME_PATH = "nvidia-container-runtime"
DEFAULT_ABS_RUNTIME_PATH = "/usr/bin/nvidia-container-runtime"
DEFAULT_HOOK_PATH = "/usr/bin/nvidia-container-runtime-hook"


class RuntimeEntry(Record):
    """One runtime handler to register: its name and the binary the engine runs."""

    name: str
    path: str


class EngineRequest(Record):
    """A configure/unconfigure request.  `drop_in` None or "" means: edit `config` itself.
    The first runtime is the one made default by `set_as_default`."""

    engine: str
    config: str
    runtimes: tuple[RuntimeEntry, ...]
    drop_in: str | None = None
    set_as_default: bool = False
    cdi_enabled: bool = False
    config_source: str = "file"
    executable_path: str = ""
    # installer (nvidia-ctk-installer) settings; `runtime configure` leaves them at their defaults
    drop_in_host_path: str | None = None  # the drop-in's path as the engine sees it (imports)
    runtime_type: str = "io.containerd.runc.v2"  # containerd: for a runtime with nothing to copy
    container_annotations: tuple[str, ...] = ()  # containerd: container_annotations of our runtimes
    runtime_config_override: str = ""  # containerd: JSON object merged into each runtime table
    legacy_config: bool = False  # containerd: a new config is version 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.runtimes)

    @property
    def default_name(self) -> str:
        return self.runtimes[0].name


class Edit(Record, frozen=False):
    """New contents per file (None = delete), the file --dry-run prints, and the record
    of previous values (JSON-able) that makes the change reversible."""

    files: dict[str, str | None]
    primary: str
    changes: dict = field(default_factory=dict)


def previous(value) -> dict:
    """How a key looked before we changed it (`had` distinguishes absent from null)."""
    return {"had": value is not None, "previous": value}
