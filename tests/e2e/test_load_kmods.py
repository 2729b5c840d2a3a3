"""load-kmods end to end: runc + our prestart hook inside `nct sim run` on a simulated node
whose /dev lacks nodes (removed inside the namespace, where /dev is the node's tree on a
private overlay), and `nvidia-container-cli --load-kmods info` on a node tree in place.

/proc/modules is the node's own file (the hook's NCT_PROC_ROOT is the node's proc tree,
with a `modules` file the test writes), so the host's modules never matter; modprobe is a
static fake bound over /sbin/modprobe inside the namespace only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.harness import HOOK, Node, _WHY, bundle_with_hook, needs_e2e, venv_bin
from e2e import rootfs as R

pytestmark = needs_e2e

ALL_LOADED = """nvidia_uvm 1437696 0 - Live 0x0000000000000000 (POE)
nvidia_modeset 1290240 0 - Live 0x0000000000000000 (POE)
nvidia 56807424 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)
"""
NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia0", "nvidia1", "nvidia2")
SCRIPT = 'echo "== nodes"; ls /dev | grep nvidia; echo "== probe"; cuda-probe 2>&1; echo "== end"'

FAKE_MODPROBE = r"""
#include <stdio.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    FILE *f = fopen(LOG, "a");
    if (f) {
        int n = 0;
        for (char **e = environ; *e; e++) n++;
        fprintf(f, "%s env=%d\n", argc > 1 ? argv[1] : "-", n);
        fclose(f);
    }
    fprintf(stderr, "modprobe: FATAL: Module %s not found.\n", argc > 1 ? argv[1] : "?");
    return 1;
}
"""


@pytest.fixture
def node(tmp_path) -> Node:
    """A fresh node per test (3 GPUs, minors in reverse bus order so index != minor; GPU 2
    with 2 MIG devices) with every NVIDIA module listed in its proc/modules."""
    if _WHY:
        pytest.skip(_WHY)
    d = tmp_path / "node"
    subprocess.run([venv_bin("nct"), "sim", "create", str(d), "--gpus", "3", "--mig", "2:2",
                    "--minor-order", "reverse"], check=True, capture_output=True)
    (d / "root/proc/modules").write_text(ALL_LOADED)
    return Node(d, json.loads((d / "node.json").read_text()))


def hooks_for(node: Node, config: Path) -> dict:
    proc = node.dir / "root" / "proc"
    return {"prestart": [{"path": venv_bin(HOOK), "args": [HOOK, "-config", str(config), "prestart"],
                          "env": [f"NCT_PROC_ROOT={proc}"]}]}


def run_in_node(node: Node, bundle: Path, prelude: str, *, timeout: int = 120):
    """In one `nct sim run`: the prelude (removing nodes...), runc with the bundle, then the
    type, major:minor and mode of every NVIDIA node in the namespace's /dev."""
    check = "; ".join(f"stat -c '%n %F %t %T %a' /dev/{n} 2>/dev/null || echo /dev/{n} absent" for n in NODES)
    script = f"{prelude}\nrunc run --bundle {bundle} {R.container_id()}; echo \"== rc $?\"\n{check}\n"
    res = node.run(["sh", "-c", script], timeout=timeout)
    host: dict[str, tuple] = {}
    for line in res.stdout.decode().splitlines():
        m = re.match(r"^(/dev/\S+) (character special file) ([0-9a-f]+) ([0-9a-f]+) (\d+)$", line)
        if m:
            host[m.group(1)] = ("c", int(m.group(3), 16), int(m.group(4), 16), int(m.group(5), 8))
        elif line.endswith(" absent"):
            host[line.split()[0]] = None
        elif line.startswith("/dev/"):
            host[line.split()[0]] = "symlink" if " symbolic link " in line else "other"
    return res, host


def container_nodes(out: str) -> set[str]:
    part = out.split("== nodes", 1)[1].split("== probe", 1)[0]
    return {line.strip() for line in part.splitlines() if line.strip()}


def gpu_minor(node: Node, index: int) -> int:
    return node.gpu(index)["minor"]


def config(tmp_path: Path, text: str = "") -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_missing_nodes_are_created(node, rootfs, tmp_path):
    """Default config (load-kmods = true): nvidia-uvm, -uvm-tools and GPU 1's node
    (removed in the namespace) are made with the kernel's majors, mode 0666; the
    container sees every GPU and nvidia-uvm, and CUDA works."""
    removed = f"/dev/nvidia{gpu_minor(node, 1)}"
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all"], hooks=hooks_for(node, config(tmp_path)))
    res, host = run_in_node(node, bundle, f"rm /dev/nvidia-uvm /dev/nvidia-uvm-tools {removed}")
    out = res.stdout.decode()
    assert "== rc 0" in out, res.stderr.decode() + out
    seen = container_nodes(out)
    assert {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} <= seen, seen
    assert "cuDriverGetVersion=12040" in out
    uvm = node.info["majors"]["nvidia-uvm"]
    assert host["/dev/nvidia-uvm"] == ("c", uvm, 0, 0o666)
    assert host["/dev/nvidia-uvm-tools"] == ("c", uvm, 1, 0o666)
    assert host[removed] == ("c", 195, gpu_minor(node, 1), 0o666)


