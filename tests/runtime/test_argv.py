"""argv parsing: which calls are `create`, where the bundle is, logging flags."""

import pytest

from nct.runtime.argv import ArgvError, bundle_dir, has_version_flag, is_create, log_args


@pytest.mark.parametrize("args, expected", [
    (["create", "id"], True),
    (["create", "--bundle", "/b", "id"], True),
    (["--root", "/run/runc", "--log", "/l.json", "--log-format", "json", "create", "--bundle", "/b", "id"], True),
    (["--root=/x", "--log=/y", "--log-format=json", "--systemd-cgroup", "create", "-b", "/b", "id"], True),
    (["--debug", "create", "id"], True),
    (["state", "id"], False),
    (["start", "id"], False),
    (["kill", "id", "KILL"], False),
    (["delete", "--force", "id"], False),
    (["--root", "/x", "delete", "create"], False),  # a container called "create"
    (["start", "create"], False),
    (["run", "--bundle", "create", "id"], False),
    (["--bundle", "create", "state"], False),  # `create` as the value of --bundle
    (["-b", "create", "state"], False),
    (["--log", "create", "state", "id"], False),  # `create` as the value of --log
    (["--root", "create", "create", "id"], True),
    ([], False),
    # unknown global flag with a separate value: fall back to the literal scan
    (["--weird-flag", "value", "create", "--bundle", "/b", "id"], True),
    (["--weird-flag", "value", "--bundle", "create", "id"], False),
    (["--weird-flag", "value", "state", "id"], False),
])
def test_is_create(args, expected):
    assert is_create(args) is expected


@pytest.mark.parametrize("args, expected", [
    (["create", "id"], None),
    (["create", "--bundle", "/a", "id"], "/a"),
    (["create", "--bundle=/a", "id"], "/a"),
    (["create", "-b", "/a", "id"], "/a"),
    (["create", "-b=/a", "id"], "/a"),
    (["create", "-bundle", "/a", "id"], "/a"),
    (["create", "--b=/a", "id"], "/a"),
    (["create", "--bundle", "/a", "-b", "/b", "id"], "/b"),  # last wins
    (["create", "-b=/a", "--bundle=/c", "id"], "/c"),
    (["create", "--bundle", "create", "id"], "create"),
    (["--bundles", "/x", "create", "id"], None),  # not the bundle flag
])
def test_bundle_dir(args, expected):
    assert bundle_dir(args) == expected


@pytest.mark.parametrize("args", [["create", "--bundle"], ["create", "id", "-b"]])
def test_bundle_flag_without_value_is_an_error(args):
    with pytest.raises(ArgvError, match="requires an argument"):
        bundle_dir(args)


@pytest.mark.parametrize("args, expected", [
    (["--version"], True), (["-version"], True), (["---version"], True), (["state", "--version"], True),
    (["-v"], False), (["version"], False), (["--versions"], False), (["state", "id"], False),
])
def test_version_flag(args, expected):
    assert has_version_flag(args) is expected


def test_log_args_separate_and_joined_values():
    la = log_args(["--root", "/r", "--log", "/l.json", "--log-format", "json", "--debug", "create", "id"])
    assert (la.file, la.format, la.debug, la.version) == ("/l.json", "json", True, False)
    la = log_args(["--log=/a", "-log-format=text", "state"])
    assert (la.file, la.format, la.debug) == ("/a", "text", False)
    assert log_args(["--version"]).version
    assert log_args(["--log"]).file == ""  # no value: ignored like upstream
