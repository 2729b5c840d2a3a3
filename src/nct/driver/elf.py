"""ELF checks for driver libraries (pyelftools): class, machine, SONAME, DT_NEEDED.

A library found through ld.so.cache is only trusted after its own header agrees: a 32-bit
or foreign-architecture file must never land in the 64-bit set, and a file whose SONAME
does not belong to the library name is someone else's file.
"""

from __future__ import annotations

from nct.driver import fsview
from nct.driver.model import native_machine
from nct.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from nct.hostcache import ElfCache

# uname -m -> (pyelftools e_machine name of native 64-bit objects, of 32-bit compat objects)
MACHINES: dict[str, tuple[str, str | None]] = {
    "x86_64": ("EM_X86_64", "EM_386"),
    "aarch64": ("EM_AARCH64", None),
    "ppc64le": ("EM_PPC64", None),
}


class ElfInfo(Record):
    """elf_class 32 or 64; machine the pyelftools name ("EM_X86_64"); elf_type "ET_DYN",
    "ET_EXEC", ..."""

    elf_class: int
    machine: str
    soname: str | None
    needed: tuple[str, ...]
    elf_type: str


class NotElf(Exception):
    """The file is not a readable ELF object; str() is the reason."""


def read_elf(path: str, opened=None) -> ElfInfo:
    """Header facts of an ELF file (`opened`: that file, already open in binary mode, and
    closed here); raises NotElf with a short reason otherwise."""
    from elftools.common.exceptions import ELFError  # lazy: hot paths never import pyelftools
    from elftools.elf.elffile import ELFFile

    try:
        with (opened or fsview.open_binary(path)[0]) as f:
            if f.read(4) != b"\x7fELF":
                raise NotElf("not an ELF file")
            f.seek(0)
            elf = ELFFile(f)
            soname, needed = None, []
            # The PT_DYNAMIC segment, not the section table: the loader only looks there,
            # and parsing a few program headers is far cheaper than every section header.
            for segment in elf.iter_segments():
                if segment["p_type"] == "PT_DYNAMIC":
                    for tag in segment.iter_tags():  # type: ignore[attr-defined]  # a DynamicSegment
                        if tag.entry.d_tag == "DT_SONAME":
                            soname = tag.soname
                        elif tag.entry.d_tag == "DT_NEEDED":
                            needed.append(tag.needed)
                    break
            return ElfInfo(elf.elfclass, str(elf["e_machine"]), soname, tuple(needed), str(elf["e_type"]))
    except NotElf:
        raise
    except OSError as e:
        fsview.read_failed(path, e)
        raise NotElf(f"unreadable: {e.strerror or e}") from None
    except (ELFError, ValueError, KeyError, IndexError, AssertionError, EOFError, UnicodeDecodeError) as e:
        raise NotElf(f"truncated or corrupt ELF: {e}") from None
    except Exception as e:  # pyelftools raises assorted errors on malformed files
        raise NotElf(f"corrupt ELF: {type(e).__name__}") from None


def read_elf_cached(path: str, cache: "ElfCache | None") -> ElfInfo:
    """read_elf() through a host-side result cache keyed by the file's identity."""
    if cache is None:
        return read_elf(path)
    try:
        f, st = fsview.open_binary(path)  # the key is the identity of exactly the file that is read
    except OSError as e:
        raise NotElf(f"unreadable: {e.strerror or e}") from None
    key = cache.key(path, st)
    hit = cache.get(key)
    # The cache is a file on disk: an entry of any other shape is a miss, never an error.
    if isinstance(hit, list) and len(hit) == 5:
        if hit[0] == "!":
            if isinstance(hit[1], str):
                f.close()
                raise NotElf(hit[1])
        elif (type(hit[0]) is int and hit[0] in (32, 64) and isinstance(hit[1], str)
              and (hit[2] is None or isinstance(hit[2], str)) and isinstance(hit[3], list)
              and all(isinstance(n, str) for n in hit[3]) and isinstance(hit[4], str)):
            f.close()
            return ElfInfo(hit[0], hit[1], hit[2], tuple(hit[3]), hit[4])
    try:
        info = read_elf(path, f)
    except NotElf as e:
        cache.put(key, ["!", str(e), None, [], ""])
        raise
    cache.put(key, [info.elf_class, info.machine, info.soname, list(info.needed), info.elf_type])
    return info


def check_library(path: str, name: str, *, compat32: bool, machine: str | None = None,
                  cache: "ElfCache | None" = None) -> tuple[ElfInfo | None, str]:
    """Check that `path` is a shared library `name` for the wanted ABI.

    Returns (info, "") when acceptable, else (None, reason). `name` is the catalogue name
    (libcuda.so); its SONAME must be that name plus a version (libcuda.so.1).
    """
    native, bits32 = MACHINES.get(machine or native_machine(), (None, None))
    try:
        info = read_elf_cached(path, cache)
    except NotElf as e:
        return None, str(e)
    want_class, want_machine = (32, bits32) if compat32 else (64, native)
    if want_machine is None:
        return None, "no 32-bit ABI on this architecture" if compat32 else "unknown native architecture"
    if info.elf_class != want_class or info.machine != want_machine:
        return None, f"wrong architecture (ELF{info.elf_class} {info.machine}, want ELF{want_class} {want_machine})"
    if info.elf_type != "ET_DYN":
        return None, f"not a shared object ({info.elf_type})"
    if not info.soname:
        return None, "no SONAME"
    if info.soname != name and not info.soname.startswith(name + "."):
        return None, f"SONAME {info.soname} does not belong to {name}"
    return info, ""
