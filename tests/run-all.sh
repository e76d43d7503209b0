#!/usr/bin/env bash
# run-all.sh -- the whole test suite: release build + Check tests (and the web page in headless
# Chromium), an ASan/UBSan build of the same
# tests, a ThreadSanitizer build of the threaded ones, and the tests under valgrind --leak-check=full.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1   # deterministic, and keeps valgrind fast

# each stage prints its title and, when the next starts, how long it took; the table at the end
# says where CI's time goes
stage_names=()
stage_secs=()
stage_t0=$SECONDS
stage() {
  if [ "${#stage_names[@]}" -gt 0 ]; then stage_secs+=($((SECONDS - stage_t0))); fi
  stage_names+=("$1")
  stage_t0=$SECONDS
  echo "== $1 =="
}
stage_table() {
  stage_secs+=($((SECONDS - stage_t0)))
  echo "== time per stage (seconds) =="
  for i in "${!stage_names[@]}"; do printf '%6d  %s\n' "${stage_secs[$i]}" "${stage_names[$i]:0:90}"; done
  printf '%6d  in all\n' "$SECONDS"
}

# A pool of background jobs for the single-threaded runs (valgrind, daemons under valgrind, fuzz
# harnesses), as many at once as the machine has cores. pool_run NAME CMD... starts CMD with its
# output in build/pool/NAME.log; pool_wait waits for every job, prints each one's log in the
# order they started with its status and time, and fails the run if any job failed.
pool_max=$(nproc 2>/dev/null || echo 2)
[ "$pool_max" -ge 2 ] || pool_max=2
pool_names=()
pool_run() {
  local name=$1
  shift
  mkdir -p build/pool
  rm -f "build/pool/$name.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$pool_max" ]; do wait -n || true; done
  pool_names+=("$name")
  (
    t0=$SECONDS
    if "$@" >"build/pool/$name.log" 2>&1; then rc=0; else rc=$?; fi
    echo "$rc $((SECONDS - t0))" >"build/pool/$name.rc"
  ) &
}
pool_wait() {
  local name rc secs failed=0
  wait
  for name in "${pool_names[@]}"; do
    rc=1 secs=?
    [ -f "build/pool/$name.rc" ] && read -r rc secs <"build/pool/$name.rc"
    echo "-- $name: exit $rc, ${secs} s"
    cat "build/pool/$name.log"
    [ "$rc" = 0 ] || { echo "FAILED: $name (exit $rc)"; failed=1; }
  done
  pool_names=()
  [ "$failed" = 0 ] || exit 1
}

stage "C style (.clang-format: every tracked .c and .h file)"
bash tests/format-check.sh

stage "build (debugoptimized, -Werror)"
[ -d build ] || meson setup build >/dev/null
ninja -C build
stage "the networks' paths on this CPU (tests/nets_path.c: the networks' own probe)"
if build/tests/nets-path avx512 true; then
  echo "AVX-512F: nets, images and images-integration run on the AVX-512 engine, their -generic twins on"
  echo "the default path of a CPU without it (VBMEM_NETS_NO_AVX512=1: the AVX2 engine where AVX2 and FMA run,"
  echo "else oneDNN where the build has it, else blas); nets-avx2, nets-onednn, nets-onednn-avx2 and nets-blas"
  echo "on each other path, nets-paths-parity compares them all"
else
  echo "no AVX-512F: the networks' tests run on the default path (nets-generic, images-generic,"
  echo "images-integration-generic) and on each other path this build has; the AVX-512 runs are not possible here (SKIP)"
