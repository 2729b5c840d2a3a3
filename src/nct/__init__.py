"""nct: a Python implementation of the NVIDIA Container Toolkit."""

__version__ = "0.1.0"
# The upstream toolkit release whose behaviour nct reproduces.
UPSTREAM_COMPAT_VERSION = "1.20.0"
OCI_SPEC_VERSION = "1.2.0"
