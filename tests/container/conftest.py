"""Fixtures for container tests; the helpers live in realparts.py (a unique module name, so
test modules can import them whatever other conftest files are loaded)."""

from realparts import busybox_template, host_gpu, rootfs, victim  # noqa: F401 - pytest fixtures
