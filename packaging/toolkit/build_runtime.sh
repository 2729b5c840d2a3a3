#!/usr/bin/env bash
# Slow path, run once per CPython version: build the toolkit's Python runtime from Debian's
# source of CPython inside a debootstrapped Debian 11 root (glibc 2.31), so nothing in it
# needs a glibc newer than 2.31, and write packaging/toolkit/prebuilt/<name>.tar.xz and its
# .sha256 (both committed).  Deterministic: fixed SOURCE_DATE_EPOCH, build path, tar order,
# mtimes and owners, and the PGO profile is an input: PGO=train builds the instrumented
# interpreter, runs pgo_task.py (stdlib work and nct's hook and shim start-up) and writes the
# .gcda files it leaves to prebuilt/<name>-pgo-profile.tar.xz (+ .sha256, committed) instead of
# a runtime; the default build (PGO=1) compiles with -fprofile-use from that committed profile,
# so two builds give the same bytes.  Needs root, debootstrap and network access to deb.debian.org.
#   usage: [PGO=0|1|train] [LTO=0] packaging/toolkit/build_runtime.sh   (default: PGO=1 LTO=1)
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
PROFILE=cpython-${PYVER}-pgo-profile.tar.xz   # the .gcda files of a PGO=train run (not arch-neutral: x86_64)
PGO=${PGO:-1}
export SOURCE_DATE_EPOCH=1700000000 LC_ALL=C TZ=UTC

case "$PGO" in 0|1|train) ;; *) echo "build_runtime.sh: PGO must be 0, 1 or train, not '$PGO'" >&2; exit 1 ;; esac
[ "$PGO" != 1 ] || [ -f "$HERE/prebuilt/$PROFILE" ] || {
    echo "build_runtime.sh: no prebuilt/$PROFILE: run PGO=train first (or PGO=0)" >&2; exit 1; }
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
case "$PGO" in
train)  # what the training runs: nct's hot paths from this checkout, the default config.toml
    mkdir -p "$ROOT/build/nct-src"
    cp -r "$HERE/../../src/nct" "$ROOT/build/nct-src/nct"
    find "$ROOT/build/nct-src" -name __pycache__ -prune -exec rm -rf {} +
    cp "$HERE/../../config/config.toml" "$ROOT/build/nct-src/config.toml" ;;
1)
    (cd "$HERE/prebuilt" && sha256sum -c --quiet "$PROFILE.sha256")
    xz -dc "$HERE/prebuilt/$PROFILE" > "$ROOT/build/pgo-profile.tar" ;;
esac
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH \
    LC_ALL=C TZ=UTC PYVER=$PYVER JOBS="${JOBS:-$(nproc)}" PGO="$PGO" LTO="${LTO:-1}" /bin/bash /build/inner.sh

mkdir -p "$HERE/prebuilt"
if [ "$PGO" = train ]; then
    xz -T1 -9e < "$ROOT/out/pgo-profile.tar" > "$HERE/prebuilt/$PROFILE.tmp"
    mv "$HERE/prebuilt/$PROFILE.tmp" "$HERE/prebuilt/$PROFILE"
    (cd "$HERE/prebuilt" && sha256sum "$PROFILE" > "$PROFILE.sha256")
    rm -rf "$ROOT/build" "$ROOT/out"
    cat "$HERE/prebuilt/$PROFILE.sha256"
    exit 0
fi
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$ROOT/out" -cf - python | xz -T1 -9 > "$HERE/prebuilt/$NAME.tar.xz.tmp"
mv "$HERE/prebuilt/$NAME.tar.xz.tmp" "$HERE/prebuilt/$NAME.tar.xz"
(cd "$HERE/prebuilt" && sha256sum "$NAME.tar.xz" > "$NAME.tar.xz.sha256")
rm -rf "$ROOT/build" "$ROOT/out"
cat "$HERE/prebuilt/$NAME.tar.xz.sha256"
