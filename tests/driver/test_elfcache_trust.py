"""The ELF result cache is only believed when it cannot have been planted: the directory and
the file must be ours and writable by nobody else, the file a regular file (a FIFO must not
hang the hook), and every entry of the shape we write. Anything else is a miss: discovery
still works, by reading the ELF file itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from nct.driver import elf
from nct.hostcache import CACHE_NAME, ElfCache
from treebuilder import link_lib

pytestmark = [pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
              pytest.mark.usefixtures("settled_caches")]


def _lib(path, soname="libfoo.so.1") -> str:
    return str(link_lib(path, soname))


def _planted(tmp_path, entry) -> tuple[str, str]:
    """A trusted cache dir whose file holds `entry` for a real library (libfoo.so.1)."""
    lib = _lib(tmp_path / "libfoo.so.1.0")
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    key = ElfCache.key(lib, os.stat(lib))
    f = d / CACHE_NAME
    f.write_text(json.dumps({key: entry}) if not isinstance(entry, str) else entry)
    os.chmod(f, 0o600)
    return lib, str(d)


def _check(lib: str, d: str):
    return elf.check_library(lib, "libfoo.so", compat32=False, machine="x86_64", cache=ElfCache(d))


EVIL = [64, "EM_X86_64", "libfoo.so.1", ["libevil.so.1"], "ET_DYN"]


def test_planted_entry_is_served_when_trusted(tmp_path):
    """The baseline the tests below rely on: a trusted file is believed."""
    lib, d = _planted(tmp_path, EVIL)
    info, _ = _check(lib, d)
    assert info.needed == ("libevil.so.1",)


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_group_or_world_writable_cache_file_is_ignored(tmp_path, mode):
    lib, d = _planted(tmp_path, EVIL)
    os.chmod(os.path.join(d, CACHE_NAME), mode)
    info, why = _check(lib, d)
    assert info is not None and info.soname == "libfoo.so.1" and info.needed != ("libevil.so.1",), why


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_cache_file_owned_by_someone_else_is_ignored(tmp_path):
    lib, d = _planted(tmp_path, EVIL)
    os.chown(os.path.join(d, CACHE_NAME), 65534, 65534)
    info, _ = _check(lib, d)
    assert info is not None and info.needed != ("libevil.so.1",)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_cache_dir_owned_by_someone_else_is_ignored(tmp_path):
    lib, d = _planted(tmp_path, EVIL)
    os.chown(d, 65534, 65534)
    info, _ = _check(lib, d)
    assert info is not None and info.needed != ("libevil.so.1",)


def test_symlinked_cache_dir_or_file_is_ignored(tmp_path):
    lib, d = _planted(tmp_path, EVIL)
    os.symlink(d, tmp_path / "dirlink")
    assert _check(lib, str(tmp_path / "dirlink"))[0].needed != ("libevil.so.1",)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.symlink(os.path.join(d, CACHE_NAME), other / CACHE_NAME)
    assert _check(lib, str(other))[0].needed != ("libevil.so.1",)


def test_fifo_as_cache_file_does_not_hang(tmp_path):
    """A real FIFO where the cache file should be: ignored at once (a plain open would block
    until a writer shows up)."""
    lib = _lib(tmp_path / "libfoo.so.1.0")
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    os.mkfifo(d / CACHE_NAME, 0o600)
    code = ("import sys\nfrom nct.driver import elf\nfrom nct.hostcache import ElfCache\n"
            "info, why = elf.check_library(sys.argv[1], 'libfoo.so', compat32=False, machine='x86_64', "
            "cache=ElfCache(sys.argv[2]))\nprint(info.soname)\n")
    res = subprocess.run([sys.executable, "-c", code, lib, str(d)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "libfoo.so.1"


@pytest.mark.parametrize("entry", [
    [64, "EM_X86_64", "libfoo.so.1", 5, "ET_DYN"],            # hit[3] not a list
    [64, "EM_X86_64", "libfoo.so.1", "abc", "ET_DYN"],        # a string is no list of names
    [64, "EM_X86_64", "libfoo.so.1", [1, None], "ET_DYN"],    # names of the wrong type
    [64, "EM_X86_64", "libfoo.so.1", []],                     # wrong length
    [64, "EM_X86_64", "libfoo.so.1", [], "ET_DYN", "extra"],  # wrong length
    ["64", "EM_X86_64", "libfoo.so.1", [], "ET_DYN"],         # class of the wrong type
    [True, "EM_X86_64", "libfoo.so.1", [], "ET_DYN"],
    [128, "EM_X86_64", "libfoo.so.1", [], "ET_DYN"],
    [64, 62, "libfoo.so.1", [], "ET_DYN"],
    [64, "EM_X86_64", 7, [], "ET_DYN"],
    [64, "EM_X86_64", "libfoo.so.1", [], None],
    ["!", {"not": "a reason"}, None, [], ""],
    {"not": "a list"},
    "not json at all {",
    "[" * 100000 + "]" * 100000,                               # too deep for the parser
    "[1, 2, 3]",                                               # not an object
])
def test_corrupt_entry_is_a_miss_and_discovery_still_works(tmp_path, entry):
    lib, d = _planted(tmp_path, entry)
    info, why = _check(lib, d)
    assert info is not None, why
    assert info == elf.read_elf(lib)


def test_cache_dir_swapped_after_its_check_does_not_redirect_the_write(tmp_path, monkeypatch):
    """The directory is checked on an fd and written through that fd: a cache dir renamed and
    replaced by a symlink right after the check (someone who can write its parent) cannot
    make root write the cache file into another directory."""
    import nct.hostcache as hostcache

    d, victim = tmp_path / "cache", tmp_path / "victim"
    d.mkdir(mode=0o700)
    victim.mkdir(mode=0o700)
    real_open_dir = hostcache.HostCache._open_dir
    swapped = []

    def open_then_swap(self):
        dfd = real_open_dir(self)
        if not swapped:
            swapped.append(True)
            d.rename(tmp_path / "moved")
            d.symlink_to(victim)
        return dfd

    cache = ElfCache(str(d))
    cache.put("/usr/lib/libfoo.so.1|1:2:3:4:5", ["!", "x", None, [], ""])  # reads the (empty) cache
    monkeypatch.setattr(hostcache.HostCache, "_open_dir", open_then_swap)
    cache.save()
    assert swapped and os.listdir(victim) == []
    assert os.listdir(tmp_path / "moved") == [CACHE_NAME]
