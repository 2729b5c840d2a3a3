"""The installer image, built and run the way the GPU Operator runs it.

The image: a Debian 11 base made with debootstrap and `podman import`ed (no registry is
reachable), `podman build --network none` of packaging/container with the assembled toolkit.

The runs: the operator's toolkit pod (tests/packaging/gpu_operator.py: the DaemonSet asset
after the operator's transformations: `/bin/bash -c /bin/entrypoint.sh` from its ConfigMap,
privileged, hostPID, env-only settings, the engine's config dir at /runtime/config-dir/, its
drop-in dir at /runtime/config-dir.d/, its socket dir at /runtime/sock-dir/, the host root at
/host, /run/nvidia/..., /var/run/cdi) on a simulated GPU node, against the real engine from
Debian (containerd 1.6, dockerd 20.10) started on that node with the config the pod wrote.
A GPU container then runs through the engine with the toolkit the pod installed on the host;
SIGTERM to the pod must put every engine config file back byte for byte and remove the
toolkit and the pid file.  CRI-O is not in Debian: its hook mode is proven with podman
reading the OCI hook JSON the pod wrote (`podman --hooks-dir`), which is the same hooks.d
contract CRI-O uses.

The node's host paths are the operator's defaults (/etc/containerd, /run/nvidia, ...),
bound from temp dirs inside a private mount namespace (gpu_operator.SimHost); the toolkit
install dir is a temp dir set with the operator's `toolkit.installDir` (ROOT, same path in
pod and host).  The containerd drop-in has different pod and host paths, as under the
operator.  The simulated node's /proc/driver files exist only in the namespace's /proc (a
real kernel shows them in every procfs mount): the pod gets NCT_PROC_ROOT=/host/proc so the
installer reads them through the host root as it reads every other driver file."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path

import pytest

import gpu_operator as G
from toolkit_build import CACHE, REPO, toolkit_tree

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("podman", "runc", "nsenter")),
    reason="needs root, podman, runc, nsenter")
SUITE = "bullseye"
MIRROR = os.environ.get("NCT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE = f"localhost/nct-base:{SUITE}"
IMAGE = "localhost/nct-installer:test"
GPU_IMAGE = "docker.io/library/nct-cdi-test:latest"
# explicit limits: podman's defaults exceed what this host lets a container raise
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
GPU_SCRIPT = "ls /dev | tr '\\n' ' '; echo; nvidia-smi -L"


def base_tar() -> Path:
    """A tarball of a minbase Debian 11 root (cached under $NCT_CACHE/debootstrap)."""
    tar = CACHE / "debootstrap" / f"{SUITE}.tar"
    if tar.exists():
        return tar
    root = CACHE / "debootstrap" / SUITE
    if not (root / "bin/sh").exists():
        if not shutil.which("debootstrap"):
            pytest.skip("needs debootstrap")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(tmp), MIRROR], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"debootstrap {SUITE} failed (no network?): {r.stdout.strip().splitlines()[-1:]}")
        os.rename(tmp, root)
    subprocess.run(["tar", "--numeric-owner", "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
                    "-C", str(root), "-cf", f"{tar}.tmp", "."], check=True)
    os.rename(f"{tar}.tmp", tar)
    return tar


def storage_driver(directory: Path) -> str:
    """overlay (a container starts in 0.2 s; vfs copies the whole image each time) unless
    the directory is itself on overlayfs, where overlay cannot stack."""
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(directory)], capture_output=True, text=True).stdout
    return "vfs" if "overlay" in fs else "overlay"


class Podman:
    def __init__(self, base: Path):
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.driver = storage_driver(base)

    def cmd(self, *args: str) -> list[str]:
        return ["podman", "--root", str(self.base / "root"), "--runroot", str(self.base / "runroot"),
                "--storage-driver", self.driver, "--cgroup-manager", "cgroupfs", "--events-backend", "none",
                "--runtime", shutil.which("runc") or "runc", *args]

    def __call__(self, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def podman():
    base = Path(tempfile.mkdtemp(prefix="nct-img-", dir="/tmp"))  # podman wants a short runroot
    p = Podman(base)
    yield p
    p("rm", "-a", "-f", "-t", "0")
    G.remove_tree(base)


@pytest.fixture(scope="module")
def image(podman, tmp_path_factory) -> str:
    """The installer image, built once for the module."""
    toolkit = toolkit_tree()
    r = podman("import", str(base_tar()), BASE)
    assert r.returncode == 0, r.stderr
    ctx = tmp_path_factory.mktemp("build")
    shutil.copytree(toolkit, ctx / "toolkit", symlinks=True)
    r = podman("build", "--network", "none", "-f", str(REPO / "packaging/container/Containerfile"),
               "--build-arg", f"BASE={BASE}", "-t", IMAGE, str(ctx), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.rmtree(ctx)
    return IMAGE


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("opnode") / "node"
    subprocess.run([G.NCT, "sim", "create", str(d), "--gpus", "2"], check=True, capture_output=True)
    return d, json.loads((d / "node.json").read_text())


@pytest.fixture(scope="module")
def gpu_images(tmp_path_factory) -> tuple[Path, Path]:
    """A busybox+glibc rootfs as a plain tar (docker/podman import) and an OCI archive (ctr)."""
    from e2e import rootfs as R
    from e2e_cdi.images import oci_archive, rootfs_tar

    if not os.path.exists(R.BUSYBOX):
        pytest.skip("needs busybox-static")
    d = tmp_path_factory.mktemp("gpuimg")
    plain = rootfs_tar(R.make_rootfs(d / "rootfs"), d / "rootfs.tar")
    return plain, oci_archive(plain, d / "oci.tar")


def test_image_has_the_operator_entrypoints_and_no_other_python(podman, image):
    r = podman("run", "--rm", "--network", "none", *LIMITS, "--entrypoint", "/bin/sh", image, "-c",
               "for c in python3 python3.9 pip nvidia-toolkit nvidia-ctk-installer; do command -v $c; done; "
               "test -x /bin/bash && echo /bin/bash; "
               "/opt/nct/nct --version")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["/opt/nct/nvidia-toolkit", "/opt/nct/nvidia-ctk-installer", "/bin/bash",
                                "nct,", "version", "0.1.0"], r.stdout + r.stderr  # no Python but ours
    cfg = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert cfg["Entrypoint"] == ["/opt/nct/nvidia-ctk-installer"] and cfg["StopSignal"] == "SIGTERM"
    assert "NVIDIA_VISIBLE_DEVICES=void" in cfg["Env"]


# ---------------------------------------------------------------------------------------
# The operator's pod on a simulated node, against the real engine


class Case:
    """One pod run: temp host dirs bound at the operator's host paths in a SimHost."""

    def __init__(self, podman: Podman, image: str, node: Path, runtime: str):
        self.podman, self.image, self.runtime = podman, image, runtime
        self.t = Path(tempfile.mkdtemp(prefix="nct-op-", dir="/tmp"))  # short: socket paths
        self.install_dir = str(self.t / "usr/local/nvidia")
        binds = {p: self.t / p.lstrip("/") for p in
                 ("/etc/containerd", "/etc/docker", "/etc/crio", "/run/nvidia", "/var/run/cdi", "/run/containerd",
                  "/run/nct-docker", "/usr/share/containers/oci/hooks.d", "/run/containers/oci/hooks.d")}
        for d in [*binds.values(), self.t / "usr/local/nvidia", self.t / "etc/containerd/conf.d",
                  self.t / "etc/crio/crio.conf.d", self.t / "run/nvidia/toolkit", self.t / "run/nvidia/validations",
                  self.t / "run/nvidia/driver"]:
            d.mkdir(parents=True, exist_ok=True)
        (self.t / "run/nvidia/validations/driver-ready").write_text(G.HOST_DRIVER_READY)
        self.entrypoint = self.t / "entrypoint.sh"
        self.entrypoint.write_text(G.ENTRYPOINT_SH)
        self.entrypoint.chmod(0o700)
        try:
            self.host = G.SimHost(node, binds)
        except BaseException:
            G.remove_tree(self.t)
            raise
        self.name = f"nct-toolkit-{uuid.uuid4().hex[:8]}"
        self.pod_started = False

    def hp(self, host_path: str) -> Path:
        """Where a host path of the simulated node lives on the real host."""
        return self.t / host_path.lstrip("/")

    def pod_cmd(self, *args: str) -> list[str]:
        return self.podman.cmd(*args)

    def start_pod(self, pod: G.Pod) -> None:
        pod.env["NCT_PROC_ROOT"] = "/host/proc"  # the simulated node's /proc/driver (see the module doc)
        r = self.host.run(self.pod_cmd("run", "-d", "--name", self.name, *LIMITS,
                                       *G.podman_run_args(pod, self.entrypoint), self.image, "/bin/entrypoint.sh"))
        assert r.returncode == 0, r.stderr
        self.pod_started = True

    def logs(self) -> str:
        r = self.host.run(self.pod_cmd("logs", self.name))
        return r.stdout + r.stderr

    def running(self) -> bool:
        r = self.host.run(self.pod_cmd("inspect", "-f", "{{.State.Running}}", self.name))
        return r.stdout.strip() == "true"

    def wait_ready(self, predicate, what: str) -> None:
        def check():
            assert self.running(), f"the toolkit pod exited:\n{self.logs()}"
            return predicate()
        G.wait_for(check, what, diag=self.logs)

    def stop_pod(self) -> None:
        """SIGTERM, as the kubelet does when the DaemonSet pod goes away."""
        r = self.host.run(self.pod_cmd("stop", "-t", "60", self.name), timeout=120)
        assert r.returncode == 0, r.stderr
        code = self.host.run(self.pod_cmd("inspect", "-f", "{{.State.ExitCode}}", self.name)).stdout.strip()
        assert code == "0", f"exit {code}:\n{self.logs()}"

    def toolkit_config(self) -> dict:
        return tomllib.loads(Path(self.install_dir, "toolkit/.config/nvidia-container-runtime/config.toml")
                             .read_text())

    def close(self) -> None:
        try:
            if self.pod_started:
                self.host.run(self.pod_cmd("rm", "-f", "-t", "0", self.name))
        finally:
            self.host.close()
            G.remove_tree(self.t)


