"""`nct-steps`: the one createContainer hook of nct's own jit-cdi specs, running several CDI
hooks in one process; and the click-free parsing of every well-formed hook invocation.
(Every hook test that uses hookforms also runs each of its hooks as an nct-steps step.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import nct
from nct.cdi.hooks import HookOptions, derived_hooks
from nct.cli.cdi_hook import parse_argv
from nct.cli.cdi_hook_click import cdi_hook
from nct.edits.model import ContainerEdits, SymlinkEdit
from nct.engines.bundle import WRAPPER
from realparts import build_lib, needs_gcc, needs_root
from test_cdihook_cli import CLEAN_ENV, CTK, HOOK, state_for

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def run(argv: list[str], state: dict | None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=json.dumps(state) if state is not None else "", capture_output=True,
                          text=True, env=env or CLEAN_ENV, timeout=60)


# ---- the fast parser takes exactly what click takes, with the same values ------------------
WELL_FORMED = [
    ["create-symlinks", "--link", "a::/b", "--link=c::/d"],
    ["update-ldcache", "--folder", "/x", "--folder", "/y", "--ldconfig-path", "/sbin/ldconfig.real"],
    ["update-ldcache"],
    ["enable-cuda-compat", "--host-driver-version=550.54.15"],
    ["enable-cuda-compat", "--host-cuda-version", "12.4", "--cuda-compat-container-root", "/opt/compat"],
    ["chmod", "--mode", "755", "--path", "/dev/dri"],
    ["disable-device-node-modification", "--container-spec", "/run/state.json"],
    ["update-application-profile"],
    ["-d", "noop"],
]


@pytest.mark.parametrize("args", WELL_FORMED, ids=lambda a: a[0] if a[0] != "-d" else "debug")
def test_fast_parser_matches_click(args):
    parsed = parse_argv(args)
    assert parsed is not None
    (name, fast), = parsed[1]
    ctx = cdi_hook.make_context("nvidia-cdi-hook", [], resilient_parsing=True)
    sub = cdi_hook.get_command(ctx, name)
    sctx = sub.make_context(name, list(args[args.index(name) + 1:]), parent=ctx)
    want = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sctx.params.items() if v is not None}
    assert {k: v for k, v in fast.items() if v is not None} == want


@pytest.mark.parametrize("args", [
    [], ["--help"], ["--version"], ["create-symlinks", "--help"], ["create-symlinks", "--future", "x"],
    ["create-symlinks", "extra"], ["create-symlinks", "--link"], ["future-hook"], ["chmod", "--path", "/x"],
    ["update-ldcache", "--ldconfig-path", "/a", "--ldconfig-path", "/b"], ["noop", "noop"],
    ["nct-steps"], ["nct-steps", "noop", "nct-steps", "noop"], ["nct-steps", "noop", "--bogus", "x"],
])
def test_fast_parser_leaves_the_rest_to_click(args):
    """Help, versions, unknown hooks and flags, malformed values: the click front end answers
    (and owns upstream's messages; tests/hooks/test_cdihook_cli.py checks them)."""
    assert parse_argv(args) is None


# ---- running the steps -------------------------------------------------------------------
@needs_root
@needs_gcc
@pytest.mark.parametrize("prog", ["nvidia-cdi-hook", "nvidia-ctk", "nvidia-ctk --debug (click)"])
def test_steps_run_in_order_in_one_process(rootfs, prog):
    """Links, then the ld cache, in one hook process: through the console script, `nvidia-ctk
    hook`, and the click front end (a global nvidia-ctk flag)."""
    build_lib(os.path.join(rootfs, "opt/nv/lib"), "libnvfake.so.550.54.15", "libnvfake.so.1")
    steps = ["nct-steps", "create-symlinks", "--link", "libnvfake.so.1::/opt/nv/lib/libnvfake.so",
             "update-ldcache", "--folder", "/opt/nv/lib", "disable-device-node-modification"]
    argv = {"nvidia-cdi-hook": [HOOK, *steps], "nvidia-ctk": [CTK, "hook", *steps],
            "nvidia-ctk --debug (click)": [CTK, "--debug", "hook", *steps]}[prog]
    res = run(argv, state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert os.readlink(os.path.join(rootfs, "opt/nv/lib/libnvfake.so")) == "libnvfake.so.1"
    cache = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                           capture_output=True, text=True).stdout
    assert "libnvfake.so.1 (libc6,x86-64) => /opt/nv/lib/libnvfake.so.1" in cache


def test_steps_stop_at_the_first_failure(rootfs):
    """A failing step fails the hook (one line naming it, exit 1); later steps do not run."""
    os.makedirs(os.path.join(rootfs, "usr/lib/x86_64-linux-gnu/libcuda.so"))  # a directory in the way
    res = run([HOOK, "nct-steps", "create-symlinks", "--link", f"libcuda.so.1::{LIBDIR}/libcuda.so",
               "update-ldcache", "--folder", LIBDIR], state_for(rootfs))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-cdi-hook: symlink") and "directory" in lines[0], res.stderr
    assert not os.path.exists(os.path.join(rootfs, "etc/ld.so.cache"))
    assert not os.path.exists(os.path.join(rootfs, "etc/ld.so.conf.d"))


@pytest.mark.parametrize("args", [["create-symlinks", "--future", "x"], ["nct-steps", "noop"], ["future-hook"]])
def test_malformed_steps_are_one_line_errors(rootfs, args):
    """Unlike a single unknown hook (a warning: specs from newer toolkits), nct-steps comes
    only from nct's own runtime: anything it does not know is an error, not a skipped step."""
    res = run([HOOK, "nct-steps", *args], state_for(rootfs))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-cdi-hook: nct-steps: "), res.stderr


# ---- what the spec carries ---------------------------------------------------------------
def _edits() -> ContainerEdits:
    return ContainerEdits(symlinks=[SymlinkEdit(target="libcuda.so.1", link="/usr/lib/libcuda.so")],
                          ldconfig_folders=["/usr/lib"], proc_driver_gpus=["0"])


def test_steps_hook_carries_the_same_hooks_in_order():
    opts = HookOptions(hook_path="/usr/bin/nvidia-ctk", driver_version="550.54.15")
    single = derived_hooks(_edits(), opts)
    assert [h.args[2] for h in single] == ["create-symlinks", "enable-cuda-compat", "update-ldcache",
                                           "disable-device-node-modification"]
    (one,) = derived_hooks(_edits(), opts.replace(steps=True))
    assert one.path == "/usr/bin/nvidia-ctk" and one.hook_name == "createContainer" and one.env == single[0].env
    assert list(one.args) == ["nvidia-ctk", "hook", "nct-steps"] + [a for h in single for a in h.args[2:]]
    # disabled hooks stay out; a lone hook stays as it is
    (ld,) = derived_hooks(_edits(), opts.replace(steps=True, disabled=frozenset(
        {"create-symlinks", "enable-cuda-compat", "disable-device-node-modification"})))
    assert list(ld.args) == ["nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib"]


# ---- start-up imports ----------------------------------------------------------------------
HEAVY = {"click", "dataclasses", "typing", "inspect", "ast", "yaml", "subprocess", "logging", "tempfile",
         "tomllib", "json", "re", "enum", "signal", "functools", "nct.cdi", "nct.oci", "nct.engines",
         "nct.driver.discover", "nct.driver.nvml", "nct.driver.elf", "nct.edits", "nct.runtime"}


@needs_root
@needs_gcc
@pytest.mark.parametrize("name, module", [("nvidia-ctk", "nct.cli.ctk"), ("nvidia-cdi-hook", "nct.cli.cdi_hook")])
def test_hook_start_up_imports(rootfs, tmp_path, name, module):
    """The installed hook (`python -IS` launcher, as `nct install` writes it) runs the
    nct-steps hook of a jit-cdi spec without importing click or anything in HEAVY: checked
    with -X importtime, not with timings."""
    build_lib(os.path.join(rootfs, LIBDIR.lstrip("/")), "libnvfake.so.550.54.15", "libnvfake.so.1")
    launcher = tmp_path / name
    launcher.write_text(WRAPPER.format(python=sys.executable, name=name, lib=str(Path(nct.__file__).parents[1]),
                                       env=f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n",
                                       module=module, func="main"))
    prefix = ["hook"] if name == "nvidia-ctk" else []
    args = [*prefix, "nct-steps", "create-symlinks", "--link", f"libnvfake.so.1::{LIBDIR}/libnvfake.so",
            "enable-cuda-compat", "--host-driver-version=550.54.15", "update-ldcache", "--folder", LIBDIR,
            "disable-device-node-modification"]
    res = run([sys.executable, "-X", "importtime", "-I", "-S", str(launcher), *args], state_for(rootfs))
    assert res.returncode == 0, res.stderr[-2000:]
    assert os.path.exists(os.path.join(rootfs, "etc/ld.so.cache"))
    mods = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "nct.container.ldconfig" in mods
    heavy = sorted(m for m in mods if m in HEAVY or any(m.startswith(h + ".") for h in HEAVY))
    assert not heavy, heavy
