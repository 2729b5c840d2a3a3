"""Pure parsing on crafted files: cgroup location from /proc/PID/cgroup + mountinfo, the
hostile-input ELF note reader of CUDA compat, the BPF prologue encoding."""

from __future__ import annotations

import json
import os
import struct

from nct.container import cgroups as cg
import pytest

from nct.container.compat import BadNote, legacy_use_compat, parse_version, read_fwd_note, use_compat


def _files(tmp_path, cgroup: str, mountinfo: str):
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "cgroup").write_text(cgroup)
    (tmp_path / "mountinfo").write_text(mountinfo)
    return str(tmp_path / "proc"), str(tmp_path / "mountinfo")


def test_cgroup_v2_only(tmp_path):
    proc, mi = _files(tmp_path, "0::/system.slice/docker-abc.scope\n",
                      "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    assert cg.find_device_cgroups(42, proc, mi) == (None, "/sys/fs/cgroup/system.slice/docker-abc.scope")


def test_cgroup_hybrid_and_mount_root(tmp_path):
    proc, mi = _files(tmp_path, "12:devices:/outer/ctr\n11:cpu,cpuacct:/outer/ctr\n0::/\n",
                      "36 31 0:33 /outer /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
                      "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    assert cg.find_device_cgroups(42, proc, mi) == ("/sys/fs/cgroup/devices/ctr", "/sys/fs/cgroup/unified")


def test_v1_rule_text():
    assert cg.DeviceRule("c", 195, 1).v1() == "c 195:1 rw"
    assert cg.DeviceRule("c", 195, -1, "rwm").v1() == "c 195:* rwm"


def test_bpf_prologue_shape():
    code = cg.rules_prologue([cg.DeviceRule("c", 195, 1), cg.DeviceRule("c", 195, -1, "r")])
    insns = [struct.unpack("<BBhi", code[i:i + 8]) for i in range(0, len(code), 8)]
    # 6 loads; per rule: (mov r6 = field, xor r6 ^= value, jne r6 != 0) per compared field,
    # then the access check (3) and "return 1" (2)
    assert len(insns) == 6 + (9 + 5) + (6 + 5)
    assert insns[6:9] == [(0xBF, 3 << 4 | 6, 0, 0), (0xA7, 6, 0, 2), (0x55, 6, 11, 0)]  # type c
    assert insns[9:15] == [(0xBF, 4 << 4 | 6, 0, 0), (0xA7, 6, 0, 195), (0x55, 6, 8, 0),
                           (0xBF, 5 << 4 | 6, 0, 0), (0xA7, 6, 0, 1), (0x55, 6, 5, 0)]
    assert insns[17] == (0x55, 0, 2, 0) and insns[18:20] == [(0xB7, 0, 0, 1), (0x95, 0, 0, 0)]
    # every conditional jump lands exactly on the start of the next rule block (or the tail)
    targets = {i + 1 + off for i, (op, _, off, _) in enumerate(insns) if op == 0x55}
    assert targets == {20, 31}
    # the field registers (r3 type, r4 major, r5 minor) are never compared directly
    assert all(regs & 0xF in (0, 6) for op, regs, _, _ in insns if op == 0x55)


def _elf_with_note(desc: bytes) -> bytes:
    """A minimal ELF64 LE file: header, a note section and a section-name table."""
    name = b"NVIDIA Corporation\0"
    note = struct.pack("<III", len(name), len(desc), 1) + name + b"\0" * (-len(name) % 4) + desc
    names = b"\0.note.cuda.fwd_compatibility\0.shstrtab\0"
    note_off = 64
    names_off = note_off + len(note)
    sh_off = names_off + len(names)
    hdr = bytearray(64)
    hdr[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", hdr, 0x28, sh_off)
    struct.pack_into("<HHH", hdr, 0x3A, 64, 3, 2)
    shdrs = bytes(64)
    shdrs += struct.pack("<IIQQQQIIQQ", 1, 7, 0, 0, note_off, len(note), 0, 0, 4, 0)
    shdrs += struct.pack("<IIQQQQIIQQ", 30, 3, 0, 0, names_off, len(names), 0, 0, 1, 0)
    return bytes(hdr) + note + names + shdrs


def test_fwd_note_reader(tmp_path):
    p = tmp_path / "libcuda.so.575.57.08"
    p.write_bytes(_elf_with_note(json.dumps({"Format": 1, "CUDA Version": "12.9", "Driver": [570, 575],
                                             "Device": [1, 2, 7]}).encode()))
    fd = os.open(p, os.O_RDONLY)
    try:
        assert read_fwd_note(fd) == {"cuda": "12.9", "driver": [570, 575], "device": [1, 2, 7]}
    finally:
        os.close(fd)


def test_fwd_note_reader_survives_garbage(tmp_path):
    good = _elf_with_note(b'{"CUDA Version": "12.6"}')
    samples = [b"", b"\x7fELF", os.urandom(4096), good[:100], good[:64] + b"\xff" * 400]
    bad_hdr = bytearray(good)
    struct.pack_into("<HHH", bad_hdr, 0x3A, 64, 60000, 59999)
    samples.append(bytes(bad_hdr))
    for i, data in enumerate(samples):
        p = tmp_path / f"g{i}"
        p.write_bytes(data)
        fd = os.open(p, os.O_RDONLY)
        try:
            assert read_fwd_note(fd) is None
        finally:
            os.close(fd)


@pytest.mark.parametrize("desc", [b"[1, 2]", b"{not json", b'{"Driver": ["570"]}', b'{"CUDA Version": 12.9}',
                                  b'{"Device": 7}',
                                  b'{"Driver": [570.0]}', b'{"Driver": [9223372036854775808]}'])
def test_fwd_note_reader_bad_json(tmp_path, desc):
    """What upstream's JSON decoder refuses is a bad note (the hook then compares majors)."""
    p = tmp_path / "lib"
    p.write_bytes(_elf_with_note(desc))
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(BadNote):
            read_fwd_note(fd)
    finally:
        os.close(fd)


def test_fwd_note_json_as_go_decodes_it(tmp_path):
    """Keys match fields ignoring case, the last one wins; null leaves a field empty."""
    def note(desc: bytes) -> dict:
        p = tmp_path / "lib"
        p.write_bytes(_elf_with_note(desc))
        fd = os.open(p, os.O_RDONLY)
        try:
            return read_fwd_note(fd)
        finally:
            os.close(fd)

    assert note(b'{"Driver": [570], "driver": [575]}')["driver"] == [575]
    assert note(b'{"DRIVER": [570]}')["driver"] == [570]
    assert note(b'{"Driver": null, "cuda version": "13.0"}') == {"cuda": "13.0", "driver": [], "device": []}


NOTE_129 = {"cuda": "12.9", "driver": [535, 550, 560, 565, 570, 575], "device": [1, 2, 7, 8, 9, 10, 11, 12, 13, 14]}


@pytest.mark.parametrize("compat,host_driver,host_cuda,used", [
    # upstream's TestUseCompat table (cmd/nvidia-cdi-hook/cudacompat), as a table of our own
    ("", "", "12.8", True),                          # no driver versions: CUDA 12.9 > 12.8
    ("", "", "12.9", False),
    ("", "", "12.10", False),
    ("575.57.08", "590.44.01", "", False),          # host branch not in the note's list
    ("575.57.08", "570.211.01", "", True),          # older supported branch
    ("575.57.08", "575.10.10", "", True),           # same branch, compat newer
    ("575.57.08", "575.57.08", "", False),          # same build
    ("575.57.08", "575.99.99", "", False),          # same branch, host newer
    ("575.57.08", "565.01.2", "", True),            # leading zeros are numbers
    ("575.57.08", "1", "", False),                  # a branch not listed
])
def test_use_compat_with_note(compat, host_driver, host_cuda, used):
    assert use_compat(NOTE_129, compat, host_driver or None, host_cuda or None) is used


@pytest.mark.parametrize("compat,host,used", [
    ("333.88.99", "222.55.66", True), ("111.88.99", "222.55.66", False), ("222.88.99", "222.55.66", False),
    ("222.88.99", "99.55.66", True), ("222.88.99", "", False), ("222.88.99", "junk", False),
])
def test_use_compat_without_note_compares_majors(compat, host, used):
    assert use_compat(None, compat, host or None, None) is used
    assert legacy_use_compat(compat, host or None) is used


def test_legacy_rule_ignores_the_note_branches():
    """libnvidia-container reads no note: a newer build of the host's own branch is not used."""
    assert legacy_use_compat("575.57.08", "575.10.10") is False
    assert legacy_use_compat("575.57.08", "570.211.01") is True


def test_parse_version():
    assert parse_version("v1.02.3-rc1+b") == (1, 2, 3)
    assert parse_version("1") == (1, 0, 0) and parse_version("12.9") == (12, 9, 0)
    assert parse_version("1.2.3.4") is None and parse_version("a.b") is None and parse_version("") is None


def test_seccomp_filter_shape():
    """Classic BPF: arch check (kill on another ABI), nr load, x32 range (x86_64), one
    compare per denied syscall jumping to the EPERM return, allow otherwise."""
    from nct.container import syscalls as sc

    for arch, (audit, nrs) in sc._SECCOMP_DENY.items():
        prog = sc.seccomp_deny_filter(arch)
        insns = [struct.unpack("<HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
        assert insns[0] == (0x20, 0, 0, 4) and insns[1] == (0x15, 1, 0, audit)
        assert insns[2] == (0x06, 0, 0, 0x80000000) and insns[3] == (0x20, 0, 0, 0)
        deny = len(insns) - 1
        assert insns[-2] == (0x06, 0, 0, 0x7FFF0000) and insns[deny] == (0x06, 0, 0, 0x50000 | 1)
        jumps = [(i, ins) for i, ins in enumerate(insns) if ins[0] in (0x15, 0x35) and i > 1]
        assert all(i + 1 + jt == deny and jf == 0 for i, (_, jt, jf, _) in jumps)
        assert sorted(k for _, (op, _, _, k) in jumps if op == 0x15) == sorted(nrs)
        assert len(set(nrs)) == len(nrs)
        assert (arch == "x86_64") == any(op == 0x35 and k == 0x40000000 for _, (op, _, _, k) in jumps)
    assert sc.seccomp_deny_filter("riscv64") is None


def test_legacy_params_copy_changes_the_first_match_only(tmp_path):
    """libnvidia-container sets the digit of the first `ModifyDeviceFiles: 1` to 0, nothing else."""
    from nct.container.apply import _proc_copies

    d = tmp_path / "driver" / "nvidia"
    d.mkdir(parents=True)
    (d / "params").write_bytes(b"EnableMSI: 1\nModifyDeviceFiles: 1\nX: ModifyDeviceFiles: 1\n")
    assert _proc_copies(str(tmp_path))["params"] == b"EnableMSI: 1\nModifyDeviceFiles: 0\nX: ModifyDeviceFiles: 1\n"


@pytest.mark.parametrize("field, path", [
    ("/plain", "/plain"),
    (r"/a\040b", "/a b"),
    (r"/trailing\040", "/trailing "),  # an escape at the very end (the sim's old copy missed it)
    (r"/x\134y", "/x\\y"),
    (r"/nl\012x", "/nl\nx"),
    ("/not\\089octal", "/not\\089octal"),  # the kernel escapes a backslash itself: leave others
    ("/short\\04", "/short\\04"),
])
def test_unescape_mount_field(field, path):
    """mountinfo's path fields, as the kernel escapes them (space, tab, newline, backslash)."""
    from nct.container.rootfs import unescape_mount_field

    assert unescape_mount_field(field) == path
