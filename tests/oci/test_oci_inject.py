"""The CDI merge rules applied to OCI spec dicts, one rule at a time, and ContainerEdits
rendered into a spec (hooks included) that still validates against the OCI schema."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat

import pytest

from nct.edits.model import ContainerEdits, DeviceNodeEdit, HookEdit, MountEdit, SymlinkEdit
from nct.errors import SpecError
from nct.cdi.inject import apply_cdi_edits, apply_edits_to_spec, fill_device_node, sort_mounts
from schema_check import oci_schema_errors

DATA = os.path.join(os.path.dirname(__file__), "data", "good")


def base_spec() -> dict:
    with open(os.path.join(DATA, "minimal.json")) as f:
        spec = json.load(f)
    spec["process"] = {"cwd": "/", "args": ["sh"], "env": ["PATH=/bin", "FOO=old", "BAR=1"],
                       "user": {"uid": 0, "gid": 0}}
    spec["linux"] = {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}
    return spec


@pytest.fixture
def devnode(tmp_path):
    """A real character device node (mknod), like /dev/nvidia3 (195:3), mode 0660."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    path = tmp_path / "nvidia3"
    os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(195, 3))
    os.chmod(path, 0o660)
    return str(path)


# --- env ------------------------------------------------------------------------------

def test_env_replaces_existing_key_in_place_and_appends_new():
    spec = apply_cdi_edits(base_spec(), {"env": ["FOO=new", "NEW=x", "BAR=2"]})
    assert spec["process"]["env"] == ["PATH=/bin", "FOO=new", "BAR=2", "NEW=x"]


def test_env_repeated_key_in_edits_last_wins():
    spec = apply_cdi_edits(base_spec(), {"env": ["Z=1", "Z=2"]})
    assert spec["process"]["env"][-1] == "Z=2" and sum(e.startswith("Z=") for e in spec["process"]["env"]) == 1


# --- device nodes ---------------------------------------------------------------------

def test_device_node_filled_from_host_stat(devnode):
    spec = apply_cdi_edits(base_spec(), {"deviceNodes": [{"path": "/dev/nvidia3", "hostPath": devnode}]})
    assert spec["linux"]["devices"] == [
        {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3, "fileMode": 0o660}]
    assert spec["linux"]["resources"]["devices"][-1] == {
        "allow": True, "type": "c", "major": 195, "minor": 3, "access": "rwm"}
    assert oci_schema_errors(spec) == []


def test_device_node_type_mismatch_is_an_error(devnode):
    with pytest.raises(SpecError, match="type 'b'"):
        fill_device_node({"path": "/dev/x", "hostPath": devnode, "type": "b"})


def test_declared_major_skips_stat():
    d = fill_device_node({"path": "/dev/nvidia9", "hostPath": "/nonexistent/nvidia9", "type": "c",
                          "major": 195, "minor": 9})
    assert d["major"] == 195 and "fileMode" not in d


def test_missing_host_node_is_an_error():
    with pytest.raises(SpecError, match="/nonexistent/nvidia9"):
        apply_cdi_edits(base_spec(), {"deviceNodes": [{"path": "/nonexistent/nvidia9"}]})


def test_regular_file_is_not_a_device(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(SpecError, match="not a device node"):
        fill_device_node({"path": str(f)})


def test_same_path_device_replaced_and_permissions():
    spec = base_spec()
    spec["linux"]["devices"] = [{"path": "/dev/nvidia0", "type": "c", "major": 1, "minor": 1},
                                {"path": "/dev/other", "type": "c", "major": 2, "minor": 2}]
    apply_cdi_edits(spec, {"deviceNodes": [
        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "permissions": "rw"},
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "permissions": "none"},
        {"path": "/dev/fifo", "type": "p"},
    ]})
    paths = [d["path"] for d in spec["linux"]["devices"]]
    assert paths == ["/dev/other", "/dev/nvidia0", "/dev/nvidia1", "/dev/fifo"]
    assert spec["linux"]["devices"][1]["major"] == 195
    rules = spec["linux"]["resources"]["devices"]
    assert [r["access"] for r in rules[-2:]] == ["rw", ""]  # no rule for the pipe
    assert len(rules) == 3  # minimal.json's deny-all + two allows


def test_uid_gid_default_to_process_user_when_nonzero():
    spec = base_spec()
    spec["process"]["user"] = {"uid": 1000, "gid": 0}
    apply_cdi_edits(spec, {"deviceNodes": [
        {"path": "/dev/a", "type": "c", "major": 1, "minor": 3},
        {"path": "/dev/b", "type": "c", "major": 1, "minor": 5, "uid": 7, "gid": 8}]})
    a, b = spec["linux"]["devices"]
    assert a["uid"] == 1000 and "gid" not in a
    assert (b["uid"], b["gid"]) == (7, 8)


# --- mounts -----------------------------------------------------------------------------

