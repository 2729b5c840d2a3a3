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


def _click_parse(args: list[str]):
    """(debug, [(hook, params)]) as the click front end parses one hook's argv; None where it
    refuses it, answers it itself (help, version, warnings) or it names nct-steps."""
    import warnings

    import click

    try:
        ctx = cdi_hook.make_context("nvidia-cdi-hook", list(args))
        with warnings.catch_warnings():  # protected_args: deprecated in click 8.2, needed before
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = ctx.protected_args + ctx.args
        if not rest:
            return None
        name, cmd, rargs = cdi_hook.resolve_command(ctx, rest)
        if name == "nct-steps":
            return None
        sctx = cmd.make_context(name, rargs, parent=ctx)
    except (click.exceptions.Exit, click.UsageError, SystemExit):
        return None
    params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sctx.params.items() if v is not None}
    return bool(ctx.params["debug"]) and not ctx.params["quiet"], [(name, params)]


def _fast(parsed) -> tuple | None:
    return parsed and (parsed[0], [(n, {k: v for k, v in o.items() if v is not None}) for n, o in parsed[1]])


# hostile-looking values: hook names, flags, `=`, empty, leading dashes, newlines
VALUES = ["", "x", "-", "--", "-x", "=", "a=b", "update-ldcache", "create-symlinks", "nct-steps", "--link", "/p",
          "a::/b", "-d", "--debug", "--quiet", "--help", "755", "--lin", "--link=", "--folder=-x", "noop", "a\nb"]


def test_fast_parser_agrees_with_click_on_random_argv(monkeypatch, capsys):
    """Differential: every argv the fast parser accepts, click parses to the same hook, values
    and debug flag (seeded random argv of hook names, flags, `--flag=value` forms, values
    that are hook names or flags)."""
    import random

    from nct.cli.cdi_hook import FLAGS

    for var in ("NVIDIA_CTK_DEBUG", "NVIDIA_CDI_DEBUG", "NVIDIA_CTK_QUIET", "NVIDIA_CDI_QUIET"):
        monkeypatch.delenv(var, raising=False)
    rng = random.Random(14)
    hooks = list(FLAGS)
    flags = sorted({f for v in FLAGS.values() for f in v} | {"--container-spec"})

    def token() -> str:
        r = rng.random()
        if r < .25:
            return rng.choice(hooks)
        if r < .55:
            return rng.choice(flags)
        if r < .7:
            return rng.choice(flags) + "=" + rng.choice(VALUES)
        return rng.choice(VALUES)

    accepted = 0
    for _ in range(4000):
        args = [rng.choice(["-d", "--quiet"])] * (rng.random() < .2) + [rng.choice(hooks)]
        args += [token() for _ in range(rng.randrange(6))]
        fast = _fast(parse_argv(args))
        if fast is None:
            continue
        accepted += 1
        assert _click_parse(args) == fast, args
    capsys.readouterr()
    assert accepted > 400  # the comparison did happen


def test_steps_hook_parses_to_the_hooks_it_replaces(capsys):
    """Rendering round trip with hostile-looking link targets, folders and compat roots: the
    nct-steps argv parses to exactly what click makes of each separate hook, or is refused
    whole (None: a value starting with '-'), never split differently (no value taken for a
    step or a flag)."""
    import random

    rng = random.Random(14)

    def value() -> str:
        return "".join(rng.choice(VALUES) for _ in range(rng.randint(1, 2)))

    compared = 0
    for _ in range(1500):
        edits = ContainerEdits(
            symlinks=[SymlinkEdit(target=value(), link=value()) for _ in range(rng.randrange(4))],
            ldconfig_folders=[value() for _ in range(rng.randrange(4))],
            proc_driver_gpus=["0"] if rng.random() < .5 else None,
            cuda_compat_dir=value() if rng.random() < .5 else None)
        opts = HookOptions(hook_path="/usr/bin/nvidia-cdi-hook", driver_version=rng.choice([None, "550.54.15", value()]),
                           ldconfig_path=rng.choice([None, value()]))
        single = derived_hooks(edits, opts)
        if len(single) < 2:
            continue
        (one,) = derived_hooks(edits, opts.replace(steps=True))
        fast = _fast(parse_argv(list(one.args[1:])))
        if fast is None:
            continue
        compared += 1
        want = [_click_parse(list(h.args[1:])) for h in single]
        assert [w[1][0] if w else None for w in want] == fast[1], one.args
    capsys.readouterr()
    assert compared > 100


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


def test_malformed_steps_message_is_one_bounded_line(rootfs):
    """The refused argv is quoted cut short and on one line, whatever its size or newlines."""
    res = run([HOOK, "nct-steps", "noop", "--bogus", *["x\ny" * 30000] * 4], state_for(rootfs))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-cdi-hook: nct-steps: ") and len(lines[0]) < 1000, \
        (len(lines), len(res.stderr))


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
