"""`--config-mode oci-hook`: the podman / CRI-O hooks.d JSON (hooks schema 1.0.0) that runs
the legacy prestart hook for every container."""

from __future__ import annotations

import json
import os

STANDARD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def hook_json(hook_path: str) -> str:
    dirs = list(STANDARD_PATH)
    hook_dir = os.path.dirname(hook_path)
    if hook_dir and hook_dir not in dirs:
        dirs.append(hook_dir)
    hook = {
        "version": "1.0.0",
        "hook": {
            "path": hook_path,
            "args": [os.path.basename(hook_path), "prestart"],
            "env": ["PATH=" + ":".join(dirs)],
        },
        "when": {"always": True, "commands": [".*"]},
        "stages": ["prestart"],
    }
    return json.dumps(hook, indent=4) + "\n"
