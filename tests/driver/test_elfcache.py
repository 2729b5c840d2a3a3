"""The ELF result cache: hits only for the same file identity, ignored when untrusted."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from nct import hostcache
from nct.driver import elf
from nct.hostcache import CACHE_NAME, ElfCache
from treebuilder import link_lib

pytestmark = [pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
              pytest.mark.usefixtures("settled_caches")]


def _lib(path, soname="libfoo.so.1") -> str:
    return str(link_lib(path, soname))


def test_second_lookup_is_served_from_disk_and_changes_invalidate(tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    lib = _lib(tmp_path / "libfoo.so.1.0")
    c1 = ElfCache(str(cache_dir))
    info, why = elf.check_library(lib, "libfoo.so", compat32=False, machine="x86_64", cache=c1)
    assert info and info.soname == "libfoo.so.1"
    c1.save()
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"
    assert (cache_dir / CACHE_NAME).exists()

    def boom(path, opened=None):
        raise AssertionError("pyelftools should not be needed on a hit")

    monkeypatch.setattr(elf, "read_elf", boom)
    c2 = ElfCache(str(cache_dir))
    info2, _ = elf.check_library(lib, "libfoo.so", compat32=False, machine="x86_64", cache=c2)
    assert info2 == info
    # A replaced file (new inode/ctime) is a miss: read_elf is consulted again.
    _lib(tmp_path / "libfoo.so.1.0", soname="libbar.so.1")
    with pytest.raises(AssertionError, match="should not be needed"):
        elf.check_library(lib, "libfoo.so", compat32=False, machine="x86_64", cache=ElfCache(str(cache_dir)))


def test_rejections_are_cached_too(tmp_path):
    bad = tmp_path / "libfoo.so.1.0"
    bad.write_bytes(b"not an elf at all")
    os.utime(bad, (os.stat(bad).st_mtime - 60,) * 2)
    c = ElfCache(str(tmp_path / "c"))
    assert elf.check_library(str(bad), "libfoo.so", compat32=False, cache=c) == (None, "not an ELF file")
    c.save()
    assert elf.check_library(str(bad), "libfoo.so", compat32=False,
                             cache=ElfCache(str(tmp_path / "c"))) == (None, "not an ELF file")


def test_world_writable_cache_dir_is_ignored(tmp_path):
    lib = _lib(tmp_path / "libfoo.so.1.0")
    d = tmp_path / "c"
    c = ElfCache(str(d))
    elf.check_library(lib, "libfoo.so", compat32=False, cache=c)
    c.save()
    os.chmod(d, 0o777)  # someone else could have planted answers: do not trust it
    c2 = ElfCache(str(d))
    key = c2.key(lib, os.stat(lib))
    assert c2.get(key) is None
    c2.put(key, ["!", "x", None, [], ""])
    c2.save()  # refuses to write there either
    os.chmod(d, 0o700)
    assert ElfCache(str(d)).get(key)[0] == 64


def test_racily_new_files_are_not_cached(tmp_path, monkeypatch):
    """A file modified within the last seconds could be rewritten in place, same size, with
    the same timestamps (they tick at the kernel clock's granularity): no entry for it."""
    monkeypatch.setattr(hostcache, "time", time)  # the real clock
    lib = _lib(tmp_path / "libfoo.so.1.0")
    os.utime(lib)  # just modified
    c = ElfCache(str(tmp_path / "c"))
    assert ElfCache.key(lib, os.stat(lib)) is None
    info, _ = elf.check_library(lib, "libfoo.so", compat32=False, machine="x86_64", cache=c)
    assert info is not None
    c.save()
    assert not (tmp_path / "c" / CACHE_NAME).exists() or (tmp_path / "c" / CACHE_NAME).read_text() == "{}"


def test_a_file_dated_in_the_future_is_cached(tmp_path):
    """Its mtime says tomorrow (a package built by a clock ahead of the node's), its ctime
    says when it last changed: that is what the racy window looks at."""
    lib = _lib(tmp_path / "libfoo.so.1.0")
    os.utime(lib, (time.time() + 86400,) * 2)
    assert ElfCache.key(lib, os.stat(lib)) is not None


def test_a_full_cache_keeps_what_the_last_run_used(tmp_path, monkeypatch):
    """At max_entries, a save evicts the oldest entries: never the ones the saving run itself
    read (a hit keeps its old position in the file), or the next run misses them again and
    rewrites the cache on every container start."""
    monkeypatch.setattr(ElfCache, "max_entries", 3)
    files = []
    for i in range(4):
        f = tmp_path / f"f{i}"
        f.write_text(str(i))
        os.utime(f, (time.time() - 60,) * 2)
        files.append(str(f))
    keys = [ElfCache.key(f, os.stat(f)) for f in files]
    c = ElfCache(str(tmp_path / "c"))
    for k in keys[:3]:
        c.put(k, "v")
    c.save()
    c = ElfCache(str(tmp_path / "c"))
    assert c.get(keys[0]) == "v"  # the oldest, used again
    c.put(keys[3], "v")
    c.save()
    c = ElfCache(str(tmp_path / "c"))
    assert [c.get(k) for k in keys] == ["v", None, "v", "v"]
