"""runc + our prestart hook on a simulated node: what a container sees for each
NVIDIA_VISIBLE_DEVICES form (device nodes, cgroup ENXIO vs EPERM, libcuda through the
container's ld cache, the simulated nvidia-smi)."""

from __future__ import annotations

import re
import sys
import sysconfig
import time
from pathlib import Path

import pytest

import nct
import nct.config
from e2e.harness import HOOK, bundle_with_hook, needs_e2e, runc_run, runc_run_after
from nct.driver import snapshot
from nct.engines.bundle import WRAPPER
from nct.hostcache import CACHE_NAME, RACY_SECONDS

pytestmark = needs_e2e

# Prints, in sections: the NVIDIA nodes, what opening each GPU node gives, the result of
# opening /dev/nvidia0 made with mknod when absent, the probe and nvidia-smi -L.
SCRIPT = r"""
echo "== nodes"; ls /dev | grep nvidia; ls /dev/nvidia-caps 2>/dev/null | sed 's|^|caps/|'
echo "== open"; for d in /dev/nvidia[0-9]*; do [ -e "$d" ] && cat "$d" 2>&1; done
echo "== mknod"; if [ ! -e /dev/nvidia0 ]; then mknod /dev/nvidia0 c 195 0 2>&1 && cat /dev/nvidia0 2>&1; else echo present; fi
echo "== probe"; cuda-probe 2>&1
echo "== smi"; nvidia-smi -L 2>&1
echo "== end"
"""


def sections(out: str) -> dict[str, list[str]]:
    parts = re.split(r"^== (\w+)$", out, flags=re.M)
    return {parts[i]: [l for l in parts[i + 1].splitlines() if l.strip()] for i in range(1, len(parts), 2)}


def run_case(sim_node, rootfs, visible: str | None, extra_env=()):
    env = ([f"NVIDIA_VISIBLE_DEVICES={visible}"] if visible is not None else []) + list(extra_env)
    bundle = bundle_with_hook(rootfs, SCRIPT, env)
    res = runc_run(sim_node, bundle)
    assert res.returncode == 0, res.stderr.decode()
    out = sections(res.stdout.decode())
    assert "end" in out, res.stdout.decode()
    return out


def smi_line(gpu: dict, shown_index: int) -> str:
    return f"GPU {shown_index}: {gpu['model']} (UUID: {gpu['uuid']})"


def gpu_nodes(out) -> set[str]:
    return {n for n in out["nodes"] if re.fullmatch(r"nvidia\d+", n)}


def assert_driver(out, version="12040"):
    assert {"nvidiactl", "nvidia-uvm"} <= set(out["nodes"])
    assert set(out["nodes"]) - gpu_nodes(out) - {"nvidia-caps"} <= {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} | {
        n for n in out["nodes"] if n.startswith("caps/")}
    assert out["probe"] == [f"cuDriverGetVersion={version}"]


ENXIO = "No such device or address"
EPERM = "Operation not permitted"


@pytest.mark.parametrize("form", ["index", "uuid", "uuid-lower", "bus"])
def test_one_gpu(sim_node, rootfs, form):
    gpu = sim_node.gpu(1)
    visible = {"index": "1", "uuid": gpu["uuid"], "uuid-lower": gpu["uuid"].lower(),
               "bus": gpu["bus_id"]}[form]
    out = run_case(sim_node, rootfs, visible)
    assert gpu_nodes(out) == {"nvidia1"}
    assert not [n for n in out["nodes"] if n.startswith("caps/")]
    assert out["open"] == [f"cat: can't open '/dev/nvidia1': {ENXIO}"]
    assert out["mknod"] == [f"cat: can't open '/dev/nvidia0': {EPERM}"]
    assert_driver(out)
    assert out["smi"] == [smi_line(gpu, 0)]


def test_all(sim_node, rootfs):
    out = run_case(sim_node, rootfs, "all")
    assert gpu_nodes(out) == {"nvidia0", "nvidia1", "nvidia2"}
    assert len(out["open"]) == 3 and all(ENXIO in l for l in out["open"])
    assert out["mknod"] == ["present"]
    assert_driver(out)
    gpus = sim_node.info["gpus"]
    want = [smi_line(g, i) for i, g in enumerate(gpus)]
    smi = out["smi"]
    assert [l for l in smi if l.startswith("GPU ")] == want
    migs = [m["uuid"] for m in gpus[2]["migs"]]
    assert [re.search(r"UUID: (MIG-[^)]+)", l).group(1) for l in smi if "MIG" in l] == migs