fi
meson test -C build --print-errorlogs
# The clients' tests run against a vbmemd on each path of the networks this CPU has: the
# AVX-512 engine (where the CPU has AVX-512F; elsewhere tests/nets_path.c says it is not
# possible, status 77) and the generic path (VBMEM_NETS_NO_AVX512=1, inherited by the daemon).
nets_paths=(generic)
if build/tests/nets-path avx512 true >/dev/null; then nets_paths=(avx512 generic); fi
stage "Python client and CLI (clients/python) against the release build's vbmemd; offline pip install; networks: ${nets_paths[*]}"
# (pytest exits non-zero, 5, if it collects no test)
for p in "${nets_paths[@]}"; do
  pool_run "python-client-$p" env VBMEMD=build/vbmemd build/tests/nets-path "$p" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/clients/test_python_client.py
done
pool_wait
stage "JavaScript client (clients/js, node --test) against the release build's vbmemd; networks: ${nets_paths[*]}"
# (node --test counts a file without tests as one passed test named by its path, so the check
# counts the passed tests that are not files: a run that finds no test fails here)
node --version
for p in "${nets_paths[@]}"; do
  tap="build/js-client-tests-$p.tap"
  if ! VBMEMD=build/vbmemd build/tests/nets-path "$p" node --test --test-reporter=tap clients/js/test/ >"$tap" 2>&1; then
    cat "$tap"; echo "JavaScript client ($p): a test failed"; exit 1
  fi
  head -1 "$tap"
  grep -E '^# (tests|pass|fail) ' "$tap"
  js_passed=$(grep -Ec '^ *ok [0-9]+ - [^/]' "$tap" || true)
  echo "JavaScript client ($p): $js_passed tests passed"
  if [ "$js_passed" -lt 1 ] || grep -Eq '^ *not ok ' "$tap"; then
    echo "JavaScript client ($p): no test ran, or one failed ($tap)"; exit 1
  fi
done

stage "the web page in headless Chromium (tests/browser: Debian's chromium, playwright-core; screenshots in build/browser)"
bash tests/browser/run.sh build/vbmemd build/browser

stage "build (release, -O3, -Werror: compile only; -O3 inlining finds warnings -O2 does not)"
[ -d build-o3 ] || meson setup build-o3 --buildtype=release >/dev/null
ninja -C build-o3

