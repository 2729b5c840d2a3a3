"""Upstream's create-symlinks expectations (its cdi-hook tables), restated as our own table,
run through the real nvidia-cdi-hook on real directories: links are resolved inside the
container root, never through the host's view of a symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hookforms import hook_argv  # noqa: E402

pytestmark = pytest.mark.usefixtures("hook_form")  # alone and as an nct-steps step
HOOK = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")


def make_fs(root: str, entries: list[tuple[str, str | None]]) -> None:
    os.makedirs(root, exist_ok=True)
    for path, target in entries:
        full = os.path.join(root, path.lstrip("/"))
        if target is None:
            os.makedirs(full, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.symlink(target, full)


def create_link(tmp_path, entries, target: str, link: str, host_entries=()) -> tuple[str, str]:
    host, root = str(tmp_path / "host-root"), str(tmp_path / "bundle" / "rootfs")
    make_fs(host, list(host_entries))
    make_fs(root, entries)
    (tmp_path / "bundle" / "config.json").write_text(json.dumps({"ociVersion": "1.2.0", "root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.2.0", "id": "c", "status": "creating", "pid": os.getpid(),
                        "bundle": str(tmp_path / "bundle")})
    res = subprocess.run(hook_argv([HOOK, "create-symlinks", "--link", f"{target}::{link}"]), input=state,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert res.returncode == 0, res.stderr
    return host, root


@pytest.mark.parametrize("entries, target, link, made_at", [
    ([("/lib/foo", "/")], "libfoo.so.1", "/lib/foo/libfoo.so", "/libfoo.so"),          # / is the root
    ([("/lib/foo", "/")], "../libfoo.so.1", "/lib/foo/libfoo.so", "/libfoo.so"),
    ([("/lib/foo", "/")], "/a-path-in-container/foo/libfoo.so.1", "/lib/foo/libfoo.so", "/libfoo.so"),
    ([("/lib", None)], "libfoo.so.1", "/lib/libfoo.so", "/lib/libfoo.so"),
    ([("/lib", None)], "/lib/libfoo.so.1", "/lib/libfoo.so", "/lib/libfoo.so"),
    ([], "libfoo.so.1", "/usr/lib/deep/libfoo.so", "/usr/lib/deep/libfoo.so"),       # parents made
])
def test_create_link_table(tmp_path, entries, target, link, made_at):
    _, root = create_link(tmp_path, entries, target, link)
    assert os.readlink(os.path.join(root, made_at.lstrip("/"))) == target
    if target.startswith("/"):  # the target itself is not created
        assert not os.path.lexists(os.path.join(root, target.lstrip("/")))


@pytest.mark.parametrize("entries, keep_dir", [
    ([("/lib/libfoo.so", "libfoo.so.1")], None),                                   # already right
    ([("/lib/libfoo.so", "different-target"), ("/different-target", None)], "/different-target"),  # replaced
])
def test_existing_link_table(tmp_path, entries, keep_dir):
    _, root = create_link(tmp_path, entries, "libfoo.so.1", "/lib/libfoo.so")
    assert os.readlink(os.path.join(root, "lib/libfoo.so")) == "libfoo.so.1"
    if keep_dir:
        assert os.path.isdir(os.path.join(root, keep_dir.lstrip("/")))


def test_link_through_an_absolute_host_path_stays_in_the_root(tmp_path):
    """/lib/foo -> <host dir>: inside the container that is <root>/<host dir>, so the link is
    made there, and the host dir of that name is left alone."""
    host = str(tmp_path / "host-root")
    _, root = create_link(tmp_path, [("/lib", None), ("/lib/foo", host)], "../libfoo.so.1", "/lib/foo/libfoo.so",
                          host_entries=[("libfoo.so", None)])
    assert os.readlink(os.path.join(root, host.lstrip("/"), "libfoo.so")) == "../libfoo.so.1"
    assert os.path.isdir(os.path.join(host, "libfoo.so")) and not os.path.islink(os.path.join(host, "libfoo.so"))
