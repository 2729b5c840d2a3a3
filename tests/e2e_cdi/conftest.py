"""Fixtures for CDI end-to-end tests: a simulated node (3 GPUs, GPU 2 with 2 MIG devices),
a busybox+glibc rootfs with the libcuda probe, and that rootfs as image tars."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e import rootfs as R
from e2e_cdi.engines import why_not
from e2e_cdi.images import oci_archive, rootfs_tar


@pytest.fixture(scope="session")
def cdi_node(tmp_path_factory):
    why = why_not()
    if why:
        pytest.skip(why)
    from nct.sim.node import create_node

    return create_node(str(tmp_path_factory.mktemp("e2ecdi") / "node"), gpus=3, mig="2:2")


@pytest.fixture(scope="session")
def cdi_rootfs_template(tmp_path_factory) -> Path:
    why = why_not()
    if why:
        pytest.skip(why)
    probe = R.build_probe(tmp_path_factory.mktemp("probe") / "cuda-probe")
    return R.make_rootfs(tmp_path_factory.mktemp("tpl") / "rootfs", probe=probe)


@pytest.fixture(scope="session")
def image_tars(cdi_rootfs_template, tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("images")
    plain = rootfs_tar(cdi_rootfs_template, d / "rootfs.tar")
    return plain, oci_archive(plain, d / "oci.tar")
