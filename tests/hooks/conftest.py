"""The hook tests reuse the container tests' real parts (busybox rootfs, runc bundles)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "container"))

from realparts import busybox_template, host_gpu, rootfs, victim  # noqa: E402,F401 - pytest fixtures

import pytest  # noqa: E402

import hookforms  # noqa: E402


@pytest.fixture(params=hookforms.FORMS)
def hook_form(request):
    """Run the test's hooks alone, then as steps of one `nct-steps` hook (hookforms)."""
    hookforms.FORM[0] = request.param
    yield request.param
    hookforms.FORM[0] = "single"
