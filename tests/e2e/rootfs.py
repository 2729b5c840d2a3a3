"""Real container images for end-to-end tests: a busybox-static rootfs with the host's glibc
(so a dynamically linked probe and the simulated nvidia-smi run inside), and runc bundles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

BUSYBOX = shutil.which("busybox") or "/bin/busybox"

PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
    int (*get)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    if (!get) { printf("dlsym failed\n"); return 1; }
    int v = 0;
    get(&v);
    printf("cuDriverGetVersion=%d\n", v);
    return 0;
}
"""

GLIBC_FILES = (
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
)


def build_probe(dest: Path) -> Path:
    src = dest.with_suffix(".c")
    src.write_text(PROBE_C)
    subprocess.run(["gcc", "-O1", "-o", str(dest), str(src)], check=True)
    return dest


def make_rootfs(path: Path, *, debian: bool = True, probe: Path | None = None) -> Path:
    """A busybox rootfs with glibc. `debian` adds /etc/debian_version (multiarch lib dirs)."""
    for d in ("bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "usr/bin", "usr/lib/x86_64-linux-gnu",
              "lib/x86_64-linux-gnu", "lib64", "etc/ld.so.conf.d", "run", "var"):
        (path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, path / "bin/busybox")
    for applet in ("sh", "cat", "ls", "echo", "test", "readlink", "head", "grep", "env", "stat", "sleep", "true", "wc",
                   "mknod", "sed", "mkdir", "ln", "id", "mount", "cut", "tr", "sort", "touch", "rm"):
        os.symlink("busybox", path / "bin" / applet)
    for f in GLIBC_FILES:
        real = os.path.realpath(f)
        dst = path / f.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, dst)
    (path / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (path / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text("/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
    if debian:
        (path / "etc/debian_version").write_text("12.0\n")
    (path / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    if probe is not None:
        shutil.copy2(probe, path / "usr/bin/cuda-probe")
    return path


def make_bundle(bundle: Path, rootfs: Path, args: list[str], env: list[str] | None = None, *,
                hooks: dict | None = None, caps: list[str] | None = None,
                mounts: list[dict] | None = None) -> Path:
    """A runc bundle (config.json from `runc spec`, adjusted) around an existing rootfs."""
    bundle.mkdir(parents=True, exist_ok=True)
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    cfg = json.loads((bundle / "config.json").read_text())
    cfg["root"] = {"path": str(rootfs), "readonly": False}
    cfg["process"]["terminal"] = False
    cfg["process"]["args"] = args
    cfg["process"]["env"] = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + (env or [])
    if caps is not None:
        for k in ("bounding", "effective", "permitted"):
            cfg["process"]["capabilities"][k] = caps
    if hooks:
        cfg["hooks"] = hooks
    if mounts:
        cfg["mounts"].extend(mounts)
    (bundle / "config.json").write_text(json.dumps(cfg, indent=2))
    return bundle


def container_id() -> str:
    return "nct-" + uuid.uuid4().hex[:12]
