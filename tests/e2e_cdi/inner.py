"""Runs INSIDE `nct sim run NODE --` (the simulated node at the real paths): generates a CDI
spec with the real `nvidia-ctk cdi generate`, then starts a container through one engine.

    python inner.py runc SPEC_DIR BUNDLE DEVICE...     inject, runc run, delete
    python inner.py shim MODE SPEC_DIR BUNDLE          runc create through nvidia-container-runtime
    python inner.py devchar BUNDLE CGROUPS_PATH        jit-cdi create (runtime: true), then /dev/char
    python inner.py podman SPEC_FILE WORK DEVICE -- CMD...
    python inner.py containerd WORK TAR CONFIG -- CMD...

Everything it starts is stopped by pid before it exits (and the mount namespace dies with
the `nct sim run` process). Output: the container's stdout/stderr, then engine errors."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

VENV_BIN = os.path.dirname(sys.executable)
HOOK = os.path.join(VENV_BIN, "nvidia-cdi-hook")
PR_SET_CHILD_SUBREAPER = 36


def generate(output: str, *extra: str) -> None:
    subprocess.run([os.path.join(VENV_BIN, "nvidia-ctk"), "cdi", "generate", "--output", output,
                    "--nvidia-cdi-hook-path", HOOK, *extra], check=True)


def run_runc(spec_dir: str, bundle: str, devices: list[str]) -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
    from nct.cdi.registry import Registry
    from nct.runtime.bundle import read_spec, write_spec

    generate(os.path.join(spec_dir, "nvidia.yaml"))
    spec = read_spec(os.path.join(bundle, "config.json"), strict=False)
    reg = Registry([spec_dir])
    if reg.errors:
        print("registry errors:", reg.errors, flush=True)
    write_spec(os.path.join(bundle, "config.json"), reg.inject(spec, devices))
    cid = f"nct-cdigen-{os.getpid()}"
    state = os.path.join(os.path.dirname(bundle), "runc-state")
    try:
        p = subprocess.run(["runc", "--root", state, "run", "--bundle", bundle, cid],
                           capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["runc", "--root", state, "delete", "-f", cid], capture_output=True)
    sys.stdout.write(p.stdout + p.stderr)
    return p.returncode


SHIM_CONFIG = """[nvidia-container-runtime]
mode = "{mode}"
runtimes = ["runc"]
debug = "{log}"
log-level = "debug"
[nvidia-container-runtime.modes.cdi]
spec-dirs = ["{spec_dir}"]
"""


def run_shim(mode: str, spec_dir: str, bundle: str) -> int:
    """The engine's sequence through our shim: create (the only intercepted command, where
    the spec is modified), start, wait for the process to stop, delete."""
    generate(os.path.join(spec_dir, "nvidia.yaml"))
    work = os.path.dirname(bundle)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(SHIM_CONFIG.format(mode=mode, spec_dir=spec_dir, log=os.path.join(work, "runtime.log")))
    env = dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=config)
    shim = [os.path.join(VENV_BIN, "nvidia-container-runtime"), "--root", os.path.join(work, "runc-state")]
    cid = f"nct-cdigen-{os.getpid()}"
    out_path = os.path.join(work, "container.out")
    with open(out_path, "w") as out:
        c = subprocess.run(shim + ["create", "--bundle", bundle, cid], stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.STDOUT, env=env, timeout=120)
    try:
        if c.returncode != 0:
            print(open(out_path).read(), flush=True)
            return c.returncode
        subprocess.run(shim + ["start", cid], check=True, env=env, timeout=60)
        for _ in range(1200):
            st = subprocess.run(shim + ["state", cid], capture_output=True, text=True, env=env)
            if st.returncode != 0 or json.loads(st.stdout).get("status") == "stopped":
                break
            time.sleep(0.05)
    finally:
        subprocess.run(shim + ["delete", "-f", cid], capture_output=True, env=env)
    sys.stdout.write(open(out_path).read())
    return 0


def run_devchar(bundle: str, cgroups_path: str) -> int:
    """The shim's `create` in jit-cdi mode for a bundle with `cgroups_path` (the low-level
    runtime is `true`: only the shim's work matters); prints "LINK M:m -> target" for each
    /dev/char entry that reaches an NVIDIA node."""
    work = os.path.dirname(bundle)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write('[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = ["true"]\n')
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        spec = json.load(f)
    spec.setdefault("linux", {})["cgroupsPath"] = cgroups_path
    with open(path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=config)
    c = subprocess.run([os.path.join(VENV_BIN, "nvidia-container-runtime"), "create", "--bundle", bundle, "x"],
                       capture_output=True, text=True, env=env, timeout=120)
    if c.returncode != 0:
        print(c.stdout + c.stderr, flush=True)
        return c.returncode
    for name in sorted(os.listdir("/dev/char")) if os.path.isdir("/dev/char") else []:
        target = os.path.join("/dev/char", name)
        if os.path.islink(target) and "nvidia" in os.readlink(target):
            print(f"LINK {name} -> {os.readlink(target)}")
    return 0


def _children() -> list[int]:
    """Pids whose parent is this process (orphans reparent here: we are a subreaper)."""
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            out.append(int(d))
    return out


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def run_podman(spec_file: str, work: str, tar: str, device: str, cmd: list[str]) -> int:
    import shutil
    import tempfile

    # A default spec, as upstream's: podman 4.3 reads it when it needs no more than
    # cdiVersion 0.5.0, i.e. when every device node is world rw (no additionalGids). The
    # simulated DRM card nodes are 0660 group video, so make them 0666 first: /dev is this
    # namespace's own overlay, the node's files stay as they are (simnodes.world_rw_dri).
    for name in os.listdir("/dev/dri"):
        if name.startswith(("card", "renderD")):
            os.chmod(os.path.join("/dev/dri", name), 0o666)
    generate(spec_file)
    # podman wants a short runroot (<= 50 characters): a temp dir of our own, removed after
    short = tempfile.mkdtemp(prefix="nct-pm-", dir="/tmp")
    base = ["podman", "--root", os.path.join(work, "root"), "--runroot", short,
            "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none",
            "--runtime", shutil.which("runc") or "runc"]  # crun refuses this v1/v2 hybrid host
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(work, "config"), XDG_DATA_HOME=os.path.join(work, "data"))
    try:
        r = subprocess.run(base + ["import", tar, "nct-cdi-test:latest"], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print("podman import failed:", r.stderr.strip(), flush=True)
            return 1
        p = subprocess.run(base + ["run", "--rm", "--device", device, "--ulimit", "nofile=20000:20000",
                                   "--ulimit", "nproc=32768:32768", "--network", "none", "nct-cdi-test:latest", *cmd],
                           capture_output=True, text=True, timeout=180, env=env)
        sys.stdout.write(p.stdout + p.stderr)
        return p.returncode
    finally:
        subprocess.run(base + ["rmi", "-a", "-f"], capture_output=True, env=env)
        shutil.rmtree(short, ignore_errors=True)
        os.unlink(spec_file)


CONTAINERD_CONFIG = """version = 2
root = "{work}/root"
state = "{work}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{work}/containerd.sock"
[ttrpc]
  address = "{work}/containerd.sock.ttrpc"
