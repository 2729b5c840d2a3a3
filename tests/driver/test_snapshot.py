"""The validated snapshot of the driver tree (nct.driver.snapshot): with one, discovery
answers exactly what a full pass answers; every kind of change under the driver root (or
in the live state) is seen; a snapshot is never made of files changed moments ago; and a
snapshot file that cannot be trusted, or holds anything unexpected, only means a full pass.

Each test has a cache directory of its own and, unless it is about the racy window, the
clock of nct.hostcache a minute ahead (fixture settled_caches): files made by the test
are then old enough to be snapshotted."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

import treebuilder
from nct import hostcache
from nct.driver import discover, fsview, snapshot
from nct.driver.discover import discover_node
from nct.driver.rootpath import dirs_memo, resolve_in_root
from treebuilder import LIB32, LIB64, VERSION

LIBCUDA = f"{LIB64}/libcuda.so.{VERSION}"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "nct-cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("NCT_CACHE_DIR", str(d))
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    return d


@pytest.fixture
def passes(monkeypatch) -> list[str]:
    """The driver roots of the full passes made (each call of discover._read_tree)."""
    seen: list[str] = []
    real = discover._read_tree

    def counted(roots, *a):
        seen.append(roots.driver)
        return real(roots, *a)

    monkeypatch.setattr(discover, "_read_tree", counted)
    return seen


def fresh(tree, monkeypatch, **kw):
    """A full pass with no snapshot at all (the cache dir is one nct refuses)."""
    untrusted = tree.root.parent / "untrusted-cache"
    untrusted.mkdir(exist_ok=True)
    os.chmod(untrusted, 0o777)
    with monkeypatch.context() as m:
        m.setenv("NCT_CACHE_DIR", str(untrusted))
        return discover_node(tree.roots, use_nvml=False, **kw)


def snapshot_files(d: Path) -> list[Path]:
    return sorted(d.glob(f"{snapshot.FORMAT}-*.json"))


def warm(tree, cache_dir, passes, **kw):
    """Discover twice: the first pass makes the snapshot, the second must use it."""
    first = discover_node(tree.roots, use_nvml=False, **kw)
    assert snapshot_files(cache_dir), "no snapshot was written"
    n = len(passes)
    second = discover_node(tree.roots, use_nvml=False, **kw)
    assert len(passes) == n, "the snapshot was not used"
    assert second == first
    return first


pytestmark = pytest.mark.usefixtures("settled_caches")


# --- equality -----------------------------------------------------------------------------------

def _absolute_links(tree) -> None:
    """A driver container's layout: every SONAME link absolute (inside the root)."""
    for d in (LIB64, LIB32):
        for p in tree.path(d).iterdir():
            if p.is_symlink():
                target = os.readlink(p)
                p.unlink()
                os.symlink(f"{d}/{target}", p)


@pytest.mark.parametrize("shape", ["1gpu", "8gpu", "mig", "absolute-links"])
def test_snapshot_answers_what_a_full_pass_answers(make_tree, cache_dir, passes, monkeypatch, shape):
    kw = {"1gpu": dict(gpus=1), "8gpu": dict(gpus=8), "mig": dict(gpus=2, mig={1: [(7, 0), (8, 0), (8, 1)]}),
          "absolute-links": dict(gpus=2)}[shape]
    t = make_tree(**kw)
    if shape == "absolute-links":
        _absolute_links(t)
    node = warm(t, cache_dir, passes)
    assert node == fresh(t, monkeypatch)
    assert {f.name for f in node.files if f.kind == "lib"} >= {"libcuda.so", "libnvidia-ml.so"}
    assert [f.kind for f in node.files].count("lib32") > 0 or not t.path(LIB32).exists()
    if shape == "mig":
        assert [len(g.migs) for g in node.gpus] == [0, 3]


def test_explicit_ldcache_is_its_own_snapshot(make_tree, cache_dir, passes, monkeypatch):
    t = make_tree(gpus=1)
    a = warm(t, cache_dir, passes)
    b = warm(t, cache_dir, passes, ldcache="/etc/ld.so.cache")
    assert a == b and len(passes) == 2  # another key: its own full pass


