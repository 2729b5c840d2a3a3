"""32 GPU containers started at once through the shim in jit-cdi mode (issue 14 §4), as an
engine under load does: create, start, wait, delete, each its own bundle, all through
`nvidia-container-runtime` and real runc on a simulated node. Every container must come up
with its GPUs and libraries, and what nct keeps across processes (the ELF cache under
NCT_CACHE_DIR, the bundles' config.json) must be consistent afterwards. Correctness only:
the throughput is bench/start_bench.py's."""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from nct.driver import discover
from nct.driver.elf import NotElf, read_elf
from nct.driver.model import Roots
from nct.driver.snapshot import FORMAT
from nct.hostcache import CACHE_NAME

from .conftest import entry_point, needs_root_runc, runc_bundle
from .test_runc import Runc

N = 32
SCRIPT = ("ls /dev > /out/dev; readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1 > /out/libcuda; "
          "echo \"$NVIDIA_VISIBLE_DEVICES\" > /out/nvd")


def _expected(path: str) -> list | None:
    """What the ELF cache must hold for `path`: a fresh, uncached read."""
    try:
        info = read_elf(path)
    except NotElf as e:
        return ["!", str(e), None, [], ""]
    return [info.elf_class, info.machine, info.soname, list(info.needed), info.elf_type]


def test_32_concurrent_jit_cdi_starts(tmp_path, sim_node, monkeypatch):
    needs_root_runc()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[nvidia-container-cli]\nroot = "{sim_node}/root"\n'
                   '[nvidia-container-runtime]\nmode = "jit-cdi"\n')
    env = {"PATH": f"{os.path.dirname(entry_point('nvidia-container-runtime'))}:/usr/sbin:/usr/bin:/sbin:/bin",
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(cfg), "XDG_RUNTIME_DIR": str(tmp_path),
           "NCT_PROC_ROOT": str(sim_node / "root" / "proc"), "NCT_CACHE_DIR": str(cache)}
    # driver files older than the caches' "racily new" window, as on a node: all of them cacheable
    newest = max(os.stat(sim_node / "root" / d).st_mtime for d in ("usr/lib/x86_64-linux-gnu", "usr/bin"))
    time.sleep(max(0.0, 2.5 - (time.time() - newest)))
    runc = Runc(tmp_path, env)
    bundles = []
    for i in range(N):
        base = tmp_path / f"c{i}"
        base.mkdir()
        bundles.append(runc_bundle(base, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=all",
                                                  "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]))
    try:
        with ThreadPoolExecutor(N) as pool:
            errors = [e for e in pool.map(lambda b: _start(runc, b[0]), bundles) if e]
    finally:
        runc.cleanup()
    assert not errors, f"{len(errors)} of {N} failed; first: {errors[0]}"

    gpus = {f"nvidia{g['index']}" for g in json.loads((sim_node / "node.json").read_text())["gpus"]}
    for bundle, out in bundles:
        assert gpus | {"nvidiactl"} <= set((out / "dev").read_text().split()), bundle
        assert (out / "libcuda").read_text().strip() == "libcuda.so.550.54.15", bundle
        assert (out / "nvd").read_text().strip() == "void"
        spec = json.loads((bundle / "config.json").read_text())  # whole, not a torn write
        assert [h["args"][2] for h in spec["hooks"]["createContainer"]] == ["nct-steps"]
        assert not [n for n in os.listdir(bundle) if n.endswith(".tmp")], os.listdir(bundle)
        ldcache = subprocess.run(["/sbin/ldconfig", "-p", "-C", str(bundle.parent / "rootfs/etc/ld.so.cache")],
                                 capture_output=True, text=True).stdout
        assert "libcuda.so.1 (libc6,x86-64)" in ldcache, bundle

    # the ELF cache: one whole file, no temp files left, and every entry what a fresh read says
    names = sorted(os.listdir(cache))
    snaps = [n for n in names if n.startswith(FORMAT)]
    assert [n for n in names if n not in snaps] == [CACHE_NAME] and len(snaps) == 1, names
    _check_snapshot(monkeypatch, sim_node, env, cache)
    entries = json.loads((cache / CACHE_NAME).read_text())
    assert len(entries) > 20  # the driver's libraries, checked by the first creates
    for key, value in entries.items():
        path = key.rpartition("|")[0]
        assert value == _expected(path), path


def _start(runc: Runc, bundle) -> str | None:
    try:
        runc.run_to_exit(bundle)
    except AssertionError as e:
        return str(e)[-600:]
    return None


def _check_snapshot(monkeypatch, sim_node, env: dict, cache) -> None:
    """The node snapshot the creates kept (nct.driver.snapshot) is used, as the shim would
    (same PATH, same roots), and answers what a full pass answers."""
    root = str(sim_node / "root")
    roots = Roots(driver=root, dev=root, proc=env["NCT_PROC_ROOT"])
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("NCT_CACHE_DIR", str(cache))
    full_passes = []
    real = discover._read_tree
    monkeypatch.setattr(discover, "_read_tree", lambda *a: full_passes.append(1) or real(*a))
    kept = discover.discover_node(roots, use_nvml=False)
    assert not full_passes, "the snapshot was not valid"
    untrusted = cache.parent / "no-cache"
    untrusted.mkdir(mode=0o777)
    os.chmod(untrusted, 0o777)
    monkeypatch.setenv("NCT_CACHE_DIR", str(untrusted))
    assert kept == discover.discover_node(roots, use_nvml=False) and full_passes
