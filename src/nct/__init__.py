"""nct: a Python implementation of the NVIDIA Container Toolkit."""

__version__ = "0.1.0"
# The upstream toolkit release whose behaviour nct reproduces.
UPSTREAM_COMPAT_VERSION = "1.20.0"
OCI_SPEC_VERSION = "1.2.0"


def _code_stats() -> dict[str, tuple[int, ...] | None]:
    """The identities of the files whose code decides discovery's answer, taken here, before
    any of them is loaded: nct.driver.snapshot keys the node snapshot on them and checks
    they still hold, so that an nct replaced while this process ran (same version, new
    files) never files this process's answer under the new code's key."""
    import os

    here = os.path.dirname(__file__)
    out: dict[str, tuple[int, ...] | None] = {}
    for rel in CODE_FILES:
        path = os.path.join(here, rel)
        try:
            st = os.stat(path)
            out[path] = (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            out[path] = None
    return out


CODE_FILES = ("__init__.py", "hostcache.py", "record.py", "driver/catalogue.py", "driver/discover.py",
              "driver/elf.py", "driver/fsview.py", "driver/ldcache.py", "driver/libraries.py", "driver/model.py",
              "driver/rootpath.py", "driver/snapshot.py")
LOADED_CODE = _code_stats()
