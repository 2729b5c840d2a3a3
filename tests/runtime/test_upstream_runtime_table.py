"""Upstream's runtime expectations (its oci args, runtime-path and auto-mode tables), restated
as our own tables: the bundle and `create` in argv, which paths can be the low-level
runtime, and what `auto` resolves to."""

from __future__ import annotations

import os

import pytest

from nct.errors import ConfigError
from nct.runtime.argv import ArgvError, bundle_dir, is_create
from nct.runtime.lookup import RuntimeNotFound, find_runtime
from nct.runtime.modes import resolve_mode

ERROR = "error"

BUNDLE_ROWS = [
    ([], None),
    (["create"], None),
    (["--bundle"], ERROR),
    (["-b"], ERROR),
    (["--bundle", "/srv/b1"], "/srv/b1"),
    (["--not-bundle", "/srv/b1"], None),
    (["--"], None),
    (["-bundle", "/srv/b1"], "/srv/b1"),
    (["--bundle=/srv/b1"], "/srv/b1"),
    (["-b=/srv/b1"], "/srv/b1"),
    (["-b=/srv/=b1"], "/srv/=b1"),  # only the first = splits
    (["-b", "/srv/b1"], "/srv/b1"),
    (["create", "-b", "/srv/b1"], "/srv/b1"),
    (["-b", "create", "create"], "create"),
    (["-b=create", "create"], "create"),
    (["-b", "create"], "create"),
]


@pytest.mark.parametrize("argv, want", BUNDLE_ROWS)
def test_bundle_dir_table(argv, want):
    if want is ERROR:
        with pytest.raises(ArgvError):
            bundle_dir(argv)
    else:
        assert bundle_dir(argv) == want  # None: the current directory, as upstream's ""


CREATE_ROWS = [
    ([], False),
    (["create"], True),
    (["--bundle=create"], False),
    (["--bundle", "create"], False),
    (["-b", "create", "create"], True),
    (["-b=create", "create"], True),
    (["-b", "create"], False),
]


@pytest.mark.parametrize("argv, want", CREATE_ROWS)
def test_has_create_table(argv, want):
    assert is_create(argv) is want


@pytest.mark.parametrize("path, ok", [
    ("////an/invalid/path", False),
    ("/tmp", False),          # a directory
    ("/dev/null", False),     # not a regular file
    ("/bin/sh", True),
])
def test_runtime_path_table(path, ok):
    if ok:
        assert find_runtime([path]) == path
    else:
        with pytest.raises(RuntimeNotFound):
            find_runtime([path])


def test_runtime_path_needs_an_exec_bit(tmp_path):
    f = tmp_path / "runc"
    f.write_text("#!/bin/sh\n")
    os.chmod(f, 0o644)
    with pytest.raises(RuntimeNotFound):
        find_runtime([str(f)])
    os.chmod(f, 0o755)
    assert find_runtime(["/nonexistent/runc", str(f)]) == str(f)  # first that resolves


MODE_ROWS = [
    # mode, devices, tegra, expected
    ("legacy", ("0",), False, "legacy"),
    ("cdi", ("0",), True, "cdi"),
    ("auto", None, False, "jit-cdi"),       # upstream: legacy before jit-cdi became its default
    ("auto", None, True, "csv"),
    ("auto", ("nvidia.com/gpu=all",), False, "cdi"),
    ("auto", ("nvidia.com/gpu=all",), True, "cdi"),
    ("auto", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), False, "cdi"),
    ("auto", ("nvidia.com/gpu=0", "0"), False, "jit-cdi"),
    ("auto", ("nvidia.com/gpu=0", "0"), True, "csv"),
    ("auto", ("nvidia.com/gpu=0", "all"), False, "jit-cdi"),
    ("auto", (), False, "jit-cdi"),         # none: the driver only
    ("not-auto", ("0",), False, ERROR),     # upstream passes it on and fails later: "invalid mode"
]


@pytest.mark.parametrize("mode, devices, tegra, want", MODE_ROWS)
def test_resolve_mode_table(mode, devices, tegra, want):
    if want is ERROR:
        with pytest.raises(ConfigError, match="invalid mode"):
            resolve_mode(mode, devices, tegra=tegra)
    else:
        assert resolve_mode(mode, devices, tegra=tegra) == want


@pytest.mark.parametrize("mode", ["", "non-legacy", "Legacy"])
def test_invalid_modes_are_errors(mode):
    """Upstream's runtime factory: an empty or unknown mode fails `create`."""
    with pytest.raises(ConfigError, match="invalid mode"):
        resolve_mode(mode, ("0",))


def test_empty_runtimes_list_is_an_error():
    with pytest.raises(RuntimeNotFound, match="at least one runtime"):
        find_runtime([])
