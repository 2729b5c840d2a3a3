"""The host-side cache of parsed CDI specs (nct.hostcache.SpecCache): a second load of the
same file (same identity) skips YAML parsing and validation; a changed, racily new,
schema-checked or untrusted case never gets a stale or planted document."""

from __future__ import annotations

import json
import os
import time

import pytest


from nct.cdi import spec as S
from nct import hostcache
from nct.cdi.registry import Registry
from nct.hostcache import SpecCache
from schema_check import check_schema

from .test_cdi_registry import node, write_spec

pytestmark = pytest.mark.usefixtures("settled_caches")


def _age(path: str, seconds: int = 60) -> None:
    t = os.stat(path).st_mtime - seconds
    os.utime(path, (t, t))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("NCT_CACHE_DIR", str(d))
    return d


def _no_parsing(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("parsed although cached")

    monkeypatch.setattr(S, "parse_spec_data", boom)


def test_second_registry_is_served_from_the_cache(tmp_path, cache_dir, monkeypatch):
    d = str(tmp_path / "cdi")
    path = write_spec(d, "nvidia.yaml", devices={"0": node(0), "1": node(1)})
    _age(path)
    first = Registry([d])
    assert first.errors == [] and first.device_names() == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert (cache_dir / SpecCache.name).exists()
    assert oct((cache_dir / SpecCache.name).stat().st_mode & 0o777) == "0o600"
    with monkeypatch.context() as m:
        _no_parsing(m)
        second = Registry([d])
    assert second.device_names() == first.device_names()
    assert [s.raw for s in second.specs] == [s.raw for s in first.specs]
    # replaced (new inode, new times): parsed again, the new content wins
    path = write_spec(d, "nvidia.yaml", devices={"7": node(7)})
    _age(path)
    assert Registry([d]).device_names() == ["nvidia.com/gpu=7"]


def test_racily_new_file_and_schema_checks_bypass_the_cache(tmp_path, cache_dir, monkeypatch):
    d = str(tmp_path / "cdi")
    write_spec(d, "nvidia.json", devices={"0": node(0)})  # just written: not cached
    with monkeypatch.context() as m:
        m.setattr(hostcache, "time", time)  # the real clock
        Registry([d])
    assert not (cache_dir / SpecCache.name).exists()
    Registry([d])
    assert (cache_dir / SpecCache.name).exists()
    with monkeypatch.context() as m:
        _no_parsing(m)
        with pytest.raises(AssertionError, match="parsed although cached"):
            Registry([d], check=check_schema)  # --schema checks always read the file


def test_planted_or_untrusted_cache_is_not_served(tmp_path, cache_dir, monkeypatch):
    d = str(tmp_path / "cdi")
    path = write_spec(d, "nvidia.yaml", devices={"0": node(0)})
    _age(path)
    key = SpecCache.key(path, os.stat(path))
    planted = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
               "devices": [{"name": "evil", "containerEdits": {"mounts": [
                   {"hostPath": "/", "containerPath": "/host"}]}}]}
    cache_file = cache_dir / SpecCache.name
    cache_file.write_text(json.dumps({key: planted}))
    os.chmod(cache_file, 0o600)
    os.chmod(cache_dir, 0o777)  # anyone could have written it: ignored
    assert Registry([d]).device_names() == ["nvidia.com/gpu=0"]
    os.chmod(cache_dir, 0o700)
    os.chmod(cache_file, 0o666)  # the file itself writable by others: ignored
    assert Registry([d]).device_names() == ["nvidia.com/gpu=0"]
    cache_file.write_text(json.dumps({key: planted}))  # (that run rewrote it)
    os.chmod(cache_file, 0o600)  # trusted (root's own 0700 dir, 0600 file): it is our record
    assert Registry([d]).device_names() == ["nvidia.com/gpu=evil"]
    cache_file.write_text(json.dumps({key: ["not", "a", "spec"]}))
    assert Registry([d]).device_names() == ["nvidia.com/gpu=0"]  # wrong shape: a miss


def test_a_spec_dir_of_200_files_is_served_from_the_cache(tmp_path, cache_dir, monkeypatch):
    """issue 14 §4: a cache holding fewer entries than the spec dir has files re-parsed the
    rest (and rewrote the cache) on every load, so 200 files cost 4x per file what 50 did."""
    d = str(tmp_path / "cdi")
    for i in range(200):
        _age(write_spec(d, f"vendor{i:03d}.yaml", devices={"0": node(0)}, kind=f"v{i:03d}.example.com/gpu"))
    first = Registry([d])
    assert first.errors == [] and len(first.specs) == 200
    with monkeypatch.context() as m:
        _no_parsing(m)
        second = Registry([d])
    assert len(second.specs) == 200 and second.device_names() == first.device_names()


def test_cache_over_its_byte_bound_keeps_the_newest(tmp_path, cache_dir, monkeypatch):
    """Entries past max_bytes are dropped oldest first: the file stays readable (one over the
    bound would be ignored whole, and every load would parse everything again)."""
    monkeypatch.setattr(SpecCache, "max_bytes", 4000)
    d = str(tmp_path / "cdi")
    for i in range(40):
        _age(write_spec(d, f"vendor{i:03d}.yaml", devices={"0": node(0)}, kind=f"v{i:03d}.example.com/gpu"))
    Registry([d])
    size = (cache_dir / SpecCache.name).stat().st_size
    assert 0 < size <= 4000
    kept = json.loads((cache_dir / SpecCache.name).read_text())
    assert 0 < len(kept) < 40