def test_load_kmods_false_leaves_nodes_missing(node, rootfs, tmp_path):
    cfg = config(tmp_path, "[nvidia-container-cli]\nload-kmods = false\n")
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all"], hooks=hooks_for(node, cfg))
    res, host = run_in_node(node, bundle, "rm /dev/nvidia-uvm /dev/nvidia-uvm-tools")
    out = res.stdout.decode()
    assert "== rc 0" in out, res.stderr.decode() + out
    seen = container_nodes(out)
    assert {"nvidia0", "nvidia1", "nvidia2", "nvidiactl"} <= seen and "nvidia-uvm" not in seen, seen
    assert host["/dev/nvidia-uvm"] is None and host["/dev/nvidia-uvm-tools"] is None


def test_dangling_symlink_is_not_followed(node, rootfs, tmp_path):
    target = tmp_path / "uvm-target"
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all"], hooks=hooks_for(node, config(tmp_path)))
    res, host = run_in_node(node, bundle, f"rm /dev/nvidia-uvm && ln -s {target} /dev/nvidia-uvm")
    out = res.stdout.decode()
    assert "== rc 0" in out, res.stderr.decode() + out
    assert not os.path.lexists(target)
    assert host["/dev/nvidia-uvm"] == "symlink"  # left alone
    assert "nvidia-uvm" not in container_nodes(out)
    assert host["/dev/nvidia-uvm-tools"][:3] == ("c", node.info["majors"]["nvidia-uvm"], 1)