def test_mounts_replaced_by_container_path_and_sorted_by_depth():
    spec = base_spec()
    spec["mounts"] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/usr/lib/libcuda.so.1", "type": "bind", "source": "/old"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
    ]
    apply_cdi_edits(spec, {"mounts": [
        {"hostPath": "/new", "containerPath": "/usr/lib/libcuda.so.1", "options": ["ro", "rbind"]},
        {"hostPath": "/h/bin", "containerPath": "/usr/bin/nvidia-smi"},
        {"hostPath": "/h/a", "containerPath": "/a", "type": "bind"},
    ]})
    dests = [m["destination"] for m in spec["mounts"]]
    assert dests == ["/a", "/dev", "/proc", "/usr/bin/nvidia-smi", "/usr/lib/libcuda.so.1"]
    cuda = spec["mounts"][-1]
    assert cuda == {"destination": "/usr/lib/libcuda.so.1", "source": "/new", "options": ["ro", "rbind"]}
    assert spec["mounts"][0] == {"destination": "/a", "type": "bind", "source": "/h/a"}


def test_sort_is_stable_for_equal_destinations():
    mounts = [{"destination": "/x/y", "source": "1"}, {"destination": "/a"},
              {"destination": "/x/y", "source": "2"}, {"destination": "/x/y/"}]
    sort_mounts(mounts)
    assert [m.get("source") for m in mounts if m["destination"] == "/x/y"] == ["1", "2"]
    assert mounts[0]["destination"] == "/a"


# --- hooks, gids, others --------------------------------------------------------------------

def test_hooks_appended_to_named_list():
    spec = base_spec()
    spec["hooks"] = {"createContainer": [{"path": "/first"}]}
    apply_cdi_edits(spec, {"hooks": [
        {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
         "args": ["nvidia-cdi-hook", "noop"], "env": ["NVIDIA_CTK_DEBUG=false"], "timeout": 5},
        {"hookName": "poststop", "path": "/bin/true"}]})
    assert spec["hooks"]["createContainer"] == [
        {"path": "/first"},
        {"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "noop"],
         "env": ["NVIDIA_CTK_DEBUG=false"], "timeout": 5}]
    assert spec["hooks"]["poststop"] == [{"path": "/bin/true"}]


def test_unknown_hook_name_is_an_error():
    with pytest.raises(SpecError, match="unknown hook name 'preStart'"):
        apply_cdi_edits(base_spec(), {"hooks": [{"hookName": "preStart", "path": "/x"}]})


def test_additional_gids_appended_without_zero_or_repeats():
    spec = base_spec()
    spec["process"]["user"]["additionalGids"] = [5]
    apply_cdi_edits(spec, {"additionalGids": [0, 5, 44, 44, 110]})
    assert spec["process"]["user"]["additionalGids"] == [5, 44, 110]


