"""`nvidia-container-cli info|list` on small driver trees (0, 1, 8 GPUs, MIG) and on
`nct sim` nodes when that module is present; errors are one line, exit 1, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "driver"))

import treebuilder  # noqa: E402
from nct.cli.container_cli import cli  # noqa: E402
from nct.driver import catalogue  # noqa: E402

CLI = str(Path(sys.executable).parent / "nvidia-container-cli")


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    if os.geteuid() != 0 or not treebuilder.have_gcc():
        pytest.skip("needs root (mknod, ldconfig -r) and gcc")
    return treebuilder.LibFarm(tmp_path_factory.mktemp("clifarm"), m32=treebuilder.gcc_m32())


@pytest.fixture(scope="module")
def trees(tmp_path_factory, farm):
    base = tmp_path_factory.mktemp("clitrees")
    return {
        0: treebuilder.build_tree(base / "g0", farm, gpus=0),
        1: treebuilder.build_tree(base / "g1", farm, gpus=1),
        8: treebuilder.build_tree(base / "g8", farm, gpus=8),
        "mig": treebuilder.build_tree(base / "mig", farm, gpus=2, mig={1: [(7, 0), (8, 0)]}),
    }


def run(tree, *args, env=None):
    e = {"NCT_PROC_ROOT": str(tree.root / "proc")} if tree is not None else {}
    e.update(env or {})
    root = ["--root", str(tree.root)] if tree is not None else []
    return CliRunner().invoke(cli, root + list(args), env=e)


def test_info_one_gpu_exact(trees):
    r = run(trees[1], "info")
    assert r.exit_code == 0, r.output
    g = trees[1].gpus[0]
    assert r.output == (
        "NVRM version:   550.54.15\n"
        "CUDA version:   N/A\n"
        "\n"
        "Device Index:   0\n"
        "Device Minor:   0\n"
        "Model:          NVIDIA A100-SXM4-40GB\n"
        "Brand:          Unknown\n"
        f"GPU UUID:       {g['uuid']}\n"
        "Bus Location:   00000000:07:00.0\n"
        "Architecture:   N/A\n"
    )


@pytest.mark.parametrize("count", [0, 8])
def test_info_counts_and_csv(trees, count):
    r = run(trees[count], "info")
    assert r.exit_code == 0 and r.output.count("Device Index:") == count
    if count:
        assert "Device Index:   7\n" in r.output
    r = run(trees[count], "info", "--csv")
    lines = r.output.splitlines()
    assert lines[:4] == ["NVRM version,CUDA version", "550.54.15,N/A", "",
                         "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture"]
    assert len(lines) == 4 + count
    if count:
        assert lines[4].startswith("0,0,NVIDIA A100-SXM4-40GB,Unknown,GPU-") and lines[4].endswith(",00000000:07:00.0,N/A")


def test_list_default_everything_in_order(trees, farm):
    t = trees[1]
    r = run(t, "list")
    assert r.exit_code == 0, r.output
    p = [line for line in r.output.splitlines()]
    R = str(t.root)
    assert p[:5] == [f"{R}/dev/nvidiactl", f"{R}/dev/nvidia-uvm", f"{R}/dev/nvidia-uvm-tools",
                     f"{R}/dev/nvidia-modeset", f"{R}/dev/nvidia0"]
    bins = [x for x in p if "/usr/bin/" in x]
    assert [os.path.basename(b) for b in bins] == [n for ns in catalogue.BINARIES.values() for n in ns]
    libs = [x for x in p if "x86_64-linux-gnu" in x]
    assert len(libs) == len(catalogue.all_library_names())  # EGL platform extras are not listed
    if farm.m32:
        assert len([x for x in p if "i386-linux-gnu" in x]) == len(catalogue.all_library_names())
    assert p[-2:] == [f"{R}/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", f"{R}/lib/firmware/nvidia/550.54.15/gsp_tu10x.bin"]
    assert all(x.startswith("/") for x in p)
    assert p.index(bins[0]) < p.index(libs[0])


def test_list_zero_gpus(trees):
    r = run(trees[0], "list", "-d", "all")
    assert r.output.splitlines() == [f"{trees[0].root}/dev/{n}" for n in
                                     ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")]


def test_list_selected_parts(trees, farm):
    t = trees[8]
    R = str(t.root)
    assert run(t, "list", "-d", "3").output.splitlines()[-1] == f"{R}/dev/nvidia3"
    assert run(t, "list", "-d", t.gpus[5]["uuid"].lower()).output.splitlines()[-1] == f"{R}/dev/nvidia5"
    assert run(t, "list", "-d", "0000:47:00.0").output.splitlines()[-1] == f"{R}/dev/nvidia2"
    out = run(t, "list", "-d", "1,0,1").output.splitlines()
    assert out[-2:] == [f"{R}/dev/nvidia1", f"{R}/dev/nvidia0"]
    libs = run(t, "list", "-l").output.splitlines()
    assert libs and all("x86_64-linux-gnu" in x for x in libs)
    libs32 = run(t, "list", "-l", "--compat32").output.splitlines()
    assert len(libs32) == len(libs) * (2 if farm.m32 else 1)
    assert run(t, "list", "-f").output.splitlines()[0].endswith("gsp_ga10x.bin")
    assert run(t, "list", "-f", "--no-gsp-firmware").output == ""
    assert [os.path.basename(x) for x in run(t, "list", "-b").output.splitlines()][0] == "nvidia-smi"


def test_list_mig(trees):
    t = trees["mig"]
    R = str(t.root)
    caps = f"{R}/proc/driver/nvidia/capabilities"
    gmin = 3 + 135 + 7 * 9
    out = run(t, "list", "-d", "1:0").output.splitlines()
    assert out[4:] == [f"{R}/dev/nvidia1", f"{caps}/gpu1/mig/gi7/access", f"{caps}/gpu1/mig/gi7/ci0/access",
                       f"{R}/dev/nvidia-caps/nvidia-cap{gmin}", f"{R}/dev/nvidia-caps/nvidia-cap{gmin + 1}"]
    out = run(t, "list", "-d", "all", "--mig-config", "all").output.splitlines()
    assert out[4:] == [f"{R}/dev/nvidia0", f"{R}/dev/nvidia1", f"{caps}/mig/config", f"{R}/dev/nvidia-caps/nvidia-cap1",
                       f"{caps}/gpu1/mig", f"{R}/dev/nvidia-caps"] + [
        f"{R}/dev/nvidia-caps/nvidia-cap{n}" for n in (gmin, gmin + 1, gmin + 9, gmin + 10)]
    out = run(t, "list", "-d", "all", "--mig-monitor", "all").output.splitlines()
    assert f"{caps}/mig/monitor" in out and f"{caps}/mig/config" not in out
    r = run(t, "list", "-d", "1:1", "--mig-config", "all")
    assert r.exit_code == 1
    assert "mig-config error: all: cannot enable mig-config with specific MIG devices selected" in r.output
    r = run(t, "list", "-d", "all", "--mig-config", "0")
    assert r.exit_code == 1 and "only 'all' devices are currently supported" in r.output


def test_list_imex(trees):
    t = trees[1]
    R = str(t.root)
    out = run(t, "list", "--imex-channel", "1").output.splitlines()
    assert f"{R}/dev/nvidia-caps-imex-channels/channel1" in out and f"{R}/dev/nvidia0" in out  # only imex: defaults
    out = run(t, "list", "-b", "--imex-channel=0,5").output.splitlines()
    assert out[:2] == [f"{R}/dev/nvidia-caps-imex-channels/channel0", f"{R}/dev/nvidia-caps-imex-channels/channel5"]
    r = run(t, "list", "--imex-channel", "x")
    assert r.exit_code == 1 and "error parsing IMEX info: invalid channel ID: x" in r.output


def test_errors_one_line(trees, tmp_path):
    r = run(trees[8], "list", "-d", "9")
    assert r.exit_code == 1 and r.output == "nvidia-container-cli: device error: 9: unknown device\n"
    r = run(trees[8], "list", "-d", "MIG-nope")
    assert r.exit_code == 1 and "unknown device" in r.output
    bad = treebuilder.Tree(tmp_path / "bad")
    bad.write("/proc/driver/nvidia/version", "NVRM version: nonsense\n")
    r = run(bad, "info")
    assert r.exit_code == 1
    assert r.output == f"nvidia-container-cli: initialization error: {bad.root}/proc/driver/nvidia/version:1: no driver version in 'NVRM version: nonsense'\n"


def test_no_driver_real_binary(tmp_path):
    """The installed console script: one line on stderr, exit 1, no traceback."""
    if not os.path.exists(CLI):
        pytest.skip("console script not installed")
    env = dict(os.environ, NCT_PROC_ROOT=str(tmp_path / "proc"))
    for args in (["info"], ["list"], ["--root", str(tmp_path), "info", "--csv"]):
        p = subprocess.run([CLI] + args, capture_output=True, text=True, env=env)
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr == f"nvidia-container-cli: initialization error: NVIDIA driver not loaded: {tmp_path}/proc/driver/nvidia/version not found\n"


def test_global_options(trees, tmp_path):
    t = trees[1]
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("cli-version: ")
    log = tmp_path / "debug.log"
    r = run(t, "-d", str(log), "-k", "-n", "--user=0:0", "--no-create-imex-channels", "-l", "/etc/ld.so.cache", "info")
    assert r.exit_code == 0 and "Device Index:   0" in r.output
    assert "NVML unavailable" in log.read_text()  # debug log written
    assert run(t, "-u", "info").exit_code == 0  # bare --user: current uid/gid
    r = run(t, "--user=no-such-user-x", "info")
    assert r.exit_code == 1 and "invalid user" in r.output
    r = run(t, "-l", "/etc/missing.cache", "info")
    assert r.exit_code == 1 and "ld.so.cache not found" in r.output


# --- simulated nodes (area SIM), when available ------------------------------------------

def _sim():
    try:
        from nct.sim.node import create_node  # noqa: F401
    except ImportError:
        pytest.skip("nct.sim.node not available yet")
    if os.geteuid() != 0 or not treebuilder.have_gcc():
        pytest.skip("needs root and gcc")
    return create_node


@pytest.mark.parametrize("gpus,mig", [(0, None), (1, None), (8, None), (2, "1")])
def test_on_sim_node(tmp_path, gpus, mig):
    create_node = _sim()
    kw = {"gpus": gpus} if mig is None else {"gpus": gpus, "mig": mig}
    sim = create_node(str(tmp_path / "n"), **kw)
    env = {"NCT_PROC_ROOT": os.path.join(sim.root, "proc")}
    r = CliRunner().invoke(cli, ["--root", sim.root, "info", "--csv"], env=env)
    assert r.exit_code == 0, r.output
    rows = r.output.splitlines()[4:]
    assert [row.split(",")[4] for row in rows] == [g.uuid for g in sim.gpus]
    assert r.output.splitlines()[1].startswith(sim.driver_version + ",")
    r = CliRunner().invoke(cli, ["--root", sim.root, "list"], env=env)
    assert r.exit_code == 0, r.output
    out = r.output.splitlines()
    for g in sim.gpus:
        assert sim.path(g.device_path) in out
    assert any(x.endswith(f"libcuda.so.{sim.driver_version}") for x in out)
    if mig:
        m = sim.gpus[0].migs[0]
        r = CliRunner().invoke(cli, ["--root", sim.root, "list", "-d", "0:0"], env=env)
        assert r.exit_code == 0, r.output
        assert sim.path(f"/dev/nvidia-caps/nvidia-cap{m.gi_minor}") in r.output.splitlines()


def test_inside_sim_run_with_nvml(tmp_path):
    """Inside `nct sim run` everything is at the real paths and the simulated NVML answers:
    brand, architecture, CUDA version and MIG UUIDs appear, and MIG UUIDs select devices."""
    create_node = _sim()
    nct = Path(sys.executable).parent / "nct"
    if not nct.exists():
        pytest.skip("nct console script not installed")
    sim = create_node(str(tmp_path / "n"), gpus=2, mig="1:2")
    env = {k: v for k, v in os.environ.items() if k != "NCT_PROC_ROOT"}

    def inside(*args):
        return subprocess.run([str(nct), "sim", "run", sim.dir, "--", CLI, *args],
                              capture_output=True, text=True, env=env)

    p = inside("info", "--csv")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1] == f"{sim.driver_version},{sim.cuda_version}"
    g = sim.gpus[1]
    assert lines[5] == f"1,{g.minor},{g.model},{g.brand},{g.uuid},{g.bus_id},{g.compute_capability}"
    m = g.migs[1]
    p = inside("list", "-d", m.uuid)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[4:] == [
        "/dev/nvidia1", f"/proc/driver/nvidia/capabilities/gpu1/mig/gi{m.gi}/access",
        f"/proc/driver/nvidia/capabilities/gpu1/mig/gi{m.gi}/ci{m.ci}/access",
        f"/dev/nvidia-caps/nvidia-cap{m.gi_minor}", f"/dev/nvidia-caps/nvidia-cap{m.ci_minor}"]
