"""ContainerEdits: what a GPU container gets, as data.

Computed by the pure planner (`nct.edits.planner.plan`) from (Node, ContainerRequest) and
rendered three ways: applied to a live container (`nct.container.apply`), applied to an OCI
spec (`nct.cdi.inject`), or serialised as a CDI spec (`nct.cdi.generate`). The fields mirror
CDI's containerEdits so that the CDI rendering is a plain serialisation; `proc_driver_gpus`
and `ldconfig_folders`/`symlinks` are expressed in CDI as nvidia-cdi-hook invocations.
"""

from __future__ import annotations

from nct.record import Record, field

# Mount options, as upstream uses them.
RO_MOUNT = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_MOUNT = ("nosuid", "nodev", "rbind", "rprivate", "noexec")


class DeviceNodeEdit(Record):
    """A device node to create in the container and allow in its device cgroup."""

    path: str  # container path
    host_path: str
    major: int
    minor: int
    type: str = "c"
    file_mode: int | None = None  # full st_mode of the host node, None = take from host
    permissions: str = "rw"  # cgroup access: subset of "rwm"
    uid: int | None = None
    gid: int | None = None


class MountEdit(Record):
    """A bind (or other) mount. Sources are host paths; targets are container paths."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = RO_MOUNT
    type: str | None = None  # None = bind


class HookEdit(Record):
    """An OCI hook. Our own hooks run `nvidia-cdi-hook <name> args...` with an explicit,
    minimal env: never the container's (the LD_PRELOAD class of bugs)."""

    hook_name: str  # createContainer, prestart, ...
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ("NVIDIA_CTK_DEBUG=false",)
    timeout: int | None = None


class SymlinkEdit(Record):
    """A symlink to create in the container: `link` (container path) -> `target`."""

    target: str
    link: str


class ContainerEdits(Record, frozen=False):
    """Everything to do to a container. Lists keep order; `merge` appends without duplicates."""

    env: list[str] = field(default_factory=list)
    device_nodes: list[DeviceNodeEdit] = field(default_factory=list)
    mounts: list[MountEdit] = field(default_factory=list)
    hooks: list[HookEdit] = field(default_factory=list)
    symlinks: list[SymlinkEdit] = field(default_factory=list)
    ldconfig_folders: list[str] = field(default_factory=list)  # container dirs to add to ld cache
    additional_gids: list[int] = field(default_factory=list)
    # Live containers only: bus ids whose /proc/driver/nvidia/gpus/<bus> dir is shown under
    # a tmpfs /proc/driver/nvidia (with params ModifyDeviceFiles: 0). None = leave /proc alone.
    proc_driver_gpus: list[str] | None = None
    # CUDA forward-compat dir in the image to add to the ld cache when newer than the host.
    cuda_compat_dir: str | None = None
    # Specs only (renderers turn them into nvidia-cdi-hook calls): container dirs made mode
    # 755 (`chmod`: /dev/dri of GPUs with DRM nodes, PlanOptions.open_dri), and whether the
    # container's application profile is updated (`update-application-profile`: GPU specs).
    chmod_dirs: list[str] = field(default_factory=list)
    app_profile: bool = False

    def merge(self, other: "ContainerEdits") -> "ContainerEdits":
        """Append other's edits (env by key replaces), keeping first-seen order."""
        out = ContainerEdits(
            env=list(self.env), device_nodes=list(self.device_nodes), mounts=list(self.mounts),
            hooks=list(self.hooks), symlinks=list(self.symlinks),
            ldconfig_folders=list(self.ldconfig_folders), additional_gids=list(self.additional_gids),
            proc_driver_gpus=None if self.proc_driver_gpus is None else list(self.proc_driver_gpus),
            cuda_compat_dir=self.cuda_compat_dir or other.cuda_compat_dir,
            chmod_dirs=list(self.chmod_dirs), app_profile=self.app_profile or other.app_profile,
        )
        if other.env:  # by key: a later value replaces, in place of the first
            by_key = {e.split("=", 1)[0]: e for e in out.env}
            for e in other.env:
                key = e.split("=", 1)[0]
                by_key.pop(key, None)
                by_key[key] = e
            out.env = list(by_key.values())
        for attr in ("device_nodes", "mounts", "hooks", "symlinks", "ldconfig_folders", "additional_gids",
                     "chmod_dirs"):
            mine = getattr(out, attr)
            seen = set(mine)  # records and strings hash: linear, whatever the sizes
            for item in getattr(other, attr):
                if item not in seen:
                    seen.add(item)
                    mine.append(item)
        if other.proc_driver_gpus is not None:
            base = out.proc_driver_gpus or []
            out.proc_driver_gpus = list(dict.fromkeys(base + other.proc_driver_gpus))
        return out

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks or self.symlinks
                    or self.ldconfig_folders or self.additional_gids or self.proc_driver_gpus
                    or self.chmod_dirs or self.app_profile)
