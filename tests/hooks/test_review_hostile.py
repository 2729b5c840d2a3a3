"""Attacks from the security review of the host-side changes (docs/security.md) that are
refused, kept as tests so they stay refused: container-root spellings that are the host's /,
ld.so.conf includes reaching for host files through /proc, hostile compat libs (symlinks out
of the root, FIFOs, device nodes, mangled ELF files) and a YAML alias bomb as a CDI spec.
Real parts: the console scripts, busybox rootfs, mknod nodes, FIFOs, gcc-built ELF files."""

from __future__ import annotations

import json
import os
import random
import stat
import struct
import subprocess
import time

import pytest

from realparts import needs_gcc, needs_root, snapshot
from hookforms import hook_argv
from test_cdihook_cli import HOOK, CLEAN_ENV, _compat_conf, _compat_lib, _known_new, _write, hook, state_for

pytestmark = pytest.mark.usefixtures("hook_form")  # alone and as an nct-steps step


# ---- a container root that is the host's / by any spelling --------------------------------------
@needs_root
@pytest.mark.parametrize("where, root", [
    ("config", "/proc/self/root"),
    ("config", "/proc/1/root"),
    ("config", "/proc/self/cwd"),          # the hook runs with / as its working directory here
    ("config", "/proc/self/root/proc/self/root/."),
    ("config", "link-to-slash"),          # a symlink in the bundle
    ("config", "rootfs/../../../../../../../../../../.."),
    ("state", "/"),
    ("state", "//"),
    ("state", "/proc/1/root"),
    ("state", "../../../../../../../../../.."),
])
@pytest.mark.parametrize("via", ["stdin", "container-spec"])
def test_host_root_by_any_spelling_refused(tmp_path, where, root, via):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    os.symlink("/", bundle / "link-to-slash")
    spec = {"ociVersion": "1.0.2", "root": {"path": root if where == "config" else "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    st = {"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": os.getpid(), "bundle": str(bundle)}
    if where == "state":
        st["root"] = root
    victim = f"/tmp/nct-review-{os.getpid()}-{os.urandom(4).hex()}"
    args = [HOOK, "create-symlinks", "--link", f"t::{victim}/made"]
    if via == "container-spec":
        (tmp_path / "state.json").write_text(json.dumps(st))
        args += ["--container-spec", str(tmp_path / "state.json")]
    res = subprocess.run(hook_argv(args), input="" if via == "container-spec" else json.dumps(st), capture_output=True,
                         text=True, env=CLEAN_ENV, cwd="/", timeout=60)
    assert res.returncode == 1, res.stderr
    # /proc/1/root may be closed to us (a sandbox's pid 1): then opening it is the refusal
    assert "must not be /" in res.stderr or (root == "/proc/1/root" and "Permission denied" in res.stderr), \
        res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not os.path.lexists(victim)


# ---- ld.so.conf includes that name host files ------------------------------------------------------
@needs_root
@pytest.mark.parametrize("procfs", [False, True], ids=["empty-proc", "real-procfs"])
@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_includes_through_proc_magic_links_stay_in_root(rootfs, victim, monkeypatch, openat2, procfs):
    """/proc/self/root, /proc/1/root and /proc/self/cwd in an include pattern or as a symlink
    target, relative `..` climbs and a relative symlink out: all resolve inside the root, with
    an empty /proc or a real procfs mounted there (openat2 refuses its magic links, and the
    walk re-reads their text inside the root), so the host's conf file never counts."""
    from nct.container import rootfs as rootfs_mod

    monkeypatch.setattr(rootfs_mod, "USE_OPENAT2", openat2)
    host_conf = os.path.join(victim, "nv.conf")
    with open(host_conf, "w") as f:
        f.write("/opt/nv/lib\n")
    before = snapshot(victim)
    os.makedirs(os.path.join(rootfs, "etc/h"))
    for i, target in enumerate([f"/proc/self/root{host_conf}", f"/proc/1/root{host_conf}",
                                f"/proc/self/cwd{host_conf}", "../" * 40 + host_conf.lstrip("/")]):
        os.symlink(target, os.path.join(rootfs, f"etc/h/{i}.conf"))
    _write(rootfs, "/etc/ld.so.conf",
           f"include /etc/h/*.conf\ninclude /proc/self/root{victim}/*.conf /proc/1/root{victim}/*.conf\n"
           f"include ../../../../../../..{victim}/*.conf\n")
    proc = os.path.join(rootfs, "proc")
    os.makedirs(proc, exist_ok=True)
    if procfs:  # as at createContainer time: the runtime has mounted the container's /proc
        subprocess.run(["mount", "-t", "proc", "proc", proc], check=True)
    try:
        assert _known_new(rootfs, ["/opt/nv/lib"]) == ["/opt/nv/lib"]
    finally:
        if procfs:
            subprocess.run(["umount", "-l", proc], check=True)
    assert snapshot(victim) == before


# ---- hostile compat libs ---------------------------------------------------------------------------
NOTE_USE = {"CUDA Version": "12.9", "Driver": [550], "Device": [1]}  # says "use me" to a 550 host


@needs_root
@needs_gcc
def test_compat_dir_symlinked_to_a_host_dir_is_resolved_in_root(rootfs, tmp_path):
    """/usr/local/cuda -> an absolute host dir holding a compat lib whose note says "use me": the
    link is read inside the root, where that dir does not exist, so nothing is enabled."""
    host = tmp_path / "hostroot"
    _compat_lib(str(host), "560.35.03", NOTE_USE)
    os.makedirs(os.path.join(rootfs, "usr/local"), exist_ok=True)
    os.symlink(str(host / "usr/local/cuda"), os.path.join(rootfs, "usr/local/cuda"))
    res = hook("enable-cuda-compat", "--host-driver-version=550.54.15", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _compat_conf(rootfs) == []
    # control: the same lib inside the root is used
    os.unlink(os.path.join(rootfs, "usr/local/cuda"))
    _compat_lib(rootfs, "560.35.03", NOTE_USE)
    res = hook("enable-cuda-compat", "--host-driver-version=550.54.15", state=state_for(rootfs))
    assert res.returncode == 0 and _compat_conf(rootfs) == ["/usr/local/cuda/compat\n"], res.stderr


@needs_root
@pytest.mark.parametrize("kind", ["fifo", "chr", "symlink-to-fifo", "symlink-to-host-file"])
def test_compat_lib_that_is_not_a_regular_file_is_never_opened(rootfs, tmp_path, kind):
    """A FIFO (would block an open), a device node, or a symlink to either or to a host file:
    skipped (no compat), at once."""
    d = os.path.join(rootfs, "usr/local/cuda/compat")
    os.makedirs(d)
    lib = os.path.join(d, "libcuda.so.560.35.03")
    if kind == "fifo":
        os.mkfifo(lib)
    elif kind == "chr":
        os.mknod(lib, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "symlink-to-fifo":
        os.mkfifo(os.path.join(rootfs, "fifo"))
        os.symlink("/fifo", lib)
    else:
        host = tmp_path / "libcuda.so.560.35.03"
        host.write_bytes(b"\x7fELF")
        os.symlink(str(host), lib)
    start = time.monotonic()
    res = hook("enable-cuda-compat", "--host-driver-version=550.54.15", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - start < 30
    assert _compat_conf(rootfs) == []


@needs_gcc
def test_mangled_compat_elf_files_never_raise(tmp_path):
    """3000 mutations (header fields, section offsets/sizes/counts, alignment, truncation) of
    gcc-built 64- and 32-bit libs carrying the note: read_fwd_note answers a note, None or
    BadNote, never anything else (the review ran 60000 such cases)."""
    from nct.container import compat

    src = tmp_path / "n.c"
    src.write_text('__attribute__((used, section(".note.cuda.fwd_compatibility"), aligned(4))) '
                   'static const char note[] = "\\x13\\0\\0\\0\\x1d\\0\\0\\0\\x01\\0\\0\\0NVIDIA Corporation\\0\\0'
                   '{\\"CUDA Version\\":\\"12.9\\"}\\0\\0\\0\\0";\nint x(void) { return 0; }\n')
    bases = []
    for flags in ([], ["-m32"]):
        out = tmp_path / f"n{len(bases)}.so"
        if subprocess.run(["gcc", *flags, "-shared", "-fPIC", "-o", str(out), str(src)],
                          capture_output=True).returncode == 0:
            bases.append(out.read_bytes())
    fd = os.open(tmp_path / "n0.so", os.O_RDONLY)
    try:
        assert compat.read_fwd_note(fd)["cuda"] == "12.9"
    finally:
        os.close(fd)
    rnd = random.Random(1)
    path = tmp_path / "fuzz.so"
    for _ in range(3000):
        b = bytearray(rnd.choice(bases))
        for _ in range(rnd.randint(1, 8)):
            k = rnd.random()
            if k < 0.5:
                i = rnd.randrange(64) if rnd.random() < 0.6 else rnd.randrange(len(b))
                b[i] = rnd.randrange(256)
            elif k < 0.8:
                i = rnd.randrange(len(b) - 8)
                b[i:i + 8] = rnd.choice([b"\xff" * 8, b"\0" * 8, struct.pack("<Q", rnd.randrange(1 << 64))])
            elif len(b) > 53:
                b = b[:rnd.randrange(52, len(b))]
        path.write_bytes(bytes(b))
        fd = os.open(path, os.O_RDONLY)
        try:
            got = compat.read_fwd_note(fd)
            assert got is None or isinstance(got, dict)
        except compat.BadNote:
            pass
        finally:
            os.close(fd)


def test_compat_lib_shrinking_under_the_reader_is_no_note(tmp_path, monkeypatch):
    """Review finding: the note reader sized the file with fstat and then indexed the header
    it read: a lib on a volume another container truncates to its first 4 bytes in between
    gave IndexError (not caught by the hook's note reading). Simulated by a pread that sees
    the shrunk file; now it is "no note"."""
    from nct.container import compat

    lib = tmp_path / "libcuda.so.560.35.03"
    lib.write_bytes(b"\x7fELF" + b"\2\1\1" + b"\0" * 100)
    real = os.pread
    monkeypatch.setattr(compat.os, "pread", lambda fd, n, off: real(fd, n, off)[:4])
    fd = os.open(lib, os.O_RDONLY)
    try:
        assert compat.read_fwd_note(fd) is None
    finally:
        os.close(fd)


# ---- CDI spec: a YAML alias bomb -----------------------------------------------------------------
def test_yaml_alias_bomb_spec_is_refused_at_once(tmp_path):
    """Nine levels of ten aliases each (10^9 leaves if expanded): refused by the pre-scan's
    bound on what aliases stand for (limits.MAX_YAML_ALIAS_NODES) before anything is built;
    (before that bound, the typed decoding refused the first nested list: held too)."""
    from nct.cdi.spec import load_spec
    from nct.errors import SpecError

    lines = ['cdiVersion: "0.5.0"', 'kind: "nvidia.com/gpu"', "devices:",
             "- name: g0\n  containerEdits:\n    env: &a0 [" + ",".join(['"A=1"'] * 10) + "]"]
    for i in range(1, 10):
        lines.append(f"- name: g{i}\n  containerEdits:\n    env: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    start = time.monotonic()
    with pytest.raises(SpecError, match="its aliases stand for more than"):
        load_spec(str(path))
    assert time.monotonic() - start < 10