def test_a_recorded_pass_looks_at_every_directory_itself(make_tree, cache_dir, passes):
    """A path-lookup memo of an enclosing pass does not hide directories from the recording."""
    t = make_tree(gpus=1)
    with dirs_memo():
        assert resolve_in_root(str(t.root), LIBCUDA) is not None  # the memo knows the lib dir now
        discover_node(t.roots, use_nvml=False)
    (f,) = snapshot_files(cache_dir)
    (entry,) = json.loads(f.read_text()).values()
    assert entry["lstat"][str(t.path(LIB64))].startswith("d")


# --- invalidation -------------------------------------------------------------------------------

def _rewrite_same_size(t, path, mtime: str) -> None:
    """Overwrite a file in place with as many zero bytes (no longer ELF), then set its mtime
    back to what it was ("old") or to another old time ("other"): only ctime tells."""
    f = t.path(path)
    st = f.stat()
    with open(f, "r+b") as fh:
        fh.write(b"\0" * st.st_size)
    when = st.st_mtime_ns if mtime == "old" else st.st_mtime_ns - 86400 * 10**9
    os.utime(f, ns=(st.st_atime_ns, when))
    assert f.stat().st_size == st.st_size and f.stat().st_ino == st.st_ino


def _replace_by_rename(t, path) -> None:
    f = t.path(path)
    tmp = f.with_name(f.name + ".new")
    tmp.write_bytes(b"not a library")
    os.rename(tmp, f)


def _retarget(t, link, target) -> None:
    f = t.path(link)
    tmp = f.with_name(f.name + ".tmp")
    os.symlink(target, tmp)
    os.rename(tmp, f)  # `ln -sf`'s way: a new link renamed over the old one


def _retarget_soname(t) -> None:
    alt = t.path(f"{LIB64}/alt")
    alt.mkdir()
    shutil.copy2(t.path(LIBCUDA), alt / f"libcuda.so.{VERSION}")
    _retarget(t, f"{LIB64}/libcuda.so.1", f"alt/libcuda.so.{VERSION}")


def _remove_lib(t, name) -> None:
    for d in (LIB64, LIB32):
        for p in t.path(d).glob(name + "*"):
            p.unlink()


def _add_lib(t, farm, name) -> None:
    treebuilder.install_libs(t, farm, names=[name])


def _move_libs_to_custom_dir(t, farm=None) -> None:
    """Libraries only where the ld cache says (not in a standard dir)."""
    os.makedirs(t.path("/opt/nv"))
    os.rename(t.path(LIB64), t.path("/opt/nv/lib64"))
    shutil.rmtree(t.path(LIB32), ignore_errors=True)
    os.unlink(t.path("/etc/ld.so.cache"))


def _ldconfig(t, dirs: str) -> None:
    t.write("/etc/ld.so.conf.new", dirs)
    import subprocess

    subprocess.run(["ldconfig", "-r", str(t.root), "-C", "/etc/ld.so.cache.new", "-f", "/etc/ld.so.conf.new"],
                   check=True, capture_output=True)
    os.rename(t.path("/etc/ld.so.cache.new"), t.path("/etc/ld.so.cache"))


def _add_socket(t, path) -> None:
    p = t.path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def _add_gpu(t) -> None:
    bus = "0000:99:00.0"
    t.write(f"/proc/driver/nvidia/gpus/{bus}/information",
            treebuilder.information("NVIDIA A100-SXM4-40GB", "GPU-99999999-1111-2222-3333-444455556666", bus, 9))
    t.mknod("/dev/nvidia9", 195, 9)


def _new_version(t) -> None:
    text = t.path("/proc/driver/nvidia/version").read_text()
    t.write("/proc/driver/nvidia/version", text.replace(VERSION, "550.54.14"))