[debug]
  address = "{work}/debug.sock"
"""


def run_containerd(work: str, tar: str, nct_config: str, cmd: list[str]) -> int:
    conf = os.path.join(work, "containerd.toml")
    with open(conf, "w") as f:
        f.write(CONTAINERD_CONFIG.format(work=work))
    sock = os.path.join(work, "containerd.sock")
    env = dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=nct_config,
               PATH=f"{VENV_BIN}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}")
    log = open(os.path.join(work, "containerd.log"), "w")
    daemon = subprocess.Popen(["containerd", "--config", conf], stdout=log, stderr=log, env=env)
    rc = 1
    try:
        ctr = ["ctr", "--address", sock, "--namespace", "nct-test"]
        for _ in range(200):
            if subprocess.run(ctr + ["version"], capture_output=True).returncode == 0:
                break
            if daemon.poll() is not None:
                print("containerd exited early", flush=True)
                return 1
            time.sleep(0.1)
        r = subprocess.run(ctr + ["image", "import", tar], capture_output=True, text=True)
        if r.returncode != 0:
            print("ctr import failed:", r.stdout, r.stderr, flush=True)
            return 1
        image = "docker.io/library/nct-cdi-test:latest"
        p = subprocess.run(ctr + ["run", "--runc-binary", os.path.join(VENV_BIN, "nvidia-container-runtime"),
                                  "--env", "NVIDIA_VISIBLE_DEVICES=0", "--rm", image, f"nct-{os.getpid()}", *cmd],
                           capture_output=True, text=True, timeout=180, env=env)
        sys.stdout.write(p.stdout + p.stderr)
        rc = p.returncode
    finally:
        _stop(daemon.pid)
        log.close()
    return rc


def reap() -> None:
    """Stop what the engines left behind (containerd shims, conmon: reparented to us as
    the subreaper) by pid, and collect every exited child so no zombie is left."""
    for pid in _children():
        _stop(pid)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    engine = argv[0]
    try:
        if engine == "runc":
            return run_runc(argv[1], argv[2], argv[3:])
        if engine == "shim":
            return run_shim(argv[1], argv[2], argv[3])
        if engine == "devchar":
            return run_devchar(argv[1], argv[2])
        cmd = argv[argv.index("--") + 1:]
        head = argv[:argv.index("--")]
        if engine == "podman":
            return run_podman(head[1], head[2], head[3], head[4], cmd)
        if engine == "containerd":
            return run_containerd(head[1], head[2], head[3], cmd)
    finally:
        reap()
    print(f"unknown engine {engine}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
