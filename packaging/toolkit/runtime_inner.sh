#!/bin/bash
# Runs inside the Debian 11 build root (see build_runtime.sh): configure, build, install
# into /out/python, carry the two shared libraries it needs next to it with $ORIGIN
# RUNPATHs, trim what a toolkit never uses, byte-compile (unchecked-hash: no mtimes).
set -euo pipefail
cd /build/Python-$PYVER
P=/out/python
# A static libpython inside the binary (no --enable-shared): faster start-up, one file.
# PGO=1: profile-guided from the committed profile (/build/pgo-profile.tar: the .gcda files at
# the object paths of this same build directory, where -fprofile-use looks for them);
# PGO=train: build the instrumented interpreter, run pgo_task.py, keep only the .gcda files
# (/out/pgo-profile.tar) and stop.  LTO=1: link-time optimization (build_runtime.sh's default:
# with PGO they start as fast as Debian's own python3.11).
opt=()
[ "${PGO:-0}" != 0 ] && opt+=(--enable-optimizations)
[ "${LTO:-0}" = 1 ] && opt+=(--with-lto) || opt+=(--with-lto=no)
./configure --prefix=/nct-python --without-ensurepip --disable-test-modules "${opt[@]}" >/dev/null
if [ "${PGO:-0}" = train ]; then
    PYTHONHASHSEED=0 make -j"$JOBS" PROFILE_TASK="-s -S /build/pgo_task.py /build/nct-src" profile-run-stamp \
        >/dev/null 2>make.log || { tail -40 make.log; exit 1; }
    find . -name '*.gcda' | LC_ALL=C sort > /build/gcda.list
    [ -s /build/gcda.list ] || { echo "runtime_inner.sh: the training left no .gcda files" >&2; exit 1; }
    tar --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
        -cf /out/pgo-profile.tar --no-recursion -T /build/gcda.list
    echo "PGO profile: $(wc -l < /build/gcda.list) .gcda files, $(du -sh --apparent-size /out/pgo-profile.tar | cut -f1)"
    exit 0
fi
if [ "${PGO:-0}" = 1 ]; then
    tar -xf /build/pgo-profile.tar
    touch profile-run-stamp   # the profile is there: profile-opt goes straight to the -fprofile-use build
fi
PYTHONHASHSEED=0 make -j"$JOBS" >/dev/null 2>make.log || { tail -40 make.log; exit 1; }
make install DESTDIR=/out/tmp >/dev/null 2>>make.log
mv /out/tmp/nct-python "$P"
rm -rf /out/tmp
L=$P/lib/python3.11
rm -rf "$L/test" "$L/idlelib" "$L/tkinter" "$L/turtledemo" "$L/lib2to3" "$L/ensurepip" "$L/turtle.py" \
    "$L/pydoc_data" "$L/distutils" "$L/config-3.11-x86_64-linux-gnu" "$L/site-packages" \
    "$L/unittest/test" "$L/ctypes/test" "$L/sqlite3/test" "$L/tkinter" \
    "$P/include" "$P/share" "$P/lib/pkgconfig" "$P/lib/libpython3.11.a"
find "$P/bin" -mindepth 1 ! -name python3.11 -delete
ln -s python3.11 "$P/bin/python3"
find "$P" -name __pycache__ -prune -exec rm -rf {} +
# Shared libraries the extension modules need that a minimal host may lack: carry them.
for lib in libffi.so.7 libz.so.1; do
    cp -L /usr/lib/x86_64-linux-gnu/$lib "$P/lib/$lib"
done
strip --strip-unneeded "$P/bin/python3.11" "$L"/lib-dynload/*.so "$P"/lib/lib*.so.*
patchelf --set-rpath '$ORIGIN/../lib' "$P/bin/python3.11"
for so in "$L"/lib-dynload/*.so; do patchelf --set-rpath '$ORIGIN/../..' "$so"; done
# Same bytes every build: a fixed hash seed (set/frozenset constants are marshalled in hash
# order; -E is left off so PYTHONHASHSEED counts, the environment is env -i's), one process, and
# -B -f: modules compileall itself imports must not leave timestamp-based files behind.
PYTHONHASHSEED=0 "$P/bin/python3.11" -B -S -m compileall -f -q -j1 --invalidation-mode unchecked-hash "$L"
echo "Python $PYVER runtime: $(du -sh $P | cut -f1)"
