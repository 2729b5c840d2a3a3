"""Bounds on what nct accepts from containers, bundles, CDI spec dirs and command lines.

Everything a container (or whoever writes a spec dir) controls is bounded here, so that no
input costs more than linear time or memory, or reaches a recursion limit: one place for
the limits, each a named constant, each breach a one-line error naming the input and the
limit (docs/requests.md, docs/cdi.md). The numbers are far above anything real: a
64-GPU node with 7 MIG devices each has 512 devices; generated CDI specs are < 1 MiB and
< 10 levels deep; an OCI config.json is a few KiB and < 10 levels deep.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

# Bytes of one value of a variable nct reads from a container's environment (NVIDIA_*,
# CUDA_VERSION, swarm-resource variables).
MAX_ENV_VALUE = 64 * 1024
# Entries of one list nct parses from a request (devices, IMEX channels, CDI names in
# annotations or mounts; after splitting on commas, before removing duplicates).
MAX_LIST_ENTRIES = 4096
# Decimal digits of a number in a request (device index, IMEX channel, version component).
MAX_NUMBER_DIGITS = 18
# IMEX channels, two facts kept apart. Ids a request may name: upstream accepts ids below
# 2^20 (libnvidia-container's --imex-channel, the toolkit's imex CDI mode and volume mounts).
MAX_IMEX_CHANNEL = (1 << 20) - 1
# Channel nodes nct may create (--load-kmods) or plan without an existing node: the
# driver's default NVreg_ImexChannelCount, 2048 (ids 0-2047); a higher id never opens, and
# a container's NVIDIA_IMEX_CHANNELS cannot fill the host's /dev. Also `nct sim`'s bound.
IMEX_CHANNEL_COUNT = 2048
# Nesting of a JSON or YAML document (OCI config.json and state, CDI specs, caches).
MAX_NESTING_DEPTH = 64
# Bytes of one document read from a file nct does not own (config.json, a CDI spec).
MAX_DOCUMENT_BYTES = 16 << 20
# Nodes that the aliases of one YAML document stand for, expanded (a few bytes of `*a`
# can stand for a large subtree, each use again: the "billion laughs" way past the bytes
# bound; generated CDI specs use no aliases at all).
MAX_YAML_ALIAS_NODES = 1 << 20


def too_deep(doc: object, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether lists/dicts nest deeper than `limit` levels (iterative: any depth is fine
    to look at)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[object]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def without_gc(fn, *args):
    """fn(*args) with the cyclic garbage collector paused: parsing a document makes only
    acyclic containers, and the collector's passes over them grow with their number (a
    10 MB spec parsed ~20x slower than a 1 MB one with it, ~10x without)."""
    import gc

    if not gc.isenabled():
        return fn(*args)
    gc.disable()
    try:
        return fn(*args)
    finally:
        gc.enable()


def read_document(f, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """All of binary file `f`, or ValueError when it is longer than `limit` bytes (the
    caller names the file)."""
    data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than the limit of {limit} bytes")
    return data


def shown(value: str, limit: int = 80) -> str:
    """`value` for an error message: cut to `limit` characters (a request may be 64 KiB)."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def is_number(text: str) -> bool:
    """Plain ASCII decimal digits, at most MAX_NUMBER_DIGITS of them (int() on thousands
    of digits is slow, and past 4300 digits raises ValueError)."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_NUMBER_DIGITS
