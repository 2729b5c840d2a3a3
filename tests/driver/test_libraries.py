"""Driver file selection inside a driver root: version suffix, ELF checks, capabilities,
binaries, IPC sockets, firmware, configs."""

from __future__ import annotations

import os
import shutil
import socket
import struct

import pytest

from nct.driver import catalogue
from nct.driver.discover import discover_node
from nct.errors import DiscoveryError
from treebuilder import LIB32, LIB64, link_lib


def names(node, kind):
    return [f.name for f in node.files if f.kind == kind]


def files_of(node, kind, capabilities):
    """The files of one kind that discovery tagged with one of `capabilities` (or none)."""
    return [f for f in node.files if f.kind == kind and (f.capability is None or f.capability in capabilities)]


def test_every_catalogue_library_found(make_tree, farm):
    t = make_tree(gpus=1)
    node = discover_node(t.roots, use_nvml=False)
    assert names(node, "lib")[:len(catalogue.all_library_names())] == catalogue.all_library_names()
    if farm.m32:
        assert names(node, "lib32") == catalogue.all_library_names()
        assert all(f.container_path.startswith(LIB32) for f in node.files if f.kind == "lib32")
    cuda = next(f for f in node.files if f.kind == "lib" and f.name == "libcuda.so")
    assert cuda.host_path == str(t.path(f"{LIB64}/libcuda.so.550.54.15"))
    assert cuda.container_path == f"{LIB64}/libcuda.so.550.54.15"
    assert (cuda.soname, cuda.capability) == ("libcuda.so.1", "compute")
    assert node.lib_dirs == (str(t.path(LIB64)),)


