"""Real parts for container tests: busybox rootfs, runc bundles, mknod'ed device nodes,
gcc-built shared libraries, a "host" victim dir that hostile images point at."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
HOOKHELPER = os.path.join(HERE, "hookhelper.py")
NV_MAJOR = 195  # no driver registers it here: open() of an allowed node gives ENXIO


def _have(tool: str) -> bool:
    return shutil.which(tool) is not None


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces, mknod, cgroups)")
needs_runc = pytest.mark.skipif(not (_have("runc") and os.path.exists("/bin/busybox")),
                                reason="needs runc and busybox-static")
needs_gcc = pytest.mark.skipif(not _have("gcc"), reason="needs gcc to build test libraries")


def make_busybox_rootfs(path: str) -> str:
    """A minimal Debian-looking rootfs: static busybox with relative applet links."""
    os.makedirs(os.path.join(path, "bin"))
    for d in ("etc", "proc", "sys", "dev", "tmp", "usr/lib/x86_64-linux-gnu", "usr/bin"):
        os.makedirs(os.path.join(path, d), exist_ok=True)
    shutil.copy2("/bin/busybox", os.path.join(path, "bin", "busybox"))
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        if a != "busybox":
            os.symlink("busybox", os.path.join(path, "bin", a))
    with open(os.path.join(path, "etc", "debian_version"), "w") as f:
        f.write("12.0\n")
    return path


@pytest.fixture(scope="session")
def busybox_template(tmp_path_factory) -> str:
    if not os.path.exists("/bin/busybox"):
        pytest.skip("needs busybox-static")
    return make_busybox_rootfs(str(tmp_path_factory.mktemp("bbtpl") / "rootfs"))


@pytest.fixture
def rootfs(tmp_path, busybox_template) -> str:
    dst = str(tmp_path / "bundle" / "rootfs")
    shutil.copytree(busybox_template, dst, symlinks=True)
    return dst


@pytest.fixture
def victim(tmp_path) -> str:
    """A host directory hostile images aim at; tests assert it stays untouched."""
    v = tmp_path / "host-victim"
    (v / "etc").mkdir(parents=True)
    (v / "etc" / "ld.so.cache").write_bytes(b"HOST CACHE")
    (v / "lib").mkdir()
    (v / "lib" / "keep").write_text("host")
    return str(v)


def snapshot(path: str) -> dict[str, tuple]:
    """Everything under a host dir: names, types, modes, contents (to assert "untouched")."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            data = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    data = f.read()
            out[os.path.relpath(p, path)] = (st.st_mode, data, os.readlink(p) if os.path.islink(p) else None)
    return out


def build_lib(dirpath: str, name: str, soname: str, body: str = "int nct_probe(void) { return 42; }") -> str:
    """A real shared library built with gcc, with a SONAME."""
    os.makedirs(dirpath, exist_ok=True)
    src = os.path.join(dirpath, f".{name}.c")
    with open(src, "w") as f:
        f.write(body + "\n")
    out = os.path.join(dirpath, name)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", out, f"-Wl,-soname,{soname}", src], check=True)
    os.unlink(src)
    return out


@pytest.fixture
def host_gpu(tmp_path) -> dict:
    """Host-side "driver": char nodes 195:{0,1,255} and a driver library dir."""
    if os.geteuid() != 0:
        pytest.skip("needs root for mknod")
    dev = tmp_path / "hostdev"
    dev.mkdir()
    nodes = {}
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        p = str(dev / name)
        os.mknod(p, 0o666 | 0o020000, os.makedev(NV_MAJOR, minor))
        nodes[name] = p
    libdir = str(tmp_path / "hostlib")
    lib = None
    if shutil.which("gcc"):
        lib = build_lib(libdir, "libnvfake.so.550.54.15", "libnvfake.so.1")
    return {"dev": str(dev), "nodes": nodes, "libdir": libdir, "lib": lib}


def write_bundle(bundle: str, args: list[str], *, hooks: dict | None = None, env: list[str] | None = None,
                 extra_mounts: list[dict] | None = None) -> str:
    """config.json from `runc spec`, adjusted: no terminal, writable root, our args/hooks."""
    os.makedirs(bundle, exist_ok=True)
    if os.path.exists(os.path.join(bundle, "config.json")):
        os.unlink(os.path.join(bundle, "config.json"))
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    spec["process"]["terminal"] = False
    spec["process"]["args"] = args
    spec["process"]["env"] = env or ["PATH=/bin:/usr/bin"]
    spec["root"] = {"path": "rootfs", "readonly": False}
    if hooks:
        spec["hooks"] = hooks
    if extra_mounts:
        spec["mounts"].extend(extra_mounts)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f, indent=1)
    return bundle


def helper_hook(edits_file: str, env: list[str] | None = None) -> dict:
    """A prestart hook entry running hookhelper.py with this interpreter."""
    return {"prestart": [{"path": sys.executable, "args": [sys.executable, HOOKHELPER, edits_file],
                          "env": env or ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}]}


def write_edits(path: str, edits: dict, options: dict | None = None) -> str:
    with open(path, "w") as f:
        json.dump({"edits": edits, "options": options or {}}, f)
    return path


def run_container(bundle: str, timeout: int = 60) -> subprocess.CompletedProcess:
    cid = "nct-test-" + uuid.uuid4().hex[:10]
    try:
        return subprocess.run(["runc", "run", "--bundle", bundle, cid], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
