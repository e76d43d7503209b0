#!/usr/bin/env bash
# http_run.sh -- runs the vbmemd HTTP benchmark on loopback: starts build/vbmemd on an ephemeral
# port, drives it with build/bench-http (latent writes with JSON and base64 codes at 1, 8 and 64
# clients, samples), prints one JSON line per run and a Markdown table, and stops the daemon.
# First, in the same run, build/bench/bench-wire times the parse of the write bodies by json_loadb
# and by the daemon's reader (wire_parse) and prints their ratio.
# Bounded: every run stops after REQUESTS requests or SECONDS seconds.
# usage: bench/http_run.sh [BUILD_DIR]   (env: REQUESTS, SECONDS_MAX, ITERATIONS, THREADS;
#        QUICK=1: only write-b64 and write-json at 8 clients)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REQUESTS=${REQUESTS:-3000}
SECONDS_MAX=${SECONDS_MAX:-15}
ITERATIONS=${ITERATIONS:-10}
THREADS=${THREADS:-$(nproc)}
QUICK=${QUICK:-0}
if [ -x "$BUILD/bench/bench-wire" ]; then
  echo "body parse, json_loadb against wire_parse (median of 200, parse + free, one thread):"
  "$BUILD/bench/bench-wire" 200
fi
log=$(mktemp)
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
OPENBLAS_NUM_THREADS=1 "$BUILD/vbmemd" --listen 127.0.0.1:0 --threads "$THREADS" --queue-depth 1024 \
  --log-level warn --max-sessions 100000 2>"$log" &
pid=$!
for _ in $(seq 100); do grep -q '"listening"' "$log" && break; sleep 0.05; done
port=$(grep -o '"port":[0-9]*' "$log" | head -1 | cut -d: -f2)
echo "vbmemd pid $pid port $port threads $THREADS; $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
results=()
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
run() {
  local out c0 c1
  c0=$(cpu_ticks)
  out=$("$BUILD/bench-http" --port "$port" --requests "$REQUESTS" --seconds "$SECONDS_MAX" \
        --iterations "$ITERATIONS" "$@")
  c1=$(cpu_ticks)
  # daemon CPU (user + system) per answered request, in ms
  out=$(/usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["daemon_cpu_ms"]=(int(sys.argv[2])-int(sys.argv[3]))*1000.0/int(sys.argv[4])/max(1,r["ok"]); print(json.dumps(r))' "$out" "$c1" "$c0" "$hz")
  echo "$out"
  results+=("$out")
}
if [ "$QUICK" = 1 ]; then
  for mode in write-b64 write-json; do run --mode "$mode" --clients 8; done
else
  for mode in write-b64 write-json; do
    for c in 1 8 64; do run --mode "$mode" --clients "$c"; done
  done
  run --mode append-b64 --clients 8
  # the server's own ceiling: the same write with 0 VB iterations (initialisation and one ELBO)
  run --mode write-b64 --clients 8 --iterations 0
  for mode in samples samples-b64; do
    for c in 1 8; do run --mode "$mode" --clients "$c" --samples 64; done
  done
fi
echo
echo "| mode | clients | VB iterations | requests | req/s | p50 ms | p99 ms | max ms | mean solve ms | daemon CPU ms/req | request bytes | samples/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in "${results[@]}"; do
  /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1])
s = "%.0f" % r["samples_per_s"] if r["samples_per_s"] else "-"
it = r["iterations"] if not r["mode"].startswith("samples") else "-"
print("| %s | %d | %s | %d | %.0f | %.2f | %.2f | %.2f | %s | %.2f | %d | %s |" % (r["mode"], r["clients"], it, r["requests"], r["rps"], r["p50_ms"], r["p99_ms"], r["max_ms"], "%.2f" % r["mean_solve_ms"] if r["mean_solve_ms"] else "-", r["daemon_cpu_ms"], r["request_bytes"], s))' "$r"
done