# (name, setup before the snapshot or None, the change, whether the node must differ)
CHANGES = [
    ("touch-lib", None, lambda t, farm: os.utime(t.path(LIBCUDA), (1e9, 1e9)), False),
    ("rewrite-same-size-old-mtime", None, lambda t, farm: _rewrite_same_size(t, LIBCUDA, "old"), True),
    ("rewrite-same-size-other-mtime", None, lambda t, farm: _rewrite_same_size(t, LIBCUDA, "other"), True),
    ("replace-lib-by-rename", None, lambda t, farm: _replace_by_rename(t, LIBCUDA), True),
    ("retarget-soname-link", None, lambda t, farm: _retarget_soname(t), True),
    ("add-lib", lambda t, farm: _remove_lib(t, "libnvidia-ptxjitcompiler.so"),
     lambda t, farm: _add_lib(t, farm, "libnvidia-ptxjitcompiler.so"), True),
    ("remove-lib", None, lambda t, farm: _remove_lib(t, "libnvidia-ptxjitcompiler.so"), True),
    ("add-extra-graphics-lib", lambda t, farm: os.unlink(t.path(f"{LIB64}/libnvidia-egl-gbm.so.1.1.1")),
     lambda t, farm: shutil.copy(farm.base / "64" / "libnvidia-egl-gbm.so.1.1.1", t.path(LIB64)), True),
    ("add-ldcache", _move_libs_to_custom_dir, lambda t, farm: _ldconfig(t, "/opt/nv/lib64\n"), True),
    ("replace-ldcache", lambda t, farm: (_move_libs_to_custom_dir(t), _ldconfig(t, "/opt/nv/lib64\n")),
     lambda t, farm: _ldconfig(t, "/nowhere\n"), True),
    ("add-binary-earlier-in-path", None,
     lambda t, farm: (t.write("/usr/local/bin/nvidia-smi", "#!/bin/sh\n"), t.path("/usr/local/bin/nvidia-smi").chmod(0o755)),
     True),
    ("binary-loses-exec-bit", None, lambda t, farm: t.path("/usr/bin/nvidia-smi").chmod(0o644), True),
    ("add-firmware", None, lambda t, farm: t.write(f"/lib/firmware/nvidia/{VERSION}/gsp_new.bin", b"\0"), True),
    ("remove-firmware", None, lambda t, farm: os.unlink(t.path(f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin")),
     True),
    ("add-config", None, lambda t, farm: t.write("/usr/share/nvidia/nvoptix.bin", "x"), True),
    # live state: never in the snapshot
    ("driver-version", None, lambda t, farm: _new_version(t), True),
    ("add-gpu", None, lambda t, farm: _add_gpu(t), True),
    ("persistenced-socket", None, lambda t, farm: _add_socket(t, "/run/nvidia-persistenced/socket"), True),
]
TREE_CHANGES = [c for c in CHANGES if c[0] not in ("driver-version", "add-gpu", "persistenced-socket")]


@pytest.mark.parametrize("name,setup,change,differs", CHANGES, ids=[c[0] for c in CHANGES])
def test_every_change_is_seen(make_tree, farm, cache_dir, passes, monkeypatch, name, setup, change, differs):
    t = make_tree(gpus=2)
    if setup:
        setup(t, farm)
    before = warm(t, cache_dir, passes)
    change(t, farm)
    n = len(passes)
    after = discover_node(t.roots, use_nvml=False)
    live = name in ("add-gpu", "persistenced-socket")  # live state: the snapshot still holds
    assert len(passes) == n + (0 if live else 1), "a full pass after a change of the tree, none otherwise"
    assert after == fresh(t, monkeypatch)
    assert (after != before) == differs
    again = discover_node(t.roots, use_nvml=False)  # the new snapshot
    assert again == after


@pytest.mark.parametrize("name,setup,change,differs", [c for c in TREE_CHANGES if c[3]],
                         ids=[c[0] for c in TREE_CHANGES if c[3]])
def test_without_validation_each_change_would_be_missed(make_tree, farm, cache_dir, passes, monkeypatch, name,
                                                        setup, change, differs):
    """The cases above prove something: with the validation skipped, the snapshot serves
    the node as it was before the change."""
    t = make_tree(gpus=2)
    if setup:
        setup(t, farm)
    before = warm(t, cache_dir, passes)
    change(t, farm)
    monkeypatch.setattr(fsview, "unchanged", lambda lstats, stats: True)
    assert discover_node(t.roots, use_nvml=False) == before != fresh(t, monkeypatch)


def test_code_identity_is_part_of_the_key(make_tree, cache_dir, passes, monkeypatch):
    """An edited (or upgraded) nct never reads a snapshot an older one made."""
    t = make_tree(gpus=1)
    warm(t, cache_dir, passes)
    real = snapshot._code_identity
    monkeypatch.setattr(snapshot, "_code_identity", lambda: real() + "\nedited")
    n = len(passes)
    discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 1
    monkeypatch.setattr(snapshot, "_code_identity", lambda: None)  # a module file cannot be stat'ed
    discover_node(t.roots, use_nvml=False)
    discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 3


def test_code_replaced_after_it_was_loaded_means_no_snapshot(make_tree, cache_dir, passes, monkeypatch):
    """nct replaced in place (same version, new files) while a hook runs: the files on disk
    are the new code's, the answer this process computes is the old code's. It must neither
    be filed under the new code's key (every later hook would serve it until the driver
    tree changes) nor use the new code's snapshot."""
    import nct

    t = make_tree(gpus=1)
    warm(t, cache_dir, passes)  # the snapshot of the code on disk
    # what this process loaded: the files as they were before they were replaced
    monkeypatch.setattr(nct, "LOADED_CODE", {p: i[:4] + (i[4] - 10**9, i[5] - 10**9) if i else i
                                             for p, i in nct.LOADED_CODE.items()})
    n = len(passes)
    discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 1
    for f in snapshot_files(cache_dir):
        f.unlink()
    discover_node(t.roots, use_nvml=False)
    assert not snapshot_files(cache_dir)


def test_path_is_part_of_the_key(make_tree, cache_dir, passes, monkeypatch):
    t = make_tree(gpus=1)
    t.write("/opt/bin/nvidia-smi", "#!/bin/sh\n").chmod(0o755)
    warm(t, cache_dir, passes)
    monkeypatch.setenv("PATH", "/opt/bin")
    smi = next(f for f in discover_node(t.roots, use_nvml=False).files if f.name == "nvidia-smi")
    assert smi.container_path == "/opt/bin/nvidia-smi"


def test_two_installs_on_one_node_each_keep_their_snapshot(make_tree, cache_dir, passes, monkeypatch):
    """Two nct installs on one node (the toolkit's hook and a venv's: same driver root,
    --ldcache, machine and PATH, different code identities) alternate without evicting each
    other's snapshot: the slot is a hash of the whole key, not of the driver root alone."""
    t = make_tree(gpus=1)
    real = snapshot._code_identity()
    assert real is not None
    installs = (real, real + "\n/opt/other-install/nct/__init__.py=1:2:3:4:5:6")
    for code in installs:
        monkeypatch.setattr(snapshot, "_code_identity", lambda code=code: code)
        warm(t, cache_dir, passes)
    assert len(snapshot_files(cache_dir)) == 2
    n = len(passes)
    for code in installs * 2:
        monkeypatch.setattr(snapshot, "_code_identity", lambda code=code: code)
        discover_node(t.roots, use_nvml=False)
    assert len(passes) == n, "the two installs evicted each other's snapshot"


def test_at_most_slots_snapshot_files_are_kept(make_tree, cache_dir, passes, monkeypatch):
    """Every new key writes a file of its own; saving one removes the least recently
    written beyond SLOTS, never the one just written."""
    t = make_tree(gpus=1)
    for i in range(snapshot.SLOTS + 3):
        monkeypatch.setenv("PATH", f"/opt/bin{i}")
        discover_node(t.roots, use_nvml=False)
        files = snapshot_files(cache_dir)
        assert len(files) == min(i + 1, snapshot.SLOTS)
    n = len(passes)
    discover_node(t.roots, use_nvml=False)  # the newest key's snapshot is still there
    assert len(passes) == n
    monkeypatch.setenv("PATH", "/opt/bin0")  # the oldest was removed
    discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 1


def test_a_relative_driver_root_is_never_snapshotted(make_tree, cache_dir, passes, monkeypatch, tmp_path):
    """A relative driver root (config `root`, cdi generate --driver-root) names another tree
    from another working directory: an empty answer made where it names nothing is not
    served where it names a driver."""
    t = make_tree(gpus=1)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / t.root.name).mkdir(parents=True)
    roots = t.roots.replace(driver=t.root.name, dev=str(t.root))
    monkeypatch.chdir(elsewhere)
    assert [f for f in discover_node(roots, use_nvml=False).files if f.kind == "lib"] == []
    monkeypatch.chdir(t.root.parent)
    found = discover_node(roots, use_nvml=False)
    assert {f.name for f in found.files if f.kind == "lib"} >= {"libcuda.so", "libnvidia-ml.so"}
    assert not snapshot_files(cache_dir)


def test_mps_pipe_directory_is_live(make_tree, cache_dir, passes, monkeypatch):
    t = make_tree(gpus=1)
    warm(t, cache_dir, passes)
    pipes = t.path("/var/mps")
    pipes.mkdir(parents=True)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/var/mps")
    node = discover_node(t.roots, use_nvml=False)
    assert [f.host_path for f in node.files if f.kind == "ipc"] == [str(pipes)]
    assert node == fresh(t, monkeypatch)


# --- racy window --------------------------------------------------------------------------------

def test_no_snapshot_of_files_changed_moments_ago(make_tree, cache_dir, passes, monkeypatch):
    """With the real clock a brand-new tree is never snapshotted: a same-size rewrite within
    one timestamp tick could keep every identity."""
    monkeypatch.setattr(hostcache, "time", time)
    t = make_tree(gpus=1)
    discover_node(t.roots, use_nvml=False)
    discover_node(t.roots, use_nvml=False)
    assert snapshot_files(cache_dir) == [] and len(passes) == 2


def test_one_recent_file_is_enough_to_skip_the_snapshot(make_tree, cache_dir, passes, monkeypatch):
    """The real clock and a racy window of half a second: the tree settles, then one
    firmware file changes (its ctime, whatever its mtime says): no snapshot."""
    monkeypatch.setattr(hostcache, "time", time)
    monkeypatch.setattr(hostcache, "RACY_SECONDS", 0.5)
    t = make_tree(gpus=1)
    time.sleep(0.6)
    fw = t.path(f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin")
    os.utime(fw, (1e9, 1e9))  # an old mtime, a new ctime
    discover_node(t.roots, use_nvml=False)
    assert snapshot_files(cache_dir) == []
    time.sleep(0.6)
    warm(t, cache_dir, passes)  # the baseline: settled, it is snapshotted


def test_a_driver_file_dated_in_the_future_does_not_disable_the_snapshot(make_tree, cache_dir, passes,
                                                                        monkeypatch):
    """A driver package built by a clock ahead of the node's (or `touch -d tomorrow`): the
    file's mtime is in the future, but its last change (ctime) is long past: snapshotted,
    and a later change still seen."""
    t = make_tree(gpus=1)
    tomorrow = time.time() + 86400
    os.utime(t.path(LIBCUDA), (tomorrow, tomorrow))
    before = warm(t, cache_dir, passes)
    _rewrite_same_size(t, LIBCUDA, "old")
    n = len(passes)
    after = discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 1
    assert after == fresh(t, monkeypatch) != before


def test_a_file_rewritten_during_the_pass_is_seen_next_time(make_tree, cache_dir, passes, monkeypatch):
    """libcuda rewritten in place (same size, old mtime put back) just after the pass opened
    it: the pass read the new bytes under the identity it recorded before; the next
    discovery sees the new identity and answers what a full pass answers."""
    t = make_tree(gpus=1)
    real_open = fsview.open_binary
    done = []

    def open_then_rewrite(path):
        opened = real_open(path)
        if path == str(t.path(LIBCUDA)) and not done:
            done.append(path)
            _rewrite_same_size(t, LIBCUDA, "old")
        return opened

    monkeypatch.setattr(fsview, "open_binary", open_then_rewrite)
    discover_node(t.roots, use_nvml=False)
    assert done
    n = len(passes)
    after = discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 1
    assert after == fresh(t, monkeypatch)


# --- an untrusted or damaged snapshot file ---------------------------------------------------------

def _planted(t, cache_dir, passes, host: str | None = None) -> tuple[Path, object]:
    """A snapshot whose observations all hold, with libcuda's host path changed to `host`
    (default: libnvidia-ml's, a file the pass did look at): served when the file is trusted
    (the baseline of the tests below)."""
    node = warm(t, cache_dir, passes)
    host = host or next(f.host_path for f in node.files if f.name == "libnvidia-ml.so")
    (f,) = snapshot_files(cache_dir)
    data = json.loads(f.read_text())
    (entry,) = data.values()
    for part in entry["files"]:
        for i in range(0, len(part), 6):
            if part[i + 4] == "libcuda.so":
                part[i + 1] = host
    f.write_text(json.dumps(data))
    return f, data


def _libcuda(t):
    return next(f.host_path for f in discover_node(t.roots, use_nvml=False).files if f.name == "libcuda.so")


def test_planted_snapshot_is_served_when_trusted(make_tree, cache_dir, passes):
    t = make_tree(gpus=1)
    _planted(t, cache_dir, passes)
    assert _libcuda(t).endswith(f"/libnvidia-ml.so.{VERSION}")


@pytest.mark.parametrize("where", ["outside", "unlooked", "dir"])
def test_a_snapshot_names_only_files_its_pass_saw(make_tree, cache_dir, passes, monkeypatch, where):
    """A host file the pass never looked at (a secret outside the driver root, a file in a
    lib dir discovery never asked for) or a directory it walked through is never served,
    even from a trusted file whose observations all hold: the snapshot can only repeat
    what discovery found."""
    t = make_tree(gpus=1)
    secret = {"outside": t.root.parent / "shadow", "unlooked": t.path(f"{LIB64}/libsecret.so.1"),
              "dir": t.path(LIB64)}[where]
    if where != "dir":
        secret.write_text("root:secret\n")
    _planted(t, cache_dir, passes, str(secret))
    n = len(passes)
    assert _libcuda(t) == str(t.path(LIBCUDA))
    assert len(passes) == n + 1


def _garbage(f, data):
    f.write_bytes(b"\x00\xffnot json")


def _truncated(f, data):
    f.write_text(json.dumps(data)[:-100])


def _oversized(f, data):
    (entry,) = data.values()
    entry["padding"] = "x" * snapshot.SnapshotCache.max_bytes
    f.write_text(json.dumps(data))


def _too_deep(f, data):
    f.write_text("[" * 100000 + "]" * 100000)


def _bad_row(f, data):
    (entry,) = data.values()
    del entry["files"][0][-1]
    f.write_text(json.dumps(data))


def _bad_kind(f, data):
    (entry,) = data.values()
    entry["files"][0][0] = "ipc"
    f.write_text(json.dumps(data))


def _bad_identity_type(f, data):
    (entry,) = data.values()
    path = next(iter(entry["lstat"]))
    entry["lstat"][path] = 12
    f.write_text(json.dumps(data))


def _nul_in_path(f, data):
    (entry,) = data.values()
    entry["lstat"]["/x\0y"] = ""
    f.write_text(json.dumps(data))


def _wrong_identity(f, data):
    (entry,) = data.values()
    path = next(p for p, i in entry["lstat"].items() if i and not i.startswith("d"))
    entry["lstat"][path] = entry["lstat"][path] + "0"
    f.write_text(json.dumps(data))


def _bad_field_type(f, data):
    (entry,) = data.values()
    entry["files"][1][2] = ["/usr/bin/x"]
    f.write_text(json.dumps(data))


def _not_an_object(f, data):
    (key,) = data
    data[key] = ["files"]
    f.write_text(json.dumps(data))


def _symlinked(f, data):
    elsewhere = f.parent.parent / "elsewhere.json"
    f.rename(elsewhere)
    os.symlink(elsewhere, f)


def _group_writable_file(f, data):
    f.write_text(json.dumps(data))
    os.chmod(f, 0o620)


def _group_writable_dir(f, data):
    f.write_text(json.dumps(data))
    os.chmod(f.parent, 0o770)


def _dir_not_ours(f, data):
    f.write_text(json.dumps(data))
    os.chown(f.parent, 65534, 65534)


def _file_not_ours(f, data):
    f.write_text(json.dumps(data))
    os.chown(f, 65534, 65534)


def _fifo(f, data):
    f.unlink()
    os.mkfifo(f, 0o600)


DAMAGE = [_garbage, _truncated, _oversized, _too_deep, _bad_row, _bad_kind, _bad_field_type, _bad_identity_type,
          _nul_in_path, _wrong_identity, _not_an_object, _symlinked, _group_writable_file, _group_writable_dir, _dir_not_ours,
          _file_not_ours, _fifo]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_damaged_or_untrusted_snapshot_means_a_full_pass(make_tree, cache_dir, passes, monkeypatch, damage):
    if damage in (_dir_not_ours, _file_not_ours) and os.geteuid() != 0:
        pytest.skip("needs root to chown")
    t = make_tree(gpus=1)
    f, data = _planted(t, cache_dir, passes)
    damage(f, data)
    n = len(passes)
    node = discover_node(t.roots, use_nvml=False)
    assert len(passes) == n + 1
    assert node == fresh(t, monkeypatch)
    assert next(f.host_path for f in node.files if f.name == "libcuda.so") == str(t.path(LIBCUDA))
