#!/bin/sh
# bench/run_write.sh -- owns the launcher that runs bench-write with --root set to this checkout (so the NumPy reference is found from any directory).
# usage: bench/run_write.sh [bench-write options]   (BUILD=dir picks the build directory, default <repo>/build)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
exec "$build/bench/bench-write" --root "$root" "$@"