def test_intel_rdt_and_net_devices():
    spec = apply_cdi_edits(base_spec(), {"intelRdt": {"closID": "c1"},
                                         "netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}]})
    assert spec["linux"]["intelRdt"] == {"closID": "c1"}
    assert spec["linux"]["netDevices"] == {"eth1": {"name": "net0"}}


def test_spec_part_of_wrong_type_is_a_spec_error():
    spec = base_spec()
    spec["mounts"] = {"not": "a list"}
    with pytest.raises(SpecError, match="mounts must be an array"):
        apply_cdi_edits(spec, {"mounts": [{"hostPath": "/a", "containerPath": "/a"}]})


def test_empty_edits_leave_spec_alone():
    spec = base_spec()
    assert apply_cdi_edits(copy.deepcopy(spec), {}) == spec


# --- ContainerEdits -> OCI spec ---------------------------------------------------------------

def gpu_edits(devnode: str | None = None) -> ContainerEdits:
    return ContainerEdits(
        env=["NVIDIA_VISIBLE_DEVICES=void", "FOO=cdi"],
        device_nodes=[DeviceNodeEdit("/dev/nvidiactl", "/dev/nvidiactl", 195, 255, file_mode=0o20666),
                      DeviceNodeEdit("/dev/nvidia3", devnode or "/dev/nvidia3", 195, 3, gid=44)],
        mounts=[MountEdit("/drv/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                          "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"),
                MountEdit("/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket",
                          options=("nosuid", "nodev", "rbind", "rprivate", "noexec"))],
        hooks=[HookEdit("prestart", "/usr/bin/other-hook", ("other-hook",), env=())],
        symlinks=[SymlinkEdit("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"),
                  SymlinkEdit("libcuda.so.550.54.15", "/usr/lib/x86_64-linux-gnu/libcuda.so.1")],
        ldconfig_folders=["/usr/lib/x86_64-linux-gnu"],
        additional_gids=[44],
        proc_driver_gpus=["0000:3b:00.0"],
    )


def test_apply_container_edits_renders_everything():
    spec = apply_edits_to_spec(base_spec(), gpu_edits(), ldconfig_path="@/sbin/ldconfig.real",
                               driver_version="550.54.15")
    assert oci_schema_errors(spec) == []
    assert spec["process"]["env"] == ["PATH=/bin", "FOO=cdi", "BAR=1", "NVIDIA_VISIBLE_DEVICES=void"]
    devs = {d["path"]: d for d in spec["linux"]["devices"]}
    assert devs["/dev/nvidiactl"] == {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255,
                                      "fileMode": 0o666}
    assert devs["/dev/nvidia3"]["gid"] == 44
    assert spec["process"]["user"]["additionalGids"] == [44]
    assert spec["hooks"]["prestart"] == [{"path": "/usr/bin/other-hook", "args": ["other-hook"]}]
    hooks = spec["hooks"]["createContainer"]
    assert [h["args"][1] for h in hooks] == [
        "create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"]
    for h in hooks:
        assert h["path"] == "/usr/bin/nvidia-cdi-hook"
        assert h["env"] == ["NVIDIA_CTK_DEBUG=false"]  # never the container's environment
    assert hooks[0]["args"][2:] == [
        "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
        "--link", "libcuda.so.550.54.15::/usr/lib/x86_64-linux-gnu/libcuda.so.1"]
    assert hooks[1]["args"][2:] == ["--host-driver-version=550.54.15"]
    assert hooks[2]["args"][2:] == ["--ldconfig-path", "/sbin/ldconfig.real",
                                    "--folder", "/usr/lib/x86_64-linux-gnu"]
    ipc = [m for m in spec["mounts"] if m["destination"] == "/run/nvidia-persistenced/socket"][0]
    assert ipc["options"] == ["nosuid", "nodev", "rbind", "rprivate", "noexec"]


def test_nvidia_ctk_as_hook_binary_and_disabled_hooks():
    spec = apply_edits_to_spec(base_spec(), gpu_edits(), hook_path="/usr/local/bin/nvidia-ctk",
                               disabled_hooks=("update-ldcache", "disable-device-node-modification"))
    hooks = spec["hooks"]["createContainer"]
    assert [h["args"][:3] for h in hooks] == [["nvidia-ctk", "hook", "create-symlinks"]]
    spec = apply_edits_to_spec(base_spec(), gpu_edits(), disabled_hooks=("all",))
    assert "createContainer" not in spec["hooks"]


def test_no_compat_hook_without_driver_version():
    spec = apply_edits_to_spec(base_spec(), gpu_edits())
    assert "enable-cuda-compat" not in [h["args"][1] for h in spec["hooks"]["createContainer"]]


def test_runc_spec_with_real_device_node(devnode, tmp_path):
    """A runc-generated spec plus edits whose device node has no mode given: the mode is
    taken from the real node, and the result still validates."""
    import subprocess
    if not shutil.which("runc"):
        pytest.skip("runc not installed")
    subprocess.run(["runc", "spec", "--bundle", str(tmp_path)], check=True)
    spec = json.loads((tmp_path / "config.json").read_text())
    edits = ContainerEdits(device_nodes=[DeviceNodeEdit("/dev/nvidia3", devnode, 0, 0)])
    apply_edits_to_spec(spec, edits)
    dev = [d for d in spec["linux"]["devices"] if d["path"] == "/dev/nvidia3"][0]
    assert (dev["major"], dev["minor"], dev["fileMode"]) == (195, 3, 0o660)
    assert oci_schema_errors(spec) == []


def test_repeated_nodes_and_mounts_last_wins_after_the_others():
    """One pass per list (issue 9 review: a filter per node was quadratic): the spec's
    entries not replaced keep their order, the edits' follow in the order of their last
    occurrence, the last of two with one path wins; a non-string path is left alone."""
    spec = {"ociVersion": "1.0.2", "linux": {"devices": [
        {"path": "/dev/x", "type": "c", "major": 1, "minor": 1}, {"path": ["odd"]},
        {"path": "/dev/y", "type": "c", "major": 1, "minor": 2}]},
        "mounts": [{"destination": "/a", "source": "/s"}, {"destination": "/b", "source": "/s"}],
        "process": {"user": {"uid": 0, "gid": 0, "additionalGids": [5, "x"]}}}
    nodes = [{"path": "/dev/x", "type": "c", "major": 9, "minor": 1},
             {"path": "/dev/z", "type": "c", "major": 9, "minor": 3},
             {"path": "/dev/x", "type": "c", "major": 9, "minor": 2}]
    mounts = [{"hostPath": "/h1", "containerPath": "/a"}, {"hostPath": "/h2", "containerPath": "/c"},
              {"hostPath": "/h3", "containerPath": "/a"}]
    apply_cdi_edits(spec, {"deviceNodes": nodes, "mounts": mounts, "additionalGids": [5, 6, 6]})
    assert [(d.get("path"), d.get("minor")) for d in spec["linux"]["devices"]] == [
        (["odd"], None), ("/dev/y", 2), ("/dev/z", 3), ("/dev/x", 2)]
    assert [(m["destination"], m["source"]) for m in spec["mounts"]] == [("/a", "/h3"), ("/b", "/s"), ("/c", "/h2")]
    assert spec["process"]["user"]["additionalGids"] == [5, "x", 6]
