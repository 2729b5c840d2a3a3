"""Issue 9 §3/§4: every bound of nct.limits, just under (accepted) and just over (a
one-line error naming the input and the limit), and huge numbers never reaching int()."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nct import limits
from nct.cdi.registry import Registry
from nct.cdi.spec import parse_spec_data
from nct.config.model import Config
from nct.errors import NctError, RequestError, RequirementError, SpecError
from nct.request.parse import legacy_cuda_requirement, request_from_spec
from nct.request.requirements import check_requirements

PRIV = {"bounding": ["CAP_SYS_ADMIN"]}


def spec(env: dict) -> dict:
    return {"ociVersion": "1.2.0", "process": {"env": [f"{k}={v}" for k, v in env.items()], "capabilities": PRIV},
            "root": {"path": "rootfs"}}


def one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and len(text) < 400, text
    return text


def test_the_limits():
    assert (limits.MAX_ENV_VALUE, limits.MAX_LIST_ENTRIES, limits.MAX_NUMBER_DIGITS, limits.MAX_NESTING_DEPTH,
            limits.MAX_DOCUMENT_BYTES) == (65536, 4096, 18, 64, 16 << 20)


# --- env value size ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_X",
                                  "CUDA_VERSION", "NVIDIA_ANYTHING"])
def test_env_value_size(name):
    base = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DISABLE_REQUIRE": "true"}
    value = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "utility",
             "NVIDIA_REQUIRE_X": "cuda>=1", "CUDA_VERSION": "", "NVIDIA_ANYTHING": "x"}[name]
    under = value + " " * (limits.MAX_ENV_VALUE - len(value))
    request_from_spec(spec({**base, name: under}), Config())
    with pytest.raises(RequestError) as e:
        request_from_spec(spec({**base, name: under + " "}), Config())
    assert one_line(e.value) == f"{name}: value of 65537 characters, longer than the limit of 65536"


def test_env_value_size_leaves_other_variables_alone():
    r = request_from_spec(spec({"NVIDIA_VISIBLE_DEVICES": "0", "BIG": "x" * (1 << 20)}), Config())
    assert r.devices == ("0",)


# --- list entries -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_IMEX_CHANNELS", "NVIDIA_DRIVER_CAPABILITIES"])
def test_list_entries(name):
    item = {"NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_IMEX_CHANNELS": "1", "NVIDIA_DRIVER_CAPABILITIES": "utility"}[name]
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    request_from_spec(spec({**env, name: ",".join([item] * 4096)}), Config())
    with pytest.raises(RequestError) as e:
        request_from_spec(spec({**env, name: ",".join([item] * 4097)}), Config())
    assert one_line(e.value) == f"{name}: 4097 entries, more than the limit of 4096"


def test_list_entries_of_annotations_and_mounts():
    s = spec({})
    s["annotations"] = {"cdi.k8s.io/a": ",".join(["nvidia.com/gpu=0"] * 4097)}
    with pytest.raises(RequestError, match=r"^annotation cdi.k8s.io/a: 4097 entries, more than the limit of 4096$"):
        request_from_spec(s, Config(), runtime=True)
    s = spec({})
    s["mounts"] = [{"source": "/dev/null", "destination": f"/var/run/nvidia-container-devices/{i}"}
                   for i in range(4097)]
    cfg = Config().replace(accept_nvidia_visible_devices_as_volume_mounts=True)
    with pytest.raises(RequestError, match=r"4097 entries, more than the limit of 4096$"):
        request_from_spec(s, cfg)
    s["mounts"] = s["mounts"][:4096]
    assert len(request_from_spec(s, cfg).devices) == 4096


# --- numbers ----------------------------------------------------------------------------------

HUGE = "9" * 5000


def test_huge_numbers_in_requests_are_one_line_errors():
    from edits.conftest import make_node
    from nct.edits.select import select_devices

    node = make_node(2, migs={1: 2})
    for dev in (HUGE, f"{HUGE}:0", f"0:{HUGE}", "1" * 19):
        with pytest.raises(RequestError) as e:
            select_devices(node, dev)
        assert one_line(e.value).startswith("unknown device: ")
    with pytest.raises(RequestError, match=r"^invalid IMEX channel: "):
        request_from_spec(spec({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": HUGE}), Config())
    with pytest.raises(RequestError) as e:
        legacy_cuda_requirement(HUGE)
    assert one_line(e.value).startswith("invalid CUDA_VERSION: ")
    with pytest.raises(RequirementError) as e:
        check_requirements(node, select_devices(node, "0"), [f"cuda>={HUGE}"])
    assert one_line(e.value).startswith("invalid expression: cuda>=999")
    # 18 digits still parse as numbers
    with pytest.raises(RequestError, match=r"^unknown device: 9{18}$"):
        select_devices(node, "9" * 18)




# --- nesting depth and document size: CDI specs, config.json, state ------------------------------

def _nested_json(depth: int) -> str:
    # depth levels in all: the spec object, then depth-1 lists as the "devices" value
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    return '{"cdiVersion": "0.6.0", "kind": "deep.com/x", "devices": ' + inner + "}"


def _nested_yaml(depth: int) -> str:
    return "cdiVersion: 0.6.0\nkind: deep.com/x\ndevices: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"


@pytest.mark.parametrize("fmt,make", [("json", _nested_json), ("yaml", _nested_yaml)])
def test_cdi_spec_nesting(fmt, make):
    doc, _ = parse_spec_data(make(64), f"s.{fmt}")  # at the limit: parsed (the schema judges it)
    assert doc["kind"] == "deep.com/x"
    for depth in (65, 100000):
        with pytest.raises(SpecError) as e:
            parse_spec_data(make(depth), f"s.{fmt}")
        assert one_line(e.value) == f"s.{fmt}: invalid {fmt.upper()}: nested deeper than 64 levels"


GOOD = "cdiVersion: 0.6.0\nkind: other.com/dev\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n"


def test_cdi_spec_size(tmp_path):
    from nct.cdi.spec import load_spec

    body = '{"cdiVersion": "0.6.0", "kind": "big.com/x", "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}'
    p = tmp_path / "big.json"
    p.write_text(body + " " * (limits.MAX_DOCUMENT_BYTES - len(body)))
    assert load_spec(str(p)).vendor == "big.com"
    with open(p, "a") as f:
        f.write(" ")
    with pytest.raises(SpecError) as e:
        load_spec(str(p))
    assert one_line(e.value) == f"{p}: larger than the limit of {16 << 20} bytes"


def test_a_deep_spec_is_reported_once_and_skipped(tmp_path, nct_bin):
    """100k levels (the shim segfaulted on YAML, RecursionError on JSON): each bad file is
    one line in the registry's errors, the other vendor's device still resolves; `nvidia-ctk
    cdi list` prints one warning line per bad file, no traceback, and lists the good one."""
    (tmp_path / "a-deep.json").write_text(_nested_json(100000))
    (tmp_path / "b-deep.yaml").write_text(_nested_yaml(100000))
    (tmp_path / "c-good.yaml").write_text(GOOD)
    reg = Registry([str(tmp_path)])
    assert reg.device_names() == ["other.com/dev=a"]
    assert reg.errors == [f"{tmp_path}/a-deep.json: invalid JSON: nested deeper than 64 levels",
                          f"{tmp_path}/b-deep.yaml: invalid YAML: nested deeper than 64 levels"]
    res = subprocess.run([nct_bin("nvidia-ctk"), "cdi", "list", "--spec-dir", str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["other.com/dev=a"]
    warnings = [l for l in res.stderr.splitlines() if "deep" in l]
    assert len(warnings) == 2 and "Traceback" not in res.stderr


def _aliased_yaml(devices: int, env: int) -> str:
    """One device's edits (`env` entries) anchored, every other device an alias of them."""
    lines = ["cdiVersion: 0.6.0", "kind: alias.com/x", "devices:",
             "- name: d0\n  containerEdits: &e\n    env: [" + ", ".join(f"V{i}=x" for i in range(env)) + "]"]
    lines += [f"- name: d{i}\n  containerEdits: *e" for i in range(1, devices)]
    return "\n".join(lines) + "\n"


