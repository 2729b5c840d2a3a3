"""Issue 9 §2: plans with hundreds or thousands of mounts and device nodes start.

The worker holds one detached mount (fd) per source until it has entered the container, and
the ldconfig child runs under RLIMIT_NOFILE 64: every capability on 1, 8 and 64 simulated
GPUs (with MIG) must still start, through the legacy hook under runc and through
`nvidia-container-cli configure`. The soft limit is lowered to 1024 (a systemd service's
default) so that the 64-GPU plan (~2.2k sources) needs the limit the plan asks for."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e.harness import Node, bundle_with_hook, needs_e2e, runc_run, venv_bin

pytestmark = needs_e2e

CASES = [(1, "1"), (8, "2"), (64, "7")]
SCRIPT = "ls /dev | grep -c '^nvidia[0-9]'; ls /dev/nvidia-caps | wc -l; cuda-probe; nvidia-smi -L | wc -l"
ALL_FLAGS = ["--compute", "--utility", "--video", "--graphics", "--display", "--ngx", "--compat32"]


@pytest.fixture(scope="module", params=CASES, ids=[f"{g}gpus-mig{m}" for g, m in CASES])
def big_node(request, tmp_path_factory) -> Node:
    gpus, mig = request.param
    d = tmp_path_factory.mktemp(f"n{gpus}") / "node"
    subprocess.run([venv_bin("nct"), "sim", "create", str(d), "--gpus", str(gpus), "--mig", mig],
                   check=True, capture_output=True)
    return Node(d, json.loads((d / "node.json").read_text()))


def _expect(node: Node) -> tuple[int, int, int]:
    gpus = node.info["gpus"]
    migs = sum(len(g["migs"]) for g in gpus)
    return len(gpus), 2 * migs, len(gpus) + migs


def _low_soft_limit(argv: list[str]) -> list[str]:
    return ["prlimit", "--nofile=1024:", "--", *argv]


def test_all_capabilities_through_the_hook(big_node, rootfs):
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"])
    res = big_node.run(_low_soft_limit(["runc", "run", "--bundle", str(bundle), f"many-{big_node.dir.parent.name}"]),
                       timeout=300)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    gpus, caps, smi = _expect(big_node)
    out = res.stdout.decode().split("\n")
    assert out[:4] == [str(gpus), str(caps), "cuDriverGetVersion=12040", str(smi)]


def test_all_capabilities_through_configure(big_node, rootfs):
    r = str(rootfs)
    cli = venv_bin("nvidia-container-cli")
    script = (f"{cli} configure --device=all {' '.join(ALL_FLAGS)} --ldconfig=@/sbin/ldconfig {r} && "
              f"chroot {r} sh -c '{SCRIPT}'")
    res = big_node.run(_low_soft_limit(["unshare", "-m", "sh", "-c", script]), timeout=300)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    gpus, caps, smi = _expect(big_node)
    assert res.stdout.decode().split("\n")[:4] == [str(gpus), str(caps), "cuDriverGetVersion=12040", str(smi)]
