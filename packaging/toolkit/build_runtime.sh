#!/usr/bin/env bash
# Slow path, run once per CPython version: build the toolkit's Python runtime from Debian's
# source of CPython inside a debootstrapped Debian 11 root (glibc 2.31), so nothing in it
# needs a glibc newer than 2.31, and write packaging/toolkit/prebuilt/<name>.tar.xz and its
# .sha256 (both committed).  Deterministic: fixed SOURCE_DATE_EPOCH, build path, tar order,
# mtimes and owners.  Needs root, debootstrap and network access to deb.debian.org.
#   usage: [PGO=0] [LTO=0] packaging/toolkit/build_runtime.sh   (default: PGO and LTO on)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYVER=3.11.2                       # Debian 12's python3.11
ORIG=python3.11_${PYVER}.orig.tar.gz
ORIG_SHA256=2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849  # from python3.11_3.11.2-6+deb12u6.dsc
MIRROR=${NCT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${NCT_CACHE:-/var/cache/nct}
SUITE=bullseye
ROOT="$CACHE/debootstrap/$SUITE-build"
NAME=cpython-${PYVER}-x86_64-glibc2.31
export SOURCE_DATE_EPOCH=1700000000 LC_ALL=C TZ=UTC

[ "$(uname -m)" = x86_64 ] || { echo "build_runtime.sh: only x86_64 is supported (see docs/toolkit.md)" >&2; exit 1; }
if [ ! -x "$ROOT/usr/bin/gcc" ]; then
    rm -rf "$ROOT.tmp"
    mkdir -p "$CACHE/debootstrap"
    debootstrap --variant=minbase --include=gcc,make,libc6-dev,libffi-dev,zlib1g-dev,xz-utils,patchelf \
        "$SUITE" "$ROOT.tmp" "$MIRROR" >/dev/null
    mv "$ROOT.tmp" "$ROOT"
fi
mkdir -p "$CACHE/src"
if ! echo "$ORIG_SHA256  $CACHE/src/$ORIG" | sha256sum -c --quiet 2>/dev/null; then
    curl -sSf -o "$CACHE/src/$ORIG.tmp" "$MIRROR/pool/main/p/python3.11/$ORIG"
    echo "$ORIG_SHA256  $CACHE/src/$ORIG.tmp" | sha256sum -c --quiet
    mv "$CACHE/src/$ORIG.tmp" "$CACHE/src/$ORIG"
fi

rm -rf "$ROOT/build" "$ROOT/out"
mkdir -p "$ROOT/build" "$ROOT/out"
tar -xzf "$CACHE/src/$ORIG" -C "$ROOT/build"
cp "$HERE/runtime_inner.sh" "$ROOT/build/inner.sh"
cp "$HERE/pgo_task.py" "$ROOT/build/pgo_task.py"
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH \
    LC_ALL=C TZ=UTC PYVER=$PYVER JOBS="${JOBS:-$(nproc)}" PGO="${PGO:-1}" LTO="${LTO:-1}" /bin/bash /build/inner.sh

mkdir -p "$HERE/prebuilt"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$ROOT/out" -cf - python | xz -T1 -9 > "$HERE/prebuilt/$NAME.tar.xz.tmp"
mv "$HERE/prebuilt/$NAME.tar.xz.tmp" "$HERE/prebuilt/$NAME.tar.xz"
(cd "$HERE/prebuilt" && sha256sum "$NAME.tar.xz" > "$NAME.tar.xz.sha256")
rm -rf "$ROOT/build" "$ROOT/out"
cat "$HERE/prebuilt/$NAME.tar.xz.sha256"
