"""Reading and rewriting a bundle's config.json.

Reads are strict by default, as upstream's decoder is: a top-level field the OCI
runtime-spec does not define is an error unless `features.allow-unknown-oci-spec-fields`;
when allowed, unknown fields are kept as they are. Writes are atomic (temp file in the
bundle, fsync, rename) and keep the original file's mode and owner, so a failed create
never leaves a half-written spec behind.
"""

from __future__ import annotations

import json
import os
import tempfile

from nct.errors import SpecError

# Top-level properties of config-schema.json (runtime-spec 1.2).
OCI_TOP_LEVEL = frozenset({
    "ociVersion", "hooks", "annotations", "hostname", "domainname", "mounts", "root",
    "process", "linux", "solaris", "windows", "vm", "zos", "freebsd",
})


def read_spec(path: str, *, strict: bool = True) -> dict:
    """Load config.json; SpecError naming the file on any problem."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise SpecError(f"{path}: OCI specification not found") from None
    except OSError as e:
        raise SpecError(f"{path}: cannot read OCI specification: {e.strerror}") from None
    try:
        spec = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"{path}: OCI specification must be a JSON object")
    if strict:
        unknown = sorted(k for k in spec if k not in OCI_TOP_LEVEL)
        if unknown:
            raise SpecError(
                f"{path}: unknown field {unknown[0]!r} in OCI specification "
                "(set features.allow-unknown-oci-spec-fields = true to allow it)"
            )
    for key, kind in (("process", dict), ("hooks", dict), ("annotations", dict), ("mounts", list),
                      ("linux", dict), ("root", dict)):
        if key in spec and spec[key] is not None and not isinstance(spec[key], kind):
            raise SpecError(f"{path}: {key} must be a JSON {'object' if kind is dict else 'array'}")
    return spec


def write_spec(path: str, spec: dict) -> None:
    """Replace path with compact JSON atomically; the original survives any failure."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(path)
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except OSError:
        mode, owner = 0o644, None
    data = json.dumps(spec, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".config.json.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if owner is not None and owner != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(f.fileno(), *owner)
                except OSError:
                    pass
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise SpecError(f"{path}: cannot write OCI specification: {e.strerror}") from None
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
