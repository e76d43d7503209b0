#!/usr/bin/env bash
# install-deps.sh -- installs, from Debian bookworm's archive, everything vbmem builds, tests and runs with.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential meson ninja-build pkg-config clang-format \
  libopenblas-dev liblapacke-dev libjansson-dev check \
  valgrind python3 python3-numpy python3-torch dataset-fashion-mnist \
  libmicrohttpd-dev nettle-dev libpng-dev python3-jsonschema python3-yaml curl \
  libsqlite3-dev sqlite3 redis-server libhiredis-dev nginx-light \
  python3-pytest python3-venv python3-pip python3-setuptools python3-wheel python3-pil \
  chromium clang libclang-rt-14-dev >/dev/null
# (redis-server also runs Redis Sentinel, `redis-server CONF --sentinel`: the failover tests' sentinels)
# TLS: GnuTLS headers (vbmemd checks its certificate with GnuTLS; libmicrohttpd serves TLS through it)
# and the openssl command line (the tests make a throwaway self-signed certificate with it).
$SUDO apt-get install -y -qq --no-install-recommends libgnutls28-dev openssl >/dev/null
# oneDNN: the networks' path on CPUs without AVX-512F (src/nets/onednn.c); a build without it keeps
# the AVX-512 engine and the OpenBLAS path
$SUDO apt-get install -y -qq --no-install-recommends libdnnl-dev >/dev/null
# Node.js and npm for the browser test (tests/browser): Debian's, unless a node and an npm are
# already on PATH (a newer Node.js from elsewhere is kept).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# wrk (closed-loop HTTP load: bench/overload.sh, slowloris, soak and their short versions in
# tests/run-all.sh) and matplotlib (the benchmarks' pictures: the soak's RSS, bench/scale.py --plot,
# bench/online_plot.py, the trainer's learning curves: train/plot_runs.py, the research pages'
# figures: research/)
$SUDO apt-get install -y -qq --no-install-recommends wrk python3-matplotlib >/dev/null
echo "install-deps: done"
