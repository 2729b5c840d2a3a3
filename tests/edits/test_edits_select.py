"""Device selection (libnvidia-container's --device rules) on constructed nodes."""

from __future__ import annotations

import pytest

from nct.edits.select import normalise_bus_id, select_devices
from nct.errors import RequestError


@pytest.fixture
def node(node_factory):
    # GPU 0 and 2 plain, GPU 1 with two MIG devices; 4 GPUs with GPU 3 excluded.
    return node_factory(4, migs={1: 2}, excluded=(3,))


def names(sel):
    return [g.index for g in sel.gpus], [m.index_name for m in sel.migs]


@pytest.mark.parametrize("ids, gpus, migs", [
    (["all"], [0, 1, 2], ["1:0", "1:1"]),
    (["ALL"], [0, 1, 2], ["1:0", "1:1"]),
    (["0", "all"], [0, 1, 2], ["1:0", "1:1"]),
    ([], [], []),
    ([""], [], []),
    (["2"], [2], []),
    (["2", "0"], [2, 0], []),  # request order, as libnvidia-container
    (["0", "0"], [0], []),
    (["GPU-00000002-1111-2222-3333-444444444444"], [2], []),
    (["gpu-00000002-1111-2222-3333-444444444444"], [2], []),
    (["00000000:03:00.0"], [2], []),
    (["0000:03:00.0"], [2], []),
    (["0:3:0.0"], [2], []),
    (["0000:03:00"], [2], []),
    (["1:1"], [1], ["1:1"]),
    (["1:0", "1:1"], [1], ["1:0", "1:1"]),
    (["MIG-00010000-aaaa-bbbb-cccc-dddddddddddd"], [1], ["1:0"]),
    (["mig-00010001-AAAA-bbbb-cccc-dddddddddddd"], [1], ["1:1"]),
    (["2", "1:0"], [2, 1], ["1:0"]),
    (" 0 , 2 ", [0, 2], []),
])
def test_selects(node, ids, gpus, migs):
    assert names(select_devices(node, ids)) == (gpus, migs)


def test_all_sets_flag(node):
    assert select_devices(node, ["all"]).all
    assert not select_devices(node, ["0"]).all
    assert not select_devices(node, [])


@pytest.mark.parametrize("bad", [
    "4",  # no such index
    "3",  # excluded GPU: invisible, as to NVML
    "GPU-00000003-1111-2222-3333-444444444444",
    "GPU-",
    "GPU-deadbeef",
    "MIG-nope",
    "1:2",  # GPU 1 has two MIG devices
    "0:0",  # GPU 0 has none
    "01:00.0",  # a bus id needs its domain
    "0000:09:00.0",
    "nvidia.com/gpu=0",  # CDI names are the runtime's business
    "-1",
    "+1",
    "void",
])
def test_unknown_device_names_it(node, bad):
    with pytest.raises(RequestError) as exc:
        select_devices(node, ["0", bad])
    assert str(exc.value) == f"unknown device: {bad}"


@pytest.mark.parametrize("value, want", [
    ("0000:01:00.0", "00000000:01:00.0"),
    ("00000000:3B:00.0", "00000000:3b:00.0"),
    ("1:2:3.0", "00000001:02:03.0"),
    ("01:00.0", None),
    ("GPU-1", None),
    ("0000:01:00.9", None),
])
def test_normalise_bus_id(value, want):
    assert normalise_bus_id(value) == want
