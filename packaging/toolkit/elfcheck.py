#!/usr/bin/env python3
"""List every ELF file under DIR that needs a glibc symbol version newer than 2.31 (the
toolkit's baseline: Debian 11, Ubuntu 20.04); exit 1 if there is one.
    python3 elfcheck.py DIR [--max 2.31]
Uses pyelftools (bundled in the toolkit): reads each file's version-needs (.gnu.version_r)."""

from __future__ import annotations

import os
import sys

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection


def glibc_needs(path: str) -> list[tuple[int, ...]]:
    """The GLIBC_x.y versions the ELF file at `path` needs (empty for static files)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        needs = []
        for sec in elf.iter_sections():
            if isinstance(sec, GNUVerNeedSection):
                for _, auxes in sec.iter_versions():
                    for aux in auxes:
                        if aux.name.startswith("GLIBC_") and aux.name[6:7].isdigit():
                            needs.append(tuple(int(x) for x in aux.name[6:].split(".")))
        return needs


def elf_files(top: str):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def check(top: str, limit: tuple[int, ...] = (2, 31)) -> tuple[int, list[str]]:
    """(number of ELF files, lines naming those that need more than `limit`)."""
    count, bad = 0, []
    for path in elf_files(top):
        count += 1
        newest = max(glibc_needs(path), default=None)
        if newest is not None and newest > limit:
            bad.append(f"{path}: needs GLIBC_{'.'.join(map(str, newest))}")
    return count, bad


def main() -> int:
    args = sys.argv[1:]
    limit = (2, 31)
    if "--max" in args:
        i = args.index("--max")
        limit = tuple(int(x) for x in args[i + 1].split("."))
        del args[i:i + 2]
    if len(args) != 1:
        print("usage: elfcheck.py DIR [--max 2.31]", file=sys.stderr)
        return 2
    count, bad = check(args[0], limit)
    for line in bad:
        print(line, file=sys.stderr)
    print(f"elfcheck: {count} ELF files, {len(bad)} need glibc > {'.'.join(map(str, limit))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