def test_none(sim_node, rootfs):
    out = run_case(sim_node, rootfs, "none")
    assert gpu_nodes(out) == set()
    assert out["open"] == []
    assert out["mknod"] == [f"cat: can't open '/dev/nvidia0': {EPERM}"]
    assert_driver(out)
    assert not [l for l in out["smi"] if l.startswith("GPU ")]


@pytest.mark.parametrize("visible", ["void", None, ""])
def test_void_unset_empty_untouched(sim_node, rootfs, visible):
    out = run_case(sim_node, rootfs, visible)
    assert out["nodes"] == []
    assert out["probe"] and out["probe"][0].startswith("dlopen failed")
    assert "not found" in " ".join(out["smi"])
    assert not (rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so").exists()


@pytest.mark.parametrize("form", ["index", "uuid"])
def test_mig(sim_node, rootfs, form):
    gpu = sim_node.gpu(2)
    mig = gpu["migs"][1]
    out = run_case(sim_node, rootfs, "2:1" if form == "index" else mig["uuid"])
    assert gpu_nodes(out) == {"nvidia2"}
    caps = {n for n in out["nodes"] if n.startswith("caps/")}
    assert caps == {f"caps/nvidia-cap{mig['gi_minor']}", f"caps/nvidia-cap{mig['ci_minor']}"}
    assert_driver(out)
    assert out["smi"][0] == smi_line(gpu, 0)
    mig_lines = [l for l in out["smi"] if "MIG" in l]
    assert len(mig_lines) == 1 and mig["uuid"] in mig_lines[0]


def test_mixed_list_and_capabilities(sim_node, rootfs):
    """GPU 0 by index and GPU 1 by UUID; utility only: no libcuda, no UVM, but nvidia-smi."""
    out = run_case(sim_node, rootfs, f"0,{sim_node.gpu(1)['uuid']}", ["NVIDIA_DRIVER_CAPABILITIES=utility"])
    assert gpu_nodes(out) == {"nvidia0", "nvidia1"}
    assert "nvidia-uvm" not in out["nodes"]
    assert out["probe"][0].startswith("dlopen failed")
    assert out["smi"] == [smi_line(sim_node.gpu(0), 0), smi_line(sim_node.gpu(1), 1)]


HEAVY = ("click", "pynvml", "elftools", "yaml", "jsonschema", "tomlkit")


def wait_out_racy_window(sim_node) -> None:
    """Sleep until the node's driver files are older than the ELF cache's "racily new" window
    (nct.hostcache never caches a file changed in the last RACY_SECONDS), as on a real node:
    a freshly built sim node would otherwise always load pyelftools."""
    newest = max(max(st.st_mtime, st.st_ctime) for p in (sim_node.dir / "root").rglob("*.so*")
                 if p.is_file() and (st := p.stat()))
    time.sleep(max(0.0, RACY_SECONDS + 0.2 - (time.time() - newest)))


def steady_run(sim_node, warm: Path, bundle: Path, cache_dir: Path, hook_log: Path | None = None):
    """Run `bundle` in a node's steady state: its driver files older than the ELF cache's
    racy window and one container (bundle `warm`) already started, so the test's private
    host cache (fixture private_host_cache) holds their ELF checks. Checks the hook really
    used that directory (got NCT_CACHE_DIR): else the test would be back on /run/nct.
    `hook_log`: the hook's stderr, shown when the run fails."""
    wait_out_racy_window(sim_node)
    # inside the namespace too: `nct sim run` touches the node's ld.so.cache as it sets up,
    # and the first (warm) run's discovery must be old enough to leave a node snapshot
    res = runc_run_after(sim_node, warm, bundle, settle=RACY_SECONDS + 0.2)
    assert res.returncode == 0, res.stderr.decode() + (hook_log.read_text()[-2000:] if hook_log else "")
    assert (cache_dir / CACHE_NAME).is_file(), "the hook did not use NCT_CACHE_DIR"
    assert list(cache_dir.glob(f"{snapshot.FORMAT}-*.json")), "the warm run left no node snapshot"
    return res


@pytest.mark.parametrize("visible", ["all", "MIG"])
def test_hook_stays_light(sim_node, rootfs, tmp_path, private_host_cache, visible):
    """The hook process never imports click, pyelftools, YAML/JSON-schema/tomlkit, nor
    pynvml (NVML, when needed for MIG UUIDs, is queried in a forked child)."""
    import sys

    if visible == "MIG":
        visible = sim_node.gpu(2)["migs"][0]["uuid"]
    out = tmp_path / "modules.txt"
    code = ("import atexit, sys; atexit.register(lambda: open(%r, 'w').write('\\n'.join(sorted(sys.modules))));"
            "from nct.hook.main import main; main(['prestart'])") % str(out)
    hooks = {"prestart": [{"path": sys.executable, "args": [sys.executable, "-c", code]}]}
    bundle = bundle_with_hook(rootfs, "cuda-probe", [f"NVIDIA_VISIBLE_DEVICES={visible}"], hooks=hooks)
    # The first run meets a cold cache and rightly loads pyelftools; the steady state is the second.
    res = steady_run(sim_node, bundle, bundle, private_host_cache)
    assert "cuDriverGetVersion=12040" in res.stdout.decode()
    modules = set(out.read_text().split())
    assert "nct.edits.planner" in modules
    assert not {m.split(".")[0] for m in modules} & set(HEAVY), sorted(m for m in modules if m.split(".")[0] in HEAVY)


# Modules the hook must not load at start-up: each costs milliseconds on every container
# start (dataclasses + typing: ~25 ms, the reason nct.record exists; tomllib ~15 ms, the
# reason for nct.config.tomlscan; json/re/enum ~6 ms, nct.jsonio; docs/development.md).
HOOK_HEAVY = {"dataclasses", "typing", "inspect", "ast", "click", "yaml", "jsonschema", "subprocess",
              "logging", "tempfile", "tomllib", "json", "re", "enum", "signal", "functools",
              "nct.cdi", "nct.oci", "nct.engines",
              # the ld cache and ELF readers: only a full discovery pass needs them, not a
              # start whose node snapshot holds (nct.driver.snapshot)
              "nct.driver.elf", "nct.driver.ldcache"}


def _installed_launcher(directory: Path) -> Path:
    """The hook's launcher as `nct install` and the .deb write it (`python -IS`; pip's
    console script would import `re` itself)."""
    launcher = directory / HOOK
    launcher.write_text(WRAPPER.format(python=sys.executable, name=HOOK, lib=str(Path(nct.__file__).parents[1]),
                                       env=f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n",
                                       module="nct.hook.main", func="main"))
    launcher.chmod(0o755)
    return launcher


def test_hook_start_up_imports(sim_node, rootfs, tmp_path, private_host_cache):
    """The installed hook, reading the default config.toml as on an installed node,
    configures a container (all GPUs) without loading any of HOOK_HEAVY: checked with
    -X importtime, not with timings."""
    warm = tmp_path / "warm"
    warm.mkdir()
    bundle_with_hook(rootfs, "true", ["NVIDIA_VISIBLE_DEVICES=all"])
    (rootfs.parent / "config.json").rename(warm / "config.json")  # its root is an absolute path

    log = tmp_path / "imports.txt"
    wrapper = tmp_path / "hook-importtime"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -X importtime -I -S {_installed_launcher(tmp_path)} "
                       f"\"$@\" 2>{log}\n")
    wrapper.chmod(0o755)
    config = Path(nct.config.__file__).parent / "default.toml"
    hooks = {"prestart": [{"path": str(wrapper), "args": [HOOK, "-config", str(config), "prestart"]}]}
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all"], hooks=hooks)
    res = steady_run(sim_node, warm, bundle, private_host_cache, log)
    assert gpu_nodes(sections(res.stdout.decode())) == {"nvidia0", "nvidia1", "nvidia2"}
    mods = {line.split("|")[-1].strip() for line in log.read_text().splitlines() if line.startswith("import time:")}
    assert "nct.container.apply" in mods and "nct.driver.discover" in mods
    heavy = sorted(m for m in mods if m in HOOK_HEAVY or m.rpartition(".")[0] in HOOK_HEAVY)
    assert not heavy, heavy