def test_capability_selection(make_tree):
    node = discover_node(make_tree(gpus=1).roots, use_nvml=False)
    util = {f.name for f in files_of(node, "lib", {"utility"})}
    assert util == {"libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"}
    compute = {f.name for f in files_of(node, "lib", {"compute"})}
    assert "libcuda.so" in compute and "libnvidia-ml.so" not in compute
    video = {f.name for f in files_of(node, "lib", {"video"})}
    assert video == set(catalogue.LIBRARIES["video"])
    graphics = {f.name for f in files_of(node, "lib", {"graphics"})}
    assert "libGLX_nvidia.so" in graphics and "libnvidia-egl-gbm.so" in graphics
    assert {f.name for f in files_of(node, "bin", {"utility"})} == set(catalogue.BINARIES["utility"])
    assert {f.name for f in files_of(node, "bin", {"compute"})} == set(catalogue.BINARIES["compute"])
    assert files_of(node, "firmware", {"utility"})  # firmware: every GPU container
    assert {f.container_path for f in files_of(node, "config", {"graphics"})} == {
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/etc/vulkan/icd.d/nvidia_icd.json", "/etc/OpenCL/vendors/nvidia.icd"}
    assert files_of(node, "config", {"compute", "utility"}) == []


def _recache(t):
    t.ldconfig()


def test_wrong_version_and_bad_elf_are_skipped(make_tree, farm, tmp_path):
    t = make_tree(gpus=1)
    lib = t.path(LIB64)
    # libcuda: only a file of another driver version -> not found
    for f in lib.glob("libcuda.so*"):
        f.unlink()
    shutil.copy(farm.lib("libcuda.so"), lib / "libcuda.so.535.104.05")
    os.symlink("libcuda.so.535.104.05", lib / "libcuda.so.1")
    # libnvidia-ml: a 32-bit file in the 64-bit dir
    if farm.m32:
        (lib / "libnvidia-ml.so.550.54.15").unlink()
        shutil.copy(farm.lib("libnvidia-ml.so", 32), lib / "libnvidia-ml.so.550.54.15")
    # libnvidia-cfg: an aarch64 object
    data = bytearray(farm.lib("libnvidia-cfg.so").read_bytes())
    struct.pack_into("<H", data, 18, 183)
    (lib / "libnvidia-cfg.so.550.54.15").write_bytes(bytes(data))
    # libnvoptix: no SONAME; libnvidia-ngx: truncated
    (lib / "libnvoptix.so.550.54.15").unlink()
    link_lib(lib / "libnvoptix.so.550.54.15", None)
    (lib / "libnvidia-ngx.so.550.54.15").write_bytes(farm.lib("libnvidia-ngx.so").read_bytes()[:100])
    _recache(t)
    found = set(names(discover_node(t.roots, use_nvml=False), "lib"))
    missing = {"libcuda.so", "libnvidia-cfg.so", "libnvoptix.so", "libnvidia-ngx.so"}
    if farm.m32:
        missing.add("libnvidia-ml.so")
    assert found.isdisjoint(missing)
    assert "libnvidia-encode.so" in found


def test_absolute_links_resolve_inside_driver_root(make_tree, farm):
    """A driver container's absolute SONAME links point into its own tree, not the host's."""
    t = make_tree(gpus=1)
    lib = t.path(LIB64)
    (lib / "libcuda.so.1").unlink()
    os.symlink(f"{LIB64}/libcuda.so.550.54.15", lib / "libcuda.so.1")
    _recache(t)
    node = discover_node(t.roots, use_nvml=False)
    cuda = next(f for f in node.files if f.kind == "lib" and f.name == "libcuda.so")
    assert cuda.host_path == str(lib / "libcuda.so.550.54.15")


def test_vdpau_subdir_and_no_cache(make_tree):
    t = make_tree(gpus=1)
    lib = t.path(LIB64)
    (lib / "vdpau").mkdir()
    for f in lib.glob("libvdpau_nvidia.so*"):
        if f.is_symlink():
            f.unlink()
        else:
            f.rename(lib / "vdpau" / f.name)
    _recache(t)
    node = discover_node(t.roots, use_nvml=False)
    vd = next(f for f in node.files if f.name == "libvdpau_nvidia.so" and f.kind == "lib")
    assert vd.container_path == f"{LIB64}/vdpau/libvdpau_nvidia.so.550.54.15"
    # no ld.so.cache at all: the standard dirs are searched
    t.path("/etc/ld.so.cache").unlink()
    node = discover_node(t.roots, use_nvml=False)
    assert "libcuda.so" in names(node, "lib")
    # an explicit --ldcache that does not exist is an error naming it
    with pytest.raises(DiscoveryError, match="/etc/other.cache: ld.so.cache not found"):
        discover_node(t.roots, ldcache="/etc/other.cache", use_nvml=False)


def test_corrupt_cache_named(make_tree):
    t = make_tree(gpus=1)
    t.path("/etc/ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1" + b"\xff" * 40)
    with pytest.raises(DiscoveryError) as e:
        discover_node(t.roots, use_nvml=False)
    assert str(t.path("/etc/ld.so.cache")) in str(e.value) and "corrupt" in str(e.value)


def test_ipcs_binaries_firmware_configs(make_tree, monkeypatch):
    t = make_tree(gpus=1)
    sock_path = t.path("/run/nvidia-persistenced/socket")
    sock_path.parent.mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock_path))
        t.path("/var/run/nvidia-fabricmanager").mkdir(parents=True)
        t.path("/var/run/nvidia-fabricmanager/socket").write_text("not a socket")
        t.path("/tmp/nvidia-mps").mkdir(parents=True)
        t.path("/usr/bin/nvidia-debugdump").chmod(0o644)  # not executable
        t.write("/usr/local/share/glvnd/egl_vendor.d/10_nvidia.json", "{}")
        monkeypatch.setenv("PATH", "/opt/none")
        node = discover_node(t.roots, use_nvml=False)
    finally:
        s.close()
    ipcs = {f.container_path: f.capability for f in node.files if f.kind == "ipc"}
    assert ipcs == {"/run/nvidia-persistenced/socket": "utility", "/tmp/nvidia-mps": "compute"}
    assert "nvidia-debugdump" not in names(node, "bin") and "nvidia-smi" in names(node, "bin")
    smi = next(f for f in node.files if f.name == "nvidia-smi")
    assert smi.container_path == "/usr/bin/nvidia-smi" and smi.host_path == str(t.path("/usr/bin/nvidia-smi"))
    assert sorted(names(node, "firmware")) == ["gsp_ga10x.bin", "gsp_tu10x.bin"]
    egl = next(f for f in node.files if f.kind == "config" and f.name == "10_nvidia.json")
    assert egl.host_path == str(t.path("/usr/local/share/glvnd/egl_vendor.d/10_nvidia.json"))
    assert egl.container_path == "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"
