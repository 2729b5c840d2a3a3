"""Fixtures for the shim's end-to-end tests: the installed entry points, a fake
low-level runtime that records how it was run, config files, simulated nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def entry_point(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed next to {sys.executable} (pip install -e .)")
    return str(path)


FAKE_RUNTIME = """#!{python} -IS
import json, os, sys
out = os.environ["FAKE_RT_OUT"]
with open(out, "a") as f:
    raw = open("/proc/self/environ", "rb").read().decode()  # not os.environ: PEP 538 edits it
    env = dict(x.split("=", 1) for x in raw.split("\\0") if x)
    f.write(json.dumps({{"argv": sys.argv, "env": env}}) + "\\n")
print("fake runtime ran")
"""


class FakeRuntime:
    def __init__(self, path: Path, out: Path):
        self.path = path
        self.out = out

    def calls(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines()]


@pytest.fixture
def fake_runtime(tmp_path) -> FakeRuntime:
    d = tmp_path / "rtbin"
    d.mkdir()
    path = d / "fake-runc"
    path.write_text(FAKE_RUNTIME.format(python=sys.executable))
    path.chmod(0o755)
    return FakeRuntime(path, tmp_path / "runtime-calls.jsonl")


class Shim:
    """Runs an installed shim entry point with a private config file."""

    def __init__(self, tmp_path: Path, runtime: FakeRuntime):
        self.tmp = tmp_path
        self.runtime = runtime
        self.config = tmp_path / "config.toml"
        self.write_config()

    def write_config(self, body: str = "", runtimes: list[str] | None = None) -> None:
        rts = runtimes if runtimes is not None else [str(self.runtime.path)]
        text = body
        if "[nvidia-container-runtime]" not in body:
            text += "\n[nvidia-container-runtime]\n"
        text = text.replace("[nvidia-container-runtime]\n",
                            "[nvidia-container-runtime]\nruntimes = " + json.dumps(rts) + "\n", 1)
        self.config.write_text(text)

    def env(self, **extra: str) -> dict:
        env = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config),
               "FAKE_RT_OUT": str(self.runtime.out), "HOME": str(self.tmp)}
        env.update(extra)
        return env

    def run(self, args: list[str], *, name: str = "nvidia-container-runtime", env: dict | None = None,
            cwd: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([entry_point(name), *args], env=env or self.env(), cwd=cwd,
                              capture_output=True, text=True, timeout=120)


@pytest.fixture
def shim(tmp_path, fake_runtime) -> Shim:
    return Shim(tmp_path, fake_runtime)


def oci_spec(env: list[str] = (), **extra) -> dict:
    spec = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/",
                    "env": ["PATH=/usr/bin:/bin", *env],
                    "capabilities": {"bounding": ["CAP_KILL"]}},
        "root": {"path": "rootfs"},
        "hostname": "x",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
    }
    spec.update(extra)
    return spec


@pytest.fixture
def make_bundle(tmp_path):
    def make(spec: dict, name: str = "bundle") -> Path:
        b = tmp_path / name
        b.mkdir()
        (b / "config.json").write_text(json.dumps(spec, indent=1))
        return b
    return make


@pytest.fixture(scope="session")
def sim_node(tmp_path_factory):
    """A simulated 4-GPU node (driver files, /proc, /dev under DIR/root)."""
    nct = entry_point("nct")
    d = tmp_path_factory.mktemp("sim") / "node"
    r = subprocess.run([nct, "sim", "create", str(d), "--gpus", "4"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"nct sim create failed: {r.stderr.strip()}")
    return d


def needs_root_runc():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if not shutil.which("runc"):
        pytest.skip("needs runc")


# --- real containers ------------------------------------------------------------------------

GLIBC = ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6")
PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
    int (*get)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    int v = 0;
    if (get) get(&v);
    printf("cuDriverGetVersion=%d\n", v);
    return 0;
}
"""


def make_rootfs(path: Path) -> Path:
    """busybox-static + the host's glibc (+ a dlopen(libcuda.so.1) probe when gcc exists)."""
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("needs busybox-static")
    for d in ("bin", "sbin", "etc/ld.so.conf.d", "dev", "proc", "sys", "tmp", "out", "usr/bin",
              "usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "lib64", "run"):
        (path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, path / "bin/busybox")
    for applet in ("sh", "ls", "cat", "echo", "readlink", "test", "sleep", "grep"):
        os.symlink("busybox", path / "bin" / applet)
    for f in GLIBC:
        dst = path / f.lstrip("/")
        shutil.copy2(os.path.realpath(f), dst)
    (path / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (path / "etc/debian_version").write_text("12.0\n")
    if shutil.which("gcc"):
        src = path.parent / "probe.c"
        src.write_text(PROBE_C)
        subprocess.run(["gcc", "-O1", "-o", str(path / "usr/bin/cuda-probe"), str(src)], check=True)
    return path


def runc_bundle(base: Path, script: str, env: list[str] = ()) -> tuple[Path, Path]:
    """A bundle running `sh -c script` with /out bind-mounted from base/out."""
    rootfs = make_rootfs(base / "rootfs")
    out = base / "out"
    out.mkdir()
    bundle = base / "bundle"
    bundle.mkdir()
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"] = {"path": str(rootfs), "readonly": False}
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/bin/sh", "-c", script]
    spec["process"]["env"] = ["PATH=/usr/bin:/bin:/sbin", *env]
    spec["mounts"].append({"destination": "/out", "type": "bind", "source": str(out),
                           "options": ["rbind", "rw"]})
    (bundle / "config.json").write_text(json.dumps(spec, indent=1))
    return bundle, out