LINGER = r"""
import os, sys, time
from nct.container import ldconfig, syscalls as sc

# ldconfig's child, once it has reported ldconfig's end to the hook, stays (as a slow
# teardown of its namespaces would) with whatever fds it still has, until LINGER_S
reported = []
real_wait_status, real_exit = ldconfig._wait_status, os._exit


def wait_status(status):
    reported.append(status)
    return real_wait_status(status)


def linger(code):
    if reported:
        sc.prctl(sc.PR_SET_PDEATHSIG, 0)  # outlive the hook
        with open("/lingering", "w") as f:  # in the container's root
            f.write(str(os.getpid()))
        time.sleep(LINGER_S)
    real_exit(code)


ldconfig._wait_status, os._exit = wait_status, linger
sys.argv[0] = "nvidia-container-runtime-hook"
from nct.hook.main import main
main()
"""


def test_hook_does_not_wait_for_ldconfigs_child_to_exit(sim_node, rootfs, tmp_path):
    """The hook process learns ldconfig's end from its child's status pipe and leaves without
    waiting for the child's own exit (its namespaces' teardown). runc waits for the hook's
    stdout and stderr to close, so this also proves that the child holds none of them: the
    child here stays for a minute after reporting, and runc run must not wait for it. Once
    it is gone, its jail goes too (removed by the remover it forked)."""
    import os
    import signal

    from e2e.test_failures import _jails

    linger_s = 60
    wrapper = tmp_path / "hook.py"
    wrapper.write_text(LINGER.replace("LINGER_S", str(linger_s)))
    hooks = {"prestart": [{"path": sys.executable, "args": [sys.executable, "-I", str(wrapper), "prestart"]}]}
    before = _jails()
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all"], hooks=hooks)
    started = time.monotonic()
    try:
        res = runc_run(sim_node, bundle, timeout=linger_s / 2)
    finally:
        for _ in range(500):  # the child writes its pid after the hook may have left
            if (rootfs / "lingering").exists() and (rootfs / "lingering").read_text():
                break
            time.sleep(0.01)
        pid = int((rootfs / "lingering").read_text())
        alive = Path(f"/proc/{pid}/comm").read_text().strip() if Path(f"/proc/{pid}").exists() else ""
        remover = _remover_view(pid)
        os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - started < linger_s / 2
    assert res.returncode == 0, res.stderr.decode()
    assert gpu_nodes(sections(res.stdout.decode())) == {"nvidia0", "nvidia1", "nvidia2"}
    assert alive == "nvc:[ldconfig]"  # it was still there when runc run returned
    # the remover (root, on the host, outliving the hook) holds nothing of the hook's or the
    # container's: no stdio, no output pipe, only its pipe and the jail's two cgroup fds; the
    # host's root and cwd (not the container's: it would pin its rootfs and mount namespace);
    # none of the container's environment
    assert len(remover["fds"]) == 3 and int(remover["fds"][0]) > 2 and remover["pipes"] == 1, remover
    assert remover["sees_container_root"] is False and remover["cwd"] == "/", remover
    assert "NVIDIA_VISIBLE_DEVICES" not in remover["environ"], remover
    assert remover["sid"] != remover["child_sid"], remover  # no terminal signal of runc run's (Ctrl-C, Ctrl-Z)
    for _ in range(100):
        left = _jails() - before
        if not left:
            break
        time.sleep(0.05)
    assert not left