@pytest.fixture
def case(podman, image, node):
    made: list[Case] = []

    def make(runtime: str) -> Case:
        c = Case(podman, image, node[0], runtime)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def imports_cover(imports: list[str], host_path: str) -> bool:
    """containerd's `imports` name the drop-in (or a glob of its dir) by its HOST path, and
    never by the pod's /runtime/... path."""
    return any(fnmatch.fnmatch(host_path, i) for i in imports) and not any("/runtime/" in i for i in imports)


def smi_uuids(out: str) -> list[str]:
    return [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in out.splitlines() if line.startswith("GPU ")]


def dev_names(out: str) -> list[str]:
    return out.splitlines()[0].split() if out else []


CONTAINERD_TOML = """# containerd on a GPU node: comments, order and spacing must survive the pod
version = 2
root = "{t}/containerd/root"
state = "{t}/containerd/state"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


class Containerd:
    """containerd under a supervisor that restarts it when it exits (systemd's Restart=
    always): the installer's restart by signal is SIGHUP, which ends containerd."""

    def __init__(self, c: Case):
        self.c = c
        self.starts = c.t / "containerd/starts"
        self.starts.parent.mkdir(parents=True)
        self.proc = c.host.daemon(f"while :; do echo start >> {self.starts}; "
                                  "containerd --config /etc/containerd/config.toml; sleep 0.2; done",
                                  c.t / "containerd/log")
        G.wait_for(self.up, "containerd to answer", diag=self.log)

    def count(self) -> int:
        return len(self.starts.read_text().split()) if self.starts.exists() else 0

    def ctr(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return self.c.host.run(["ctr", "-a", "/run/containerd/containerd.sock", "-n", "nct-op", *args],
                               timeout=timeout)

    def up(self) -> bool:
        return self.ctr("version", timeout=30).returncode == 0

    def log(self) -> str:
        return (self.c.t / "containerd/log").read_text(errors="replace")[-3000:]

    def dump(self) -> dict:
        r = self.c.host.run(["containerd", "--config", "/etc/containerd/config.toml", "config", "dump"])
        assert r.returncode == 0, r.stderr
        return tomllib.loads(r.stdout)["plugins"]["io.containerd.grpc.v1.cri"]

    def run_gpu(self, oci_tar: Path, binary: str, visible: str) -> str:
        r = self.ctr("images", "import", str(oci_tar))
        assert r.returncode == 0, r.stdout + r.stderr
        r = self.ctr("run", "--rm", "--runtime", "io.containerd.runc.v2", "--runc-binary", binary, "--env",
                     f"NVIDIA_VISIBLE_DEVICES={visible}", GPU_IMAGE, f"gpu-{uuid.uuid4().hex[:6]}", "sh", "-c",
                     GPU_SCRIPT)
        assert r.returncode == 0, r.stdout + r.stderr + self.log()
        return r.stdout


@pytest.mark.skipif(not shutil.which("containerd") or not shutil.which("ctr"), reason="needs containerd")
@pytest.mark.parametrize("cdi", [False, True], ids=["cdi-off", "cdi-on"])
def test_operator_pod_configures_containerd_drop_in(case, node, gpu_images, cdi):
    c = case("containerd")
    config = c.hp("/etc/containerd/config.toml")
    config.write_text(CONTAINERD_TOML.format(t=c.t))
    before = G.snapshot(c.hp("/etc/containerd"))
    engine = Containerd(c)
    pod = G.operator_pod("containerd", cdi=cdi, install_dir=c.install_dir)
    # the drop-in: written by the pod at its pod path, imported by containerd at its host path
    assert pod.env["RUNTIME_DROP_IN_CONFIG"] == "/runtime/config-dir.d/99-nvidia.toml"
    assert pod.env["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] == "/etc/containerd/conf.d/99-nvidia.toml"
    c.start_pod(pod)
    c.wait_ready(lambda: engine.count() >= 2 and engine.up(), "the pod to restart containerd")

    toolkit = Path(c.install_dir, "toolkit")
    assert c.hp("/etc/containerd/conf.d/99-nvidia.toml").is_file()
    imports = tomllib.loads(config.read_text()).get("imports", [])
    assert imports_cover(imports, "/etc/containerd/conf.d/99-nvidia.toml"), imports
    cri = engine.dump()  # containerd's own merged view
    runtimes = cri["containerd"]["runtimes"]
    for name, binary in (("nvidia", "nvidia-container-runtime"), ("nvidia-cdi", "nvidia-container-runtime.cdi"),
                         ("nvidia-legacy", "nvidia-container-runtime.legacy")):
        assert runtimes[name]["options"]["BinaryName"] == str(toolkit / binary)
        assert runtimes[name]["runtime_type"] == "io.containerd.runc.v2"
    # containerd 1.6 has no enable_cdi (1.7 does): read it from the drop-in the pod wrote
    drop_in = tomllib.loads(c.hp("/etc/containerd/conf.d/99-nvidia.toml").read_text())
    assert drop_in["plugins"]["io.containerd.grpc.v1.cri"].get("enable_cdi", False) is cdi
    assert (cri["containerd"]["default_runtime_name"] == "nvidia") is not cdi  # the operator: not with CDI
    tk = c.toolkit_config()
    assert tk["nvidia-container-cli"]["root"] == "/"  # the host driver's host path, not /host
    assert tk["nvidia-container-runtime-hook"]["path"] == str(toolkit / "nvidia-container-runtime-hook")
    pid = int(c.hp("/run/nvidia/toolkit/toolkit.pid").read_text())
    assert os.path.exists(f"/proc/{pid}")  # hostPID: the pid on the host
    spec_file = c.hp("/var/run/cdi/management.nvidia.com-gpu.yaml")
    if cdi:
        rt = tk["nvidia-container-runtime"]
        assert rt["mode"] == "cdi" and rt["modes"]["cdi"]["default-kind"] == "management.nvidia.com/gpu"
        import yaml

        spec = yaml.safe_load(spec_file.read_text())
        assert spec["kind"] == "management.nvidia.com/gpu" and [d["name"] for d in spec["devices"]] == ["all"]
        assert "/host/" not in spec_file.read_text() and "/driver-root" not in spec_file.read_text()
        assert str(toolkit / "nvidia-cdi-hook") in spec_file.read_text()
    else:
        assert not spec_file.exists()

    # a GPU container through containerd, with the runtime the config names (on the host)
    info = node[1]
    out = engine.run_gpu(gpu_images[1], runtimes["nvidia"]["options"]["BinaryName"], "all" if cdi else "1")
    gpus = [g["uuid"] for g in info["gpus"]]
    if cdi:  # the management spec: every GPU
        assert {"nvidia0", "nvidia1", "nvidiactl"} <= set(dev_names(out)) and smi_uuids(out) == gpus, out
    else:
        assert "nvidia1" in dev_names(out) and "nvidia0" not in dev_names(out), out
        assert smi_uuids(out) == [gpus[1]], out

    c.stop_pod()
    assert G.snapshot(c.hp("/etc/containerd")) == before  # every file back, byte for byte
    assert not toolkit.exists() and not c.hp("/run/nvidia/toolkit/toolkit.pid").exists()
    assert not spec_file.exists()
    G.wait_for(lambda: engine.count() >= 3 and engine.up(), "containerd restarted after the undo",
               diag=engine.log)
    assert "nvidia" not in engine.dump()["containerd"]["runtimes"]


class Dockerd:
    def __init__(self, c: Case):
        self.c = c
        d = c.t / "docker"
        d.mkdir()
        self.sock = "unix:///run/nct-docker/docker.sock"
        self.proc = c.host.daemon(
            f"exec dockerd --config-file /etc/docker/daemon.json --data-root {d}/data --exec-root {d}/exec "
            f"-H {self.sock} --pidfile {d}/pid --bridge=none --iptables=false --ip-forward=false "
            "--ip-masq=false --exec-opt native.cgroupdriver=cgroupfs --storage-driver=vfs", d / "log")
        G.wait_for(lambda: self.proc.poll() is not None or self.docker("version").returncode == 0,
                   "dockerd to answer", diag=self.log)
        assert self.proc.poll() is None, self.log()

    def docker(self, *args: str) -> subprocess.CompletedProcess:
        return self.c.host.run(["docker", "-H", self.sock, *args])

    def log(self) -> str:
        return (self.c.t / "docker/log").read_text(errors="replace")[-3000:]

    def runtimes(self) -> dict:
        r = self.docker("info", "--format", "{{json .Runtimes}}")
        return json.loads(r.stdout) if r.returncode == 0 else {}


@pytest.mark.skipif(not shutil.which("dockerd") or not shutil.which("docker"), reason="needs docker.io")
def test_operator_pod_configures_docker(case, node, gpu_images):
    c = case("docker")
    daemon_json = c.hp("/etc/docker/daemon.json")
    original = '{\n    "log-level": "warn",\n    "max-concurrent-downloads": 2\n}\n'
    daemon_json.write_text(original)
    engine = Dockerd(c)
    before = G.snapshot(c.hp("/etc/docker"))  # after dockerd wrote its own key.json there
    c.start_pod(G.operator_pod("docker", install_dir=c.install_dir,
                               toolkit_env={"DOCKER_SOCKET": "/run/nct-docker/docker.sock"}))
    c.wait_ready(lambda: "nvidia" in engine.runtimes(), "dockerd to list the nvidia runtime (SIGHUP reload)")
    toolkit = Path(c.install_dir, "toolkit")
    assert engine.runtimes()["nvidia"]["path"] == str(toolkit / "nvidia-container-runtime")
    assert engine.docker("info", "--format", "{{.DefaultRuntime}}").stdout.strip() == "nvidia"  # upstream's default

    r = engine.docker("import", str(gpu_images[0]), "nct-gpu:test")
    assert r.returncode == 0, r.stderr
    r = engine.docker("run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0", "nct-gpu:test",
                      "sh", "-c", GPU_SCRIPT)
    assert r.returncode == 0, r.stdout + r.stderr + engine.log()
    assert "nvidia0" in dev_names(r.stdout) and "nvidia1" not in dev_names(r.stdout), r.stdout
    assert smi_uuids(r.stdout) == [node[1]["gpus"][0]["uuid"]]

    c.stop_pod()
    assert G.snapshot(c.hp("/etc/docker")) == before
    assert not c.hp("/run/nvidia/toolkit/toolkit.pid").exists()
    # The node must stay usable.  dockerd's SIGHUP reload keeps the values of keys that are
    # gone from daemon.json ("runtimes", "default-runtime"), so it still runs containers
    # through the nvidia runtime: the installer keeps the toolkit dir and says why.
    assert engine.docker("info", "--format", "{{.DefaultRuntime}}").stdout.strip() == "nvidia"
    r = engine.docker("run", "--rm", "--network", "none", "nct-gpu:test", "true")
    assert r.returncode == 0, r.stderr
    assert (toolkit / "nvidia-container-runtime").exists()
    assert f"keeping {toolkit}: dockerd's SIGHUP reload does not forget" in c.logs()


CRIO_CONF = '# CRI-O on a GPU node\n[crio.runtime]\ndefault_runtime = "runc"\n'


def test_operator_pod_crio_hook_mode(case, podman, node, gpu_images):
    """CRI-O's hook mode (the operator's choice for CRI-O without CDI): the OCI hook JSON in
    the hooks dir, naming the host path of the installed hook; CRI-O's config untouched.
    No CRI-O in Debian: podman runs the GPU container from the same hooks dir."""
    c = case("crio")
    c.hp("/etc/crio/config.toml").write_text(CRIO_CONF)
    c.hp("/etc/crio/crio.conf.d/10-base.conf").write_text('[crio.runtime]\nlog_level = "info"\n')
    before = G.snapshot(c.hp("/etc/crio"))
    pod = G.operator_pod("crio", install_dir=c.install_dir)
    assert pod.env["CRIO_CONFIG_MODE"] == "hook"
    c.start_pod(pod)
    hook_file = c.hp("/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json")
    c.wait_ready(hook_file.exists, "the OCI hook JSON")
    toolkit = Path(c.install_dir, "toolkit")
    hook = json.loads(hook_file.read_text())
    assert hook["hook"]["path"] == str(toolkit / "nvidia-container-runtime-hook")
    assert hook["stages"] == ["prestart"] and hook["hook"]["args"][-1] == "prestart"
    assert G.snapshot(c.hp("/etc/crio")) == before

    gpu = Podman(c.t / "gpu-podman")
    r = c.host.run(gpu.cmd("import", str(gpu_images[0]), "nct-gpu:test"))
    assert r.returncode == 0, r.stderr
    r = c.host.run(gpu.cmd("--hooks-dir", "/usr/share/containers/oci/hooks.d", "run", "--rm", *LIMITS,
                           "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=1", "nct-gpu:test", "sh", "-c",
                           GPU_SCRIPT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nvidia1" in dev_names(r.stdout) and "nvidia0" not in dev_names(r.stdout), r.stdout
    assert smi_uuids(r.stdout) == [node[1]["gpus"][1]["uuid"]]

    c.stop_pod()
    assert not hook_file.exists() and G.snapshot(c.hp("/etc/crio")) == before
    assert not toolkit.exists() and not c.hp("/run/nvidia/toolkit/toolkit.pid").exists()


# ---------------------------------------------------------------------------------------
# Upstream's documented env combinations, through the image's own entrypoint


ROWS = {
    "docker-name-no-default-config-keys": (
        "docker",
        {"DOCKER_RUNTIME_NAME": "nvidia-gpu", "NVIDIA_RUNTIME_SET_AS_DEFAULT": "false",
         "NVIDIA_CONTAINER_RUNTIME_LOG_LEVEL": "debug", "NVIDIA_CONTAINER_RUNTIME_MODE": "legacy",
         "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true",
         "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
         "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"}),
    "containerd-class-cdi-in-runtime": (
        "containerd",
        {"CONTAINERD_RUNTIME_CLASS": "gpu", "CONTAINERD_SET_AS_DEFAULT": "false", "RUNTIME_ENABLE_CDI": "true"}),
    "crio-config-mode-drop-in": ("crio", {"CRIO_CONFIG_MODE": "config"}),
}


def run_row(podman: Podman, image: str, t: Path, runtime: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The image run with its own ENTRYPOINT, env only (NO_DAEMON: install, configure, exit),
    host dirs at the operator's pod paths; no engine (RUNTIME_RESTART_MODE=none)."""
    dirs = {"etc": t / "etc", "dropin": t / "dropin", "root": t / "root", "pid": t / "pid"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    full = {"RUNTIME": runtime, "ROOT": str(dirs["root"]), "NO_DAEMON": "true", "RUNTIME_RESTART_MODE": "none",
            "TOOLKIT_PID_FILE": "/run/nvidia/toolkit/toolkit.pid", "NVIDIA_DRIVER_ROOT": "/",
            "RUNTIME_CONFIG": G.CONFIG_DIR + os.path.basename(G.TOP_LEVEL[runtime])}
    if runtime in G.DROP_IN:
        full["RUNTIME_DROP_IN_CONFIG"] = G.DROP_IN_DIR + os.path.basename(G.DROP_IN[runtime])
        full["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] = G.DROP_IN[runtime]
    full.update(env)
    args = ["run", "--rm", "--privileged", "--network", "none", *LIMITS,
            "-v", f"{dirs['etc']}:{G.CONFIG_DIR}", "-v", f"{dirs['dropin']}:{G.DROP_IN_DIR}",
            "-v", f"{dirs['root']}:{dirs['root']}", "-v", f"{dirs['pid']}:/run/nvidia/toolkit"]
    for k, v in full.items():
        args += ["-e", f"{k}={v}"]
    return podman(*args, image, timeout=300)


@pytest.mark.parametrize("row", list(ROWS))
def test_env_combination_through_the_image_entrypoint(podman, image, tmp_path, row):
    runtime, env = ROWS[row]
    top = tmp_path / "etc" / os.path.basename(G.TOP_LEVEL[runtime])
    top.parent.mkdir(parents=True)
    top.write_text({"docker": "{}\n", "containerd": "version = 2\n", "crio": CRIO_CONF}[runtime])
    r = run_row(podman, image, tmp_path, runtime, env)
    assert r.returncode == 0, r.stdout + r.stderr
    toolkit = tmp_path / "root/toolkit"
    runtime_path = str(toolkit / "nvidia-container-runtime")
    assert (toolkit / "nvidia-container-runtime-hook").is_file()  # NO_DAEMON: left installed
    assert not (tmp_path / "pid/toolkit.pid").exists()
    if row.startswith("docker"):
        cfg = json.loads(top.read_text())
        assert cfg["runtimes"]["nvidia-gpu"]["path"] == runtime_path and "default-runtime" not in cfg
        tk = tomllib.loads((toolkit / ".config/nvidia-container-runtime/config.toml").read_text())
        assert tk["nvidia-container-runtime"]["log-level"] == "debug"
        assert tk["nvidia-container-runtime"]["mode"] == "legacy"
        assert tk["accept-nvidia-visible-devices-as-volume-mounts"] is True
        assert tk["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
        assert tk["nvidia-container-cli"]["root"] == "/run/nvidia/driver"
    elif row.startswith("containerd"):
        drop = tomllib.loads((tmp_path / "dropin/99-nvidia.toml").read_text())
        cri = drop["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["containerd"]["runtimes"]["gpu"]["options"]["BinaryName"] == runtime_path
        assert cri["enable_cdi"] is True and cri["containerd"].get("default_runtime_name") != "gpu"
        assert imports_cover(tomllib.loads(top.read_text())["imports"], G.DROP_IN["containerd"])
    else:
        drop = tomllib.loads((tmp_path / "dropin/99-nvidia.conf").read_text())
        assert drop["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"] == runtime_path
        assert top.read_text() == CRIO_CONF  # CRI-O's own config is read, never written


@pytest.mark.parametrize("env,word", [({"RUNTIME": "podman"}, "podman"),
                                      ({"TOOLKIT_PID_FILE": "/run/nvidia/toolkit/other.pid"}, "other.pid")],
                         ids=["unknown-runtime", "pid-file-name"])
def test_bad_env_fails_cleanly_through_the_image(podman, image, tmp_path, env, word):
    top = tmp_path / "etc/daemon.json"
    top.parent.mkdir(parents=True)
    top.write_text("{}\n")
    r = run_row(podman, image, tmp_path, "docker", env)
    assert r.returncode != 0
    assert word in r.stderr.strip().splitlines()[-1], r.stderr
    assert top.read_text() == "{}\n" and not (tmp_path / "root/toolkit").exists()
