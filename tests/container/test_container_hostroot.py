"""apply_edits refuses a container root that is the host's / under another name ("//" passes
a normpath check: os.path.normpath("//") == "//"), a symlink to / or a bind mount of /. The
edits below would land in a host temp dir if applied, so "nothing done" is checked there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nct.container.apply import ApplyOptions, apply_edits
from nct.edits.model import ContainerEdits, SymlinkEdit
from nct.errors import ContainerError
from realparts import needs_root

pytestmark = needs_root


def _edits(tmp_path) -> tuple[ContainerEdits, str]:
    link = str(tmp_path / "made-by-apply")
    return ContainerEdits(symlinks=[SymlinkEdit(target="x", link=link)]), link


@pytest.mark.parametrize("rootfs", ["//", "//.", "/.//", "/tmp/.."])
def test_slash_by_another_name_refused(tmp_path, rootfs):
    edits, link = _edits(tmp_path)
    with pytest.raises(ContainerError, match="must be an absolute path other than /"):
        apply_edits(edits, rootfs, None, ApplyOptions())
    assert not os.path.lexists(link)


def test_symlink_to_slash_refused(tmp_path):
    os.symlink("/", tmp_path / "rootfs")
    edits, link = _edits(tmp_path)
    with pytest.raises(ContainerError, match="other than /"):
        apply_edits(edits, str(tmp_path / "rootfs"), None, ApplyOptions())
    assert not os.path.lexists(link)


def test_bind_mount_of_slash_refused(tmp_path):
    """In a private mount namespace (dies with the child): rootfs is a bind mount of /."""
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    link = str(tmp_path / "made-by-apply")
    code = (
        "import sys\n"
        "from nct.container.apply import ApplyOptions, apply_edits\n"
        "from nct.edits.model import ContainerEdits, SymlinkEdit\n"
        "from nct.errors import ContainerError\n"
        f"edits = ContainerEdits(symlinks=[SymlinkEdit(target='x', link={link!r})])\n"
        f"try:\n    apply_edits(edits, {str(rootfs)!r}, None, ApplyOptions())\n"
        "except ContainerError as e:\n    print(e); sys.exit(3)\n"
    )
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          'mount --bind / "$1" && exec "$2" -c "$3"', "sh", str(rootfs), sys.executable, code],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "other than /" in res.stdout
    assert not os.path.lexists(link)