def test_cdi_spec_yaml_aliases_are_bounded_expanded(tmp_path):
    """Review finding: 4000 aliases of one 4000-entry edit (a 178 KB file, far below the
    bytes bound) made injecting its devices merge 16M env entries (7 s and 270 MB; a 16 MiB
    file of this shape: billions). The aliases' expanded size is now bounded; a spec that
    uses a few is still read."""
    doc, _ = parse_spec_data(_aliased_yaml(10, 100), "s.yaml")
    assert len(doc["devices"]) == 10 and len(doc["devices"][9]["containerEdits"]["env"]) == 100
    with pytest.raises(SpecError) as e:
        parse_spec_data(_aliased_yaml(4000, 4000), "s.yaml")
    assert one_line(e.value) == (f"s.yaml: invalid YAML: its aliases stand for more than {limits.MAX_YAML_ALIAS_NODES} "
                                 "nodes (write the entries out, or use fewer aliases)")
    (tmp_path / "a-alias.yaml").write_text(_aliased_yaml(4000, 4000))
    (tmp_path / "c-good.yaml").write_text(GOOD)
    reg = Registry([str(tmp_path)])
    assert reg.device_names() == ["other.com/dev=a"] and len(reg.errors) == 1


# --- hostile ldconfig ELF (nvidia-cdi-hook update-ldcache --ldconfig-path) -------------------------

def _elf64(size: int = 64, phoff: int = 0, phentsize: int = 56, phnum: int = 0) -> bytes:
    import struct

    head = bytearray(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    struct.pack_into("<Q", head, 32, phoff)
    struct.pack_into("<HH", head, 54, phentsize, phnum)
    return bytes(head[:size])


@pytest.mark.parametrize("data, message", [
    (_elf64(size=52), "truncated ELF header"),
    (_elf64(size=20), "not an ELF executable"),  # struct.error before
    (_elf64(phoff=(1 << 64) - 1, phnum=1), "malformed ELF program headers"),  # OverflowError before
    (_elf64(phoff=64, phentsize=65535, phnum=4096), "malformed ELF program headers"),  # 268 MB read before
    (b"\x7fELF" + b"\xff" * 60, "not an ELF executable"),
], ids=["short-elf64", "short-file", "phoff-overflow", "huge-phdr-table", "bad-ident"])
def test_crafted_ldconfig_elf_is_one_line(tmp_path, nct_bin, data, message):
    ld = tmp_path / "ldconfig"
    ld.write_bytes(data)
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    cspec = tmp_path / "config.json"
    cspec.write_text(json.dumps({"root": {"path": str(root)}}))
    res = subprocess.run([nct_bin("nvidia-cdi-hook"), "update-ldcache", "--ldconfig-path", str(ld), "--folder",
                          "/usr/lib", "--container-spec", str(cspec)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nvidia-cdi-hook: ldconfig {ld}: {message}"), res.stderr


def test_nested_state_of_a_cdi_hook_is_one_line(nct_bin):
    res = subprocess.run([nct_bin("nvidia-cdi-hook"), "update-ldcache", "--folder", "/usr/lib"],
                         input='{"root": ' + "[" * 100000, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert res.stderr.splitlines() == ["nvidia-cdi-hook: container state on stdin: invalid JSON: nested deeper "
                                       "than 64 levels"]