@pytest.fixture(scope="module")
def failing_modprobe(tmp_path_factory) -> tuple[Path, Path]:
    """A static modprobe that logs 'MODULE env=N' to a host file and fails."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    d = tmp_path_factory.mktemp("fake-modprobe")
    log = d / "calls.log"
    (d / "modprobe.c").write_text(FAKE_MODPROBE)
    res = subprocess.run(["gcc", "-static", f'-DLOG="{log}"', "-o", str(d / "modprobe"), str(d / "modprobe.c")],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"gcc -static failed: {res.stderr[-300:]}")
    return d / "modprobe", log


def test_failing_modprobe_does_not_fail_the_container(node, rootfs, tmp_path, failing_modprobe):
    """/proc/modules without nvidia_uvm: modprobe is run (empty environment) for it alone,
    fails, and the container still starts with the nodes that exist."""
    binary, log = failing_modprobe
    if log.exists():
        log.unlink()
    no_uvm = [line for line in ALL_LOADED.splitlines(keepends=True) if not line.startswith("nvidia_uvm ")]
    (node.dir / "root/proc/modules").write_text("".join(no_uvm))
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all"], hooks=hooks_for(node, config(tmp_path)))
    res, host = run_in_node(node, bundle, f"mount --bind {binary} /sbin/modprobe")
    out = res.stdout.decode()
    assert "== rc 0" in out, res.stderr.decode() + out
    assert log.read_text().splitlines() == ["nvidia-uvm env=0"]
    assert {"nvidia0", "nvidia1", "nvidia2", "nvidia-uvm"} <= container_nodes(out)
    assert "cuDriverGetVersion=12040" in out


def test_cli_load_kmods_info_creates_missing_node(node):
    """`nvidia-container-cli --load-kmods info` with the node tree as driver root (outside
    any namespace: the tree's own dev/ gets the node)."""
    root = node.dir / "root"
    removed = root / "dev" / f"nvidia{gpu_minor(node, 2)}"
    removed.unlink()
    (root / "dev/nvidia-uvm").unlink()
    env = {**os.environ, "NCT_PROC_ROOT": str(root / "proc")}
    cli = venv_bin("nvidia-container-cli")
    res = subprocess.run([cli, "--root", str(root), "info", "--csv"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert not removed.exists() and not (root / "dev/nvidia-uvm").exists()
    res = subprocess.run([cli, "--load-kmods", "--root", str(root), "info", "--csv"], capture_output=True, text=True,
                         env=env)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    uvm = node.info["majors"]["nvidia-uvm"]
    for path, major, minor in ((removed, 195, gpu_minor(node, 2)), (root / "dev/nvidia-uvm", uvm, 0)):
        st = os.lstat(path)
        assert (st.st_mode & 0o170000) == 0o020000 and (st.st_mode & 0o7777) == 0o666
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor)
    assert node.gpu(2)["uuid"] in res.stdout


def test_cli_configure_load_kmods_with_imex(node, rootfs):
    """`nvidia-container-cli --load-kmods configure --imex-channel=3` (standalone, in the
    namespace): the missing nvidia-uvm and the requested IMEX channel node are made on the
    node, then bound into the rootfs; --no-create-imex-channels makes no channel."""
    cli = venv_bin("nvidia-container-cli")
    proc = node.dir / "root" / "proc"
    r = str(rootfs)
    imex = node.info["majors"]["nvidia-caps-imex-channels"]
    script = (f"rm /dev/nvidia-uvm; NCT_PROC_ROOT={proc} {cli} --load-kmods --no-create-imex-channels configure "
              f"--device=0 --compute --ldconfig=@/sbin/ldconfig --no-cntlibs {r} 2>&1; "
              "ls /dev/nvidia-caps-imex-channels 2>&1; echo '== second'; "
              f"NCT_PROC_ROOT={proc} {cli} --load-kmods configure --device=0 --compute --imex-channel=3 "
              f"--ldconfig=@/sbin/ldconfig {r} && ls {r}/dev {r}/dev/nvidia-caps-imex-channels && "
              "stat -c '%n %t %T %a' /dev/nvidia-uvm /dev/nvidia-caps-imex-channels/channel3")
    res = node.run(["sh", "-c", script])
    out = res.stdout.decode()
    assert res.returncode == 0, res.stderr.decode() + out
    first, second = out.split("== second")
    assert "No such file or directory" in first
    assert "nvidia-uvm" in second.split() and "channel3" in second.split()
    assert f"/dev/nvidia-uvm {node.info['majors']['nvidia-uvm']:x} 0 666" in second
    assert f"/dev/nvidia-caps-imex-channels/channel3 {imex:x} 3 666" in second


# --- issue 9 §3: a request is validated whole before any host node is made -------------------

IMEX_LS = "ls /dev/nvidia-caps-imex-channels 2>/dev/null | wc -l"


def test_hook_imex_request_over_the_driver_count_makes_no_node(node, rootfs, tmp_path):
    """3000 channel ids (under the list limit, over the driver's 2048): the plan refuses
    channel 2048 in one line before a single node is made on the host."""
    ids = ",".join(str(i) for i in range(3000))
    bundle = bundle_with_hook(rootfs, "echo STARTED", ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={ids}"],
                              hooks=hooks_for(node, config(tmp_path)))
    res, _ = run_in_node(node, bundle, "", timeout=300)
    out = res.stdout.decode()
    assert "STARTED" not in out and "== rc 0" not in out
    assert "nvidia-container-runtime-hook: unknown IMEX channel: 2048" in res.stderr.decode()
    res = node.run(["sh", "-c", f"{IMEX_LS}"])
    assert res.stdout.decode().split() == ["0"]


def test_hook_imex_nodes_of_a_failed_container_are_removed(node, rootfs, tmp_path):
    """Channels 3 and 5 are made on the host (load-kmods), then configuring fails (the
    image has a file where /usr/bin, the binaries' mount dir, must be): both nodes are
    gone again, while a channel node that was there before stays."""
    shutil.rmtree(rootfs / "usr/bin")
    (rootfs / "usr/bin").write_text("not a dir")
    imex = node.info["majors"]["nvidia-caps-imex-channels"]
    bundle = bundle_with_hook(rootfs, "echo STARTED", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=3,5,7"],
                              hooks=hooks_for(node, config(tmp_path)))
    prelude = f"mkdir -p /dev/nvidia-caps-imex-channels && mknod -m 666 /dev/nvidia-caps-imex-channels/channel7 c {imex} 7"
    script = f"{prelude}\nrunc run --bundle {bundle} {R.container_id()}; echo \"== rc $?\"; ls /dev/nvidia-caps-imex-channels"
    res = node.run(["sh", "-c", script])
    out = res.stdout.decode()
    assert "STARTED" not in out and "== rc 0" not in out, out
    assert "/usr/bin" in res.stderr.decode()
    assert out.split("== rc", 1)[1].split()[1:] == ["channel7"]


def test_cli_imex_nodes_of_a_failed_configure_are_removed(node, rootfs):
    cli = venv_bin("nvidia-container-cli")
    proc = node.dir / "root" / "proc"
    (rootfs / "dev/nvidia-caps-imex-channels").write_text("not a dir")
    script = (f"NCT_PROC_ROOT={proc} {cli} --load-kmods configure --device=0 --utility --imex-channel=3,4 "
              f"--no-cgroups {rootfs}; echo \"== rc $?\"; {IMEX_LS}")
    res = node.run(["sh", "-c", script])
    out = res.stdout.decode()
    assert "== rc 1" in out, out + res.stderr.decode()
    err = res.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nvidia-container-cli: mount error: ") and "nvidia-caps-imex" in err[0]
    assert out.split("== rc 1", 1)[1].split() == ["0"]
