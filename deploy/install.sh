#!/usr/bin/env bash
# install.sh -- configure, build and install vbmem (vbmemd, vbmem-solve, libvbmem.so, the header and the
# bundled models) into a prefix; used by deploy/Dockerfile and by tests/deploy/check.sh.
#   deploy/install.sh PREFIX [BUILDDIR]      (BUILDDIR defaults to build-inst; DESTDIR=... stages)
# The installed executables find libvbmem.so through their RUNPATH PREFIX/LIBDIR and the models in
# PREFIX/share/vbmem/models (vbmemd prefers that directory when it runs from PREFIX/bin), so the
# prefix given here is where the files must end up (DESTDIR only stages them for packaging).
# A BUILDDIR configured earlier is reused (its prefix set to PREFIX, release); only what the
# installation needs is built (not the tests or benchmarks).
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 PREFIX [BUILDDIR]" >&2; exit 2; }
prefix=$1
case $prefix in /*) ;; *) echo "install.sh: PREFIX must be absolute: $prefix" >&2; exit 2 ;; esac
src=$(cd "$(dirname "$0")/.." && pwd)
builddir=${2:-$src/build-inst}
if [ -f "$builddir/build.ninja" ]; then
  meson configure "$builddir" -Dprefix="$prefix" -Dbuildtype=release >/dev/null
else
  meson setup "$builddir" "$src" --prefix="$prefix" --buildtype=release >/dev/null
fi
targets=(vbmemd)
[ -f "$src/src/tools/vbmem_solve.c" ] && targets+=(vbmem-solve)
ninja -C "$builddir" "${targets[@]}" >/dev/null
meson install -C "$builddir" --no-rebuild --quiet ${DESTDIR:+--destdir "$DESTDIR"}
