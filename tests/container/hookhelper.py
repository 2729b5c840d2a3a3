"""A prestart hook for tests: applies ContainerEdits (from a JSON file) to the container
described by the OCI state on stdin, with apply_edits. Usage: hookhelper.py EDITS.json [--rootfs DIR]
(with --rootfs: no state, no pid: apply in the current mount namespace)."""

import json
import os
import sys

from nct.container.apply import ApplyOptions, apply_edits
from nct.edits.model import ContainerEdits, DeviceNodeEdit, MountEdit, SymlinkEdit
from nct.errors import NctError


def load(path: str) -> tuple[ContainerEdits, ApplyOptions]:
    with open(path) as f:
        doc = json.load(f)
    e = doc.get("edits", {})
    edits = ContainerEdits(
        device_nodes=[DeviceNodeEdit(**d) for d in e.get("device_nodes", [])],
        mounts=[MountEdit(m["host_path"], m["container_path"], tuple(m.get("options", ("ro", "nosuid", "nodev"))))
                for m in e.get("mounts", [])],
        symlinks=[SymlinkEdit(**s) for s in e.get("symlinks", [])],
        ldconfig_folders=e.get("ldconfig_folders", []),
        proc_driver_gpus=e.get("proc_driver_gpus"),
        cuda_compat_dir=e.get("cuda_compat_dir"),
    )
    return edits, ApplyOptions(**doc.get("options", {}))


def main() -> int:
    edits, options = load(sys.argv[1])
    pid = None
    if len(sys.argv) > 3 and sys.argv[2] == "--rootfs":  # standalone: current mount namespace
        rootfs = sys.argv[3]
    else:
        state = json.load(sys.stdin)
        with open(os.path.join(state["bundle"], "config.json")) as f:
            spec = json.load(f)
        rootfs = spec["root"]["path"]
        if not os.path.isabs(rootfs):
            rootfs = os.path.join(state["bundle"], rootfs)
        pid = state["pid"]
    try:
        apply_edits(edits, rootfs, pid, options)
    except NctError as e:
        print(f"hookhelper: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
