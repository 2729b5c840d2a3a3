"""The hook tests reuse the container tests' real parts (busybox rootfs, runc bundles)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "container"))

from realparts import busybox_template, host_gpu, rootfs, victim  # noqa: E402,F401 - pytest fixtures
