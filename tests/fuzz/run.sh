#!/usr/bin/env bash
# run.sh -- the bounded fuzzing stage of CI: builds the libFuzzer harnesses of tests/fuzz under
# ASan/UBSan (clang, build-fuzz), replays every file of tests/fuzz/regressions/<harness>/ (inputs
# that once found a defect), then fuzzes each harness for SECONDS (default 15) starting from its
# seed corpus tests/fuzz/corpus/<harness>/ (every seed is run first), the harnesses side by side,
# one per core. New inputs go to a temporary directory, not into the tree. Exits non-zero on any
# finding; the input that found it is left in build-fuzz/fuzz-artifacts/. Usage: tests/fuzz/run.sh
# [SECONDS] [HARNESS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-15}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(json images png model memory solve request)

if [ ! -d build-fuzz ]; then
  CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized >/dev/null
fi
targets=()
for h in "${harnesses[@]}"; do targets+=("tests/fuzz/fuzz-$h"); done
ninja -C build-fuzz "${targets[@]}"

# per harness: the options of its runs (dictionary, largest input)
opts() {
  case $1 in
    json) echo "-dict=tests/fuzz/dict/json.dict -max_len=4096" ;;
    images) echo "-dict=tests/fuzz/dict/json.dict -max_len=8192" ;;
    png) echo "-max_len=4096" ;;
    model) echo "-max_len=70000" ;;
    memory | solve) echo "-dict=tests/fuzz/dict/json.dict -max_len=16384" ;;
    request) echo "-dict=tests/fuzz/dict/request.dict -max_len=16384 -timeout=300" ;;
  esac
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export OPENBLAS_NUM_THREADS=1
art=build-fuzz/fuzz-artifacts
mkdir -p "$art"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# one harness: its regression inputs replayed, then its corpus and SECONDS of fuzzing; the
# harnesses run as background jobs, as many at once as the machine has cores, each with its own
# log printed when all are done
fuzz_one() {
  local h=$1 bin=build-fuzz/tests/fuzz/fuzz-$1 n
  if [ -d "tests/fuzz/regressions/$h" ]; then
    n=$(find "tests/fuzz/regressions/$h" -type f | wc -l)
    echo "== fuzz-$h: replaying $n regression inputs"
    # (libFuzzer runs each file given as an argument once)
    find "tests/fuzz/regressions/$h" -type f -print0 | xargs -0 "$bin" -timeout=60 >"$work/$h.replay.log" 2>&1 \
      || { tail -50 "$work/$h.replay.log"; echo "fuzz-$h: a regression input fails again"; return 1; }
  fi
  echo "== fuzz-$h: the seed corpus, then ${secs} s of fuzzing"
  mkdir -p "$work/$h"
  # shellcheck disable=SC2046
  if ! "$bin" -max_total_time="$secs" -timeout=60 -rss_limit_mb=3072 -print_final_stats=1 \
      -artifact_prefix="$art/$h-" $(opts "$h") "$work/$h" "tests/fuzz/corpus/$h" >"$work/$h.log" 2>&1; then
    grep -v '^{' "$work/$h.log" | tail -60
    echo "fuzz-$h: finding; the input is in $art/"
    return 1
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb' "$work/$h.log" | tr -s ' ' | paste -sd ' ' -
}
jobs_max=$(nproc 2>/dev/null || echo 2)
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  ( if fuzz_one "$h" >"$work/$h.out" 2>&1; then echo 0; else echo 1; fi >"$work/$h.rc" ) &
done
wait
failed=0
for h in "${harnesses[@]}"; do
  cat "$work/$h.out"
  [ "$(cat "$work/$h.rc" 2>/dev/null)" = 0 ] || failed=1
done
[ "$failed" = 0 ] || exit 1
echo "fuzz: every harness ran clean"