stage "ASan/UBSan build"
# (at -O1, the sanitizers' own advice for usable speed: the networks' reads take half the time of
# -O0 and every check stays; debug information kept for the reports)
[ -d build-asan ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
  -Doptimization=1 >/dev/null
ninja -C build-asan
# (test-recall reads 1 episode there: a recall read of 64 frames takes minutes under ASan; the
# memory-gain figures, hundreds of such reads, are asserted in the build above only -- suite
# "gain" -- while the same read code runs here in images-integration and test-predictive; the
# trainer's tests of suite "python" run no C code and ran above; test-demo reads 4 of its 20
# episodes there, whose figures the build above asserts; the second model's memory comparison in
# images-integration reads 4 of its 32 cues there, the ordering asserted above)
# (where the CPU has AVX-512F, the daemon's images run on the AVX-512 engine only, suite
# generic-twin left out: a third of this stage's CPU time; the AVX2 engine's kernels still run
# here in nets-avx2, images-generic and nets-paths-parity, and the daemon on that path ran above)
asan_skip=(--no-suite gain --no-suite python)
if build/tests/nets-path avx512 true >/dev/null; then asan_skip+=(--no-suite generic-twin); fi
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  VBMEM_RECALL_EPISODES=1 VBMEM_DEMO_EPISODES=4 VBMEM_SECOND_MODEL_CUES=4 meson test -C build-asan --print-errorlogs "${asan_skip[@]}"

stage "ThreadSanitizer build: the thread team (fits split over a team, the networks' layers), the daemon's pool, connections, keys and store"
[ -d build-tsan ] || meson setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug >/dev/null
ninja -C build-tsan tests/test-models test-nets
# (without address-space randomisation where the machine allows it: GCC 12's ThreadSanitizer
# cannot map its shadow memory under the larger randomisation of some kernels)
tsan_run() { if setarch "$(uname -m)" -R true 2>/dev/null; then setarch "$(uname -m)" -R "$@"; else "$@"; fi; }
TSAN_OPTIONS=halt_on_error=1 tsan_run build-tsan/tests/test-models
# the networks' AVX-512 engine where the CPU has it, the AVX2 engine where it has AVX2 and FMA,
# and the blas path; the
# oneDNN path is not run under ThreadSanitizer: its threads are libgomp's, which is not built
# with it (every OpenMP barrier would be reported), and the layers our team runs there run on
# the calling thread alone
if build/tests/nets-path avx512 true >/dev/null; then
  TSAN_OPTIONS=halt_on_error=1 VBMEM_TEST_DATA="$PWD/tests/data" VBMEM_NETS_PATH=engine tsan_run build-tsan/test-nets
fi
if build/tests/nets-path avx2 true >/dev/null; then
  TSAN_OPTIONS=halt_on_error=1 VBMEM_TEST_DATA="$PWD/tests/data" VBMEM_NETS_PATH=engine-avx2 tsan_run build-tsan/test-nets
fi
TSAN_OPTIONS=halt_on_error=1 VBMEM_TEST_DATA="$PWD/tests/data" VBMEM_NETS_PATH=blas tsan_run build-tsan/test-nets
# the daemon's threaded building blocks: the worker pool (CPU slots, commit waiters, queue
# timeout), the connection table, API keys' rate buckets and reload, and the SQLite store's group
# commit across threads
ninja -C build-tsan tests/test-http-units tests/test-store
CK_FORK=no TSAN_OPTIONS=halt_on_error=1 tsan_run build-tsan/tests/test-http-units
CK_FORK=no TSAN_OPTIONS=halt_on_error=1 tsan_run build-tsan/tests/test-store

stage "valgrind --suppressions=tests/valgrind-onednn.supp --leak-check=full: Check tests, vbmem-solve end to end, vbmemd's integration, security, images and durable stores (jobs in parallel, one per core)"
# (valgrind does not emulate AVX-512: under it the networks take the default path of a CPU without
# AVX-512F, the AVX2 engine; oneDNN with its AVX2 kernels and the blas path run under it below,
# and the ASan/UBSan build above ran every path. tests/valgrind-onednn.supp holds the one report
# libgomp's pool threads give at exit)
# (test-demo, 20 episodes through the real networks, runs in the release and ASan builds only: under
# valgrind it would take most of the CI budget)
vg=(valgrind --suppressions=tests/valgrind-onednn.supp --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=3 -q)
vgw="${vg[*]}"
# the longest first: the durable stores (SQLite SIGKILL rounds, restart, backup CLI, busy and
# corrupt store, Redis replicas behind nginx, Redis Sentinel failover)
pool_run stores /usr/bin/python3 tests/http/test_store.py build/vbmemd --quick --wrapper "$vgw"
# vbmemd with images (all but the 64-image round, which release and ASan ran)
pool_run images /usr/bin/python3 tests/http/test_images.py build/vbmemd --quick --wrapper "$vgw" \
  --only model_listing,sessions_on_the_bundled_model,encode_decode_helpers,image_errors,png_variants,models_dir_bad_file_and_sighup_reload,model_session_survives_restart,latent_only_daemon,forget_images
# the Check tests: predictive reads, the VB memories, parity, the networks, HTTP units, the store,
# images; online writes against the conjugate posterior of their recorded addresses; forgetting
# (the retained-code refit and the conjugate downdate); the temporal memory (seed 003); the tree
# memory's memos; fused codes (seed 004) against the product of densities
for t in tests/test-models test-nets tests/test-images tests/test-temporal tests/test-predictive \
  tests/test-parity tests/test-http-units tests/test-store tests/test-online tests/test-forget \
  tests/test-memos tests/test-fuse; do
  pool_run "$(basename "$t")" env CK_FORK=no VBMEM_TEST_DATA="$PWD/tests/data" "${vg[@]}" "build/$t"
done
# the networks' blas path (im2col + OpenBLAS sgemm) and oneDNN path under valgrind too
pool_run test-nets-blas env CK_FORK=no VBMEM_NETS_PATH=blas VBMEM_TEST_DATA="$PWD/tests/data" "${vg[@]}" build/test-nets
if build/tests/nets-path onednn true >/dev/null; then
  pool_run test-nets-onednn env CK_FORK=no VBMEM_NETS_PATH=onednn VBMEM_TEST_DATA="$PWD/tests/data" "${vg[@]}" build/test-nets
fi
# the served RPM (seed 004): GP posterior, rpm model file, parity with rpm.py; then its route
pool_run test-rpm env CK_FORK=no VBMEM_TEST_DATA="$PWD/tests/data" "${vg[@]}" build/test-rpm
pool_run rpm-route /usr/bin/python3 tests/http/test_rpm.py build/vbmemd --wrapper "$vgw"
# vbmem-solve end to end (release, ASan/UBSan, valgrind)
pool_run solve-release bash tests/solve/run.sh build/vbmem-solve
pool_run solve-asan env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
  bash tests/solve/run.sh build-asan/vbmem-solve
pool_run solve-valgrind env VALGRIND="$vgw" bash tests/solve/run.sh build/vbmem-solve
# vbmemd integration tests (a quick subset; release and ASan ran above)
pool_run http /usr/bin/python3 tests/http/test_http.py build/vbmemd --quick --wrapper "$vgw" \
  --only routes_match_openapi,system_endpoints,lifecycle_gaussian,lifecycle_categorical,lifecycle_mixture,lifecycle_tree,lifecycle_dkm,pagination,errors,bad_bytes_in_paths,session_ids_outside_their_alphabet,if_match_strong_comparison,temporal_error_messages,concurrency_and_serial_replay,api_keys_isolation_and_reload,limits,graceful_shutdown_with_requests_in_flight,temporal_sessions,forget_retained_codes,forget_downdate,forget_errors
# security: TLS (Python ssl, curl; concurrent jobs), API-key scopes, owners and quotas (durable,
# concurrent); /metrics behind a key ran in release and ASan
pool_run security /usr/bin/python3 tests/http/test_http.py build/vbmemd --quick --wrapper "$vgw" \
  --only tls_real_clients,tls_concurrent_jobs,api_key_scopes,api_key_quotas,api_key_quotas_durable_and_concurrent,api_key_file_refusals,api_key_and_owner_identities_apart,cors_origins
pool_wait
stage "overload, slowloris, RSS growth (build/vbmemd under wrk on loopback: bench/overload.py --quick, ~80 s)"
# counts and status codes only, never a latency threshold (the p99s are printed): overload (256
# closed-loop connections, queue 32): every answer a 2xx or a 503 with Retry-After, no socket
# error; slowloris: 1.5 x --max-connections idle / slow-header / slow-body connections held while a
# normal client is served; soak: the RSS floor after warm-up (smallest sample of the last third
# against the first) grows by at most max(5 %, 4 MiB)
/usr/bin/python3 bench/overload.py overload --quick --build build
/usr/bin/python3 bench/overload.py slowloris --quick --build build
/usr/bin/python3 bench/overload.py soak --quick --build build
stage "scale of the SQLite store (bench/scale.py --quick: 3,000 sessions, --max-resident 100; RSS bound, restart, backup during writes)"
/usr/bin/python3 bench/scale.py build/vbmemd --quick
stage "fuzzing (tests/fuzz: clang libFuzzer harnesses under ASan/UBSan; regression inputs replayed, seed corpora, 15 s each)"
bash tests/fuzz/run.sh 15
stage "deploy files (nginx -t, compose and Kubernetes YAML, no shipped key, systemd unit; install.sh + the installed vbmemd as the unit runs it)"
bash tests/deploy/check.sh
stage_table
echo "run-all: every test passed"