def _remover_view(child: int) -> dict:
    """What ldconfig's remover (`child`'s child named nvc:[ldconf-rm]) holds."""
    import os

    kids = Path(f"/proc/{child}/task/{child}/children").read_text().split()
    rm = [k for k in kids if Path(f"/proc/{k}/comm").read_text().strip() == "nvc:[ldconf-rm]"]
    if not rm:
        return {"missing": kids}
    d = f"/proc/{rm[0]}"
    fds = sorted(os.listdir(f"{d}/fd"), key=int)
    return {"fds": fds, "pipes": sum(os.readlink(f"{d}/fd/{f}").startswith("pipe:") for f in fds),
            "sees_container_root": os.path.exists(f"{d}/root/lingering"), "cwd": os.readlink(f"{d}/cwd"),
            "environ": Path(f"{d}/environ").read_bytes().decode(errors="replace"),
            "sid": os.getsid(int(rm[0])), "child_sid": os.getsid(child)}


def test_runc_create_leaves_no_stray_ldconfig_process(sim_node, rootfs):
    """`runc create` (an engine's way: detached, no `runc run` subreaper), then start, wait and
    delete: the hook's orphaned ldconfig child and its jail remover are reaped by whoever
    reaps for the caller (here init); none is left behind, not even a zombie, and no jail."""
    from e2e.harness import _boot_ticks, wait_no_stray_ldconfig
    from e2e.test_failures import _jails

    bundle = bundle_with_hook(rootfs, "true", ["NVIDIA_VISIBLE_DEVICES=all"])
    cid = "nct-create-" + str(time.monotonic_ns())
    script = ('runc create --bundle "$1" "$2" </dev/null >/dev/null 2>"$1/create.err" || { cat "$1/create.err" >&2; '
              'exit 1; }; runc start "$2" && sleep 0.2; runc delete -f "$2"')
    before, since = _jails(), _boot_ticks()
    res = sim_node.run(["sh", "-c", script, "sh", str(bundle), cid])
    assert res.returncode == 0, res.stderr.decode()
    assert wait_no_stray_ldconfig(since) == []
    for _ in range(100):
        if not _jails() - before:
            break
        time.sleep(0.05)
    assert _jails() - before == set()
