"""`nct sim create`: the tree on disk (procfs files, device nodes, ELF libraries, ld cache)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from nct.driver import catalogue
from nct.sim import layout
from nct.sim.node import create_node, load_node

from .conftest import nct, needs_gcc, needs_root

pytestmark = [needs_root, needs_gcc]


def elf_info(path: Path) -> tuple[int, str, str | None]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        soname = None
        for sec in elf.iter_sections():
            if isinstance(sec, DynamicSection):
                for tag in sec.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
        return elf.elfclass, elf.header["e_machine"], soname


def test_node_json_roundtrip(node8):
    again = load_node(node8.dir)
    assert again == node8
    data = json.loads(Path(node8.dir, "node.json").read_text())
    assert data["driver_version"] == "550.54.15" and data["cuda_version"] == "12.4"
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    assert len(data["gpus"][2]["migs"]) == 7


def test_proc_tree(node8):
    r = Path(node8.root)
    assert (r / "proc/driver/nvidia/version").read_text() == layout.version_text("550.54.15")
    assert "ModifyDeviceFiles: 1\n" in (r / "proc/driver/nvidia/params").read_text()
    assert (r / "proc/driver/nvidia/registry").exists()
    dirs = sorted(p.name for p in (r / "proc/driver/nvidia/gpus").iterdir())
    assert dirs == sorted(g.proc_bus for g in node8.gpus)
    for g in node8.gpus:
        info = (r / f"proc/driver/nvidia/gpus/{g.proc_bus}/information").read_text()
        assert f"GPU UUID: \t {g.uuid}\n" in info and f"Device Minor: \t {g.minor}\n" in info


def test_device_nodes_match_proc_devices(node8):
    r = Path(node8.root)
    majors = {}
    for line in (r / "proc/devices").read_text().split("\n\n")[0].splitlines()[1:]:
        num, name = line.split(None, 1)
        majors[name] = int(num)
    expect = {"nvidiactl": ("nvidia-frontend", 255), "nvidia-modeset": ("nvidia-frontend", 254),
              "nvidia-uvm": ("nvidia-uvm", 0), "nvidia-uvm-tools": ("nvidia-uvm", 1)}
    expect.update({f"nvidia{g.minor}": ("nvidia-frontend", g.minor) for g in node8.gpus})
    for name, (dev, minor) in expect.items():
        st = os.stat(r / "dev" / name)
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (majors[dev], minor), name
    assert majors["nvidia-frontend"] == 195 and "nvidia-caps-imex-channels" in majors
    for g in node8.gpus:
        card = os.stat(r / f"dev/dri/card{g.card_minor}")
        assert (os.major(card.st_rdev), os.minor(card.st_rdev)) == (226, g.card_minor)
        assert os.readlink(r / f"dev/dri/by-path/pci-{g.proc_bus}-render") == f"../renderD{g.render_minor}"
    # the device nodes are real, and this machine has no driver behind them
    with pytest.raises(OSError):
        open(r / "dev/nvidia0", "rb")


def test_mig_files(node8):
    r = Path(node8.root)
    caps_major = node8.majors["nvidia-caps"]
    minors = dict(line.rsplit(" ", 1) for line in (r / "proc/driver/nvidia-caps/mig-minors").read_text().splitlines())
    assert (r / "proc/driver/nvidia/capabilities/mig/config").read_text().startswith("DeviceFileMinor: 1\n")
    assert (r / "proc/driver/nvidia/capabilities/mig/monitor").read_text() == \
        "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    gpu = node8.gpus[1]
    assert gpu.mig_enabled and len(gpu.migs) == 3 and not node8.gpus[0].mig_enabled
    for m in node8.migs:
        g = node8.gpus[[x.uuid for x in node8.gpus].index(next(x.uuid for x in node8.gpus if m in x.migs))]
        base = r / f"proc/driver/nvidia/capabilities/gpu{g.minor}/mig/gi{m.gi}"
        assert (base / "access").read_text() == f"DeviceFileMinor: {m.gi_minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
        assert (base / f"ci{m.ci}/access").read_text().startswith(f"DeviceFileMinor: {m.ci_minor}\n")
        assert minors[f"gpu{g.minor}/gi{m.gi}/access"] == str(m.gi_minor)
        assert minors[f"gpu{g.minor}/gi{m.gi}/ci{m.ci}/access"] == str(m.ci_minor)
        for minor in (m.gi_minor, m.ci_minor):
            st = os.stat(r / f"dev/nvidia-caps/nvidia-cap{minor}")
            assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (caps_major, minor)
    assert not (r / "proc/driver/nvidia/capabilities/gpu0").exists()


def test_libraries_are_real_elf_with_sonames(node8):
    r = Path(node8.root)
    v = node8.driver_version
    for name in catalogue.all_library_names():
        real = r / f"usr/lib/x86_64-linux-gnu/{name}.{v}"
        soname = catalogue.soname_for(name, v)
        assert elf_info(real) == (64, "EM_X86_64", soname), name
        assert os.path.realpath(r / f"usr/lib/x86_64-linux-gnu/{name}") == str(real)
        assert os.path.realpath(r / f"usr/lib/x86_64-linux-gnu/{soname}") == str(real)
    assert os.readlink(r / "usr/lib/x86_64-linux-gnu/libcuda.so.1") == f"libcuda.so.{v}"
    assert os.readlink(r / "usr/lib/x86_64-linux-gnu/libcuda.so") == "libcuda.so.1"


def test_32bit_copies(node8):
    if not node8.lib32:
        pytest.skip("gcc -m32 unavailable (install gcc-multilib)")
    lib = Path(node8.root, f"usr/lib/i386-linux-gnu/libcuda.so.{node8.driver_version}")
    assert elf_info(lib) == (32, "EM_386", "libcuda.so.1")
    assert f"/usr/lib/i386-linux-gnu/libnvidia-ml.so.{node8.driver_version}" in node8.files["libs32"]


def test_ld_cache_made_by_ldconfig(node8):
    out = subprocess.run(["ldconfig", "-p", "-C", str(Path(node8.root, "etc/ld.so.cache"))],
                         capture_output=True, text=True, check=True).stdout
    assert "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1" in out
    if node8.lib32:
        assert "libcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1" in out
    entries = out.splitlines()[1:]
    assert entries and not any(node8.root in e for e in entries)  # paths relative to the node's root


def test_binaries_firmware_configs_ipc(node8):
    r = Path(node8.root)
    for b in catalogue.BINARIES["utility"] + catalogue.BINARIES["compute"]:
        p = r / "usr/bin" / b
        assert os.access(p, os.X_OK) and elf_info(p)[0] == 64, b
    for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        assert (r / f"lib/firmware/nvidia/{node8.driver_version}/{fw}").is_file()
    for cfg in catalogue.GRAPHICS_CONFIGS:
        assert (r / cfg.lstrip("/")).is_file(), cfg
    json.loads((r / "usr/share/glvnd/egl_vendor.d/10_nvidia.json").read_text())
    assert stat.S_ISSOCK(os.stat(r / "run/nvidia-persistenced/socket").st_mode)


def test_cuda_driver_version_via_ctypes(node8):
    lib = ctypes.CDLL(str(Path(node8.root, "usr/lib/x86_64-linux-gnu/libcuda.so.1")))
    v = ctypes.c_int()
    assert lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value == 12040


def test_nvml_reads_the_node_in_place(node8):
    """Loaded from DIR/root/usr/lib/..., the library takes DIR/root as the node's root (like a
    driver root), so NVML works on the node without a namespace or any setting."""
    lib = Path(node8.root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    code = ("import ctypes, sys, pynvml as p; p.nvmlLib = ctypes.CDLL(sys.argv[1]); p.nvmlInit(); "
            "print(' '.join(p.nvmlDeviceGetUUID(p.nvmlDeviceGetHandleByIndex(i)) for i in range(p.nvmlDeviceGetCount())))")
    out = subprocess.run([os.sys.executable, "-c", code, str(lib)], capture_output=True, text=True)
    if "No module named 'pynvml'" in out.stderr:
        pytest.skip("needs nvidia-ml-py")
    assert out.stdout.split() == [g.uuid for g in node8.gpus], out.stderr


def test_nvml_and_cuda_with_sim_root_env(node8):
    """Without a namespace, $NCT_SIM_ROOT points the simulated driver at the node."""
    libdir = Path(node8.root, "usr/lib/x86_64-linux-gnu")
    env = {**os.environ, "NCT_SIM_ROOT": node8.root, "LD_LIBRARY_PATH": str(libdir)}
    code = ("import ctypes; l=ctypes.CDLL('libcuda.so.1'); n=ctypes.c_int(); "
            "print(l.cuInit(0), l.cuDeviceGetCount(ctypes.byref(n)), n.value)")
    out = subprocess.run([os.sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0", "8"]
    smi = subprocess.run([str(Path(node8.root, "usr/bin/nvidia-smi")), "-L"], env=env, capture_output=True, text=True)
    assert smi.returncode == 0 and smi.stdout.count("\nGPU ") + smi.stdout.startswith("GPU ") == 8


def test_custom_versions_and_zero_gpus(sim_tmp):
    node = create_node(sim_tmp / "custom", gpus=0, driver_version="535.104.05", cuda_version="12.2", lib32=False)
    r = Path(node.root)
    assert "Kernel Module  535.104.05  " in (r / "proc/driver/nvidia/version").read_text()
    assert list((r / "proc/driver/nvidia/gpus").iterdir()) == []
    assert (r / "dev/nvidiactl").exists() and not (r / "dev/nvidia0").exists()
    assert elf_info(r / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.104.05")[2] == "libnvidia-ml.so.1"
    assert elf_info(r / "usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.535.104.05")[2] == "libnvidia-glcore.so.535.104.05"
    assert not (r / "usr/lib/i386-linux-gnu").exists()
    lib = ctypes.CDLL(str(r / "usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05"))
    v = ctypes.c_int()
    lib.cuDriverGetVersion(ctypes.byref(v))
    assert v.value == 12020


def test_64_gpus_with_mig(sim_tmp):
    node = create_node(sim_tmp / "big", gpus=64, mig="7", lib32=False)
    assert len(node.gpus) == 64 and len(node.migs) == 64 * 7
    assert len(list(Path(node.root, "dev/nvidia-caps").iterdir())) == 2 + 2 * 64 * 7


def test_imex_channels(sim_tmp):
    node = create_node(sim_tmp / "imex", gpus=1, imex_channels=2, lib32=False)
    st = os.stat(Path(node.root, "dev/nvidia-caps-imex-channels/channel1"))
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (node.majors["nvidia-caps-imex-channels"], 1)


@pytest.mark.parametrize("args,msg", [
    (["--gpus", "-1"], "invalid --gpus -1"),
    (["--gpus", "65"], "invalid --gpus 65"),
    (["--gpus", "2", "--mig", "x"], "invalid --mig spec"),
    (["--gpus", "2", "--mig", "3:1"], "GPU 3 does not exist"),
    (["--driver-version", "abc"], "invalid --driver-version"),
    (["--cuda-version", "12"], "invalid --cuda-version"),
    (["--arch", "aarch64"], "unsupported --arch"),
])
def test_bad_input_cli(tmp_path, args, msg):
    target = tmp_path / "n"
    r = nct("sim", "create", str(target), *args)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("nct: ") and msg in r.stderr and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr and not target.exists()
    assert list(tmp_path.iterdir()) == []  # nothing half-built left behind


def test_existing_nonempty_dir(tmp_path):
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "keep").write_text("mine")
    r = nct("sim", "create", str(tmp_path / "n"), "--gpus", "1")
    assert r.returncode == 1 and "not empty" in r.stderr and r.stderr.count("\n") == 1
    assert os.listdir(tmp_path / "n") == ["keep"]


def test_existing_empty_dir_is_used(tmp_path):
    (tmp_path / "n").mkdir()
    r = nct("sim", "create", str(tmp_path / "n"), "--gpus", "1", "--no-lib32")
    assert r.returncode == 0, r.stderr
    assert load_node(tmp_path / "n").gpus[0].index == 0


def test_load_node_errors(tmp_path):
    from nct.sim.model import SimError

    with pytest.raises(SimError, match="node.json: not found"):
        load_node(tmp_path)
    (tmp_path / "node.json").write_text("{garbage")
    with pytest.raises(SimError, match="invalid simulated node description"):
        load_node(tmp_path)


def test_cli_create_json_and_show(tmp_path):
    r = nct("sim", "create", str(tmp_path / "n"), "--gpus", "2", "--mig", "0:1", "--no-lib32", "--json", "--seed", "x")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["gpus"][0]["migs"][0]["profile"] == "7g.40gb" and made["seed"] == "x"
    shown = nct("sim", "show", str(tmp_path / "n"), check=True)
    assert json.loads(shown.stdout) == made
    again = create_node(tmp_path / "m", gpus=2, mig={0: 1}, seed="x", lib32=False)
    assert [g.uuid for g in again.gpus] == [g["uuid"] for g in made["gpus"]]  # deterministic per seed


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
def test_non_root_gets_one_line_error(tmp_path):
    os.chmod(tmp_path, 0o777)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        os.path.join(os.path.dirname(os.sys.executable), "nct"), "sim", "create",
                        str(tmp_path / "n"), "--gpus", "1"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr == "nct: creating a simulated node needs root (device nodes are made with mknod)\n"
    assert not (tmp_path / "n").exists()
