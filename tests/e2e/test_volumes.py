"""Issue 9 §5: the hook and ldconfig run as host root; an image symlink can lead them into a
read-write volume (a bind mount of a host directory). Decision: nothing is created outside
the image's own filesystem. nct refuses, with one line, to create a mount target, link or
file in a directory on another mount (fresh tmpfs mounts of the container such as /dev
excepted), and ldconfig sees every mount below the root read-only, so it creates no
SONAME links in a volume. The host directory behind the volume stays byte-for-byte as it was."""

from __future__ import annotations

import os
import subprocess

import pytest

from e2e import harness
from e2e.harness import HOOK, bundle_with_hook, needs_e2e, runc_run, snapshot, venv_bin

pytestmark = needs_e2e
LIBDIR = "usr/lib/x86_64-linux-gnu"


@pytest.fixture(autouse=True, params=["new-kernel", "old-kernel"])
def kernel(request, monkeypatch):
    if request.param == "old-kernel":
        wrapper = str(request.getfixturevalue("oldkernel"))
        monkeypatch.setattr(harness, "hook_entry", lambda *extra: {"prestart": [
            {"path": wrapper, "args": ["oldkernel", venv_bin(HOOK), *extra, "prestart"]}]})
    return request.param


@pytest.fixture
def volume(tmp_path):
    v = tmp_path / "host-volume"
    (v / "lib").mkdir(parents=True)
    (v / "keep").write_text("host data\n")
    os.chmod(v, 0o755)
    return v


def _mount(volume) -> list[dict]:
    return [{"destination": "/vol", "type": "bind", "source": str(volume), "options": ["rbind", "rw"]}]


def test_image_symlink_into_a_volume_is_refused(sim_node, rootfs, volume):
    """The image's lib dir is a link into the volume: the hook would create the driver
    libraries' mount targets (empty root-owned files) and links in the host's directory."""
    import shutil

    shutil.rmtree(rootfs / LIBDIR)
    os.symlink("/vol/lib", rootfs / LIBDIR)
    before = snapshot(volume)
    res = runc_run(sim_node, bundle_with_hook(rootfs, "cuda-probe", ["NVIDIA_VISIBLE_DEVICES=1"],
                                              mounts=_mount(volume)))
    assert snapshot(volume) == before, "the hook created files in the host's volume"
    assert res.returncode != 0
    err = res.stderr.decode()
    assert err.count("nvidia-container-runtime-hook: ") == 1, err
    assert "refusing to create /" in err and "is on a volume, not the image's own filesystem" in err, err


def test_ldconfig_creates_no_links_in_a_volume(sim_node, rootfs, volume, tmp_path):
    """A volume lib dir listed in the image's ld.so.conf.d, holding a library without its
    SONAME link: ldconfig (host root) would create the link in the host's directory. The
    volume is read-only in ldconfig's view: no link, and the container still runs."""
    src = tmp_path / "v.c"
    src.write_text("int nct_vol(void) { return 7; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnctvol.so.1", "-o",
                    str(volume / "lib/libnctvol.so.1.0"), str(src)], check=True)
    (rootfs / "etc/ld.so.conf.d").mkdir(exist_ok=True)
    (rootfs / "etc/ld.so.conf.d/vol.conf").write_text("/vol/lib\n")
    before = snapshot(volume)
    res = runc_run(sim_node, bundle_with_hook(rootfs, "cuda-probe", ["NVIDIA_VISIBLE_DEVICES=1"],
                                              mounts=_mount(volume)))
    assert res.returncode == 0, res.stderr.decode()
    assert "cuDriverGetVersion=12040" in res.stdout.decode()
    assert snapshot(volume) == before, "ldconfig created files in the host's volume"
    assert not os.path.lexists(volume / "lib/libnctvol.so.1")
