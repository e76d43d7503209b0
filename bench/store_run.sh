#!/usr/bin/env bash
# store_run.sh -- write throughput of vbmemd with each session store: in memory (no --data-dir),
# SQLite (--data-dir: every write committed, synchronous=FULL, before it is answered) and Redis
# (--redis, redis-server with appendonly yes, appendfsync always). Starts redis-server and three
# BUILD/vbmemd on ephemeral loopback ports, one per store, and drives them in turn with
# BUILD/bench-http (latent writes, base64 codes, the paper's mixture: T=64, H=10, K=6, C=200) at 1,
# 8 and 64 clients, with VB_ITERATIONS and with 0 iterations (the server's ceiling), alternating the
# stores run by run so that a busy machine slows both alike. Prints one JSON line per run and a
# Markdown table. Bounded: each run stops after REQUESTS requests or SECONDS_MAX seconds.
# usage: bench/store_run.sh [BUILD_DIR] [DATA_PARENT]   (env: REQUESTS, SECONDS_MAX, ITERATIONS, THREADS,
#        STORES="memory sqlite redis", CLIENTS="1 8 64", ITERATION_SET="$ITERATIONS 0")
# Store sqlite-w0 (not run by default) is SQLite with --commit-waiters 0: the pool without extra
# workers for requests waiting on a commit, as before group commit across workers (the comparator
# of that change). After the table, one line per (iterations, clients) gives each store's rate as a
# ratio of the in-memory store's in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PARENT=${2:-${TMPDIR:-/tmp}}
REQUESTS=${REQUESTS:-2000}
SECONDS_MAX=${SECONDS_MAX:-10}
ITERATIONS=${ITERATIONS:-10}
THREADS=${THREADS:-$(nproc)}
STORES=${STORES:-memory sqlite redis}
CLIENTS=${CLIENTS:-1 8 64}
ITERATION_SET=${ITERATION_SET:-$ITERATIONS 0}
data=$(mktemp -d "$PARENT/vbmem-bench-XXXXXX")
declare -A pid port log
rpid=""
cleanup() {
  for s in "${!pid[@]}"; do kill -TERM "${pid[$s]}" 2>/dev/null || true; wait "${pid[$s]}" 2>/dev/null || true; done
  if [ -n "$rpid" ]; then kill -TERM "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; fi
  rm -rf "$data" "${log[@]}"
}
trap cleanup EXIT
rport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir "$data/redis" "$data/sqlite" "$data/sqlite-w0"
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always \
  --dir "$data/redis" >/dev/null 2>&1 &
rpid=$!
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
for store in $STORES; do
  args=()
  [ "$store" = sqlite ] && args=(--data-dir "$data/sqlite")
  [ "$store" = sqlite-w0 ] && args=(--data-dir "$data/sqlite-w0" --commit-waiters 0)
  [ "$store" = redis ] && args=(--redis "127.0.0.1:$rport")
  log[$store]=$(mktemp)
  OPENBLAS_NUM_THREADS=1 "$BUILD/vbmemd" --listen 127.0.0.1:0 --threads "$THREADS" --queue-depth 1024 \
    --log-level warn --max-sessions 100000 "${args[@]}" 2>"${log[$store]}" &
  pid[$store]=$!
  for _ in $(seq 100); do grep -q '"listening"' "${log[$store]}" && break; sleep 0.05; done
  port[$store]=$(grep -o '"port":[0-9]*' "${log[$store]}" | head -1 | cut -d: -f2)
done
results=()
for iters in $ITERATION_SET; do
  for c in $CLIENTS; do
    for store in $STORES; do
      out=$("$BUILD/bench-http" --port "${port[$store]}" --requests "$REQUESTS" --seconds "$SECONDS_MAX" \
            --iterations "$iters" --mode write-b64 --clients "$c")
      out=$(/usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["store"]=sys.argv[2]; print(json.dumps(r))' "$out" "$store")
      echo "$out"
      results+=("$out")
    done
  done
done
echo
echo "data: $(df "$PARENT" | tail -1 | awk '{print $1}') ($PARENT); $(nproc) cores; threads $THREADS; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| store | clients | VB iterations | requests | writes/s | p50 ms | p99 ms | max ms | mean solve ms |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in "${results[@]}"; do
  /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1])
print("| %s | %d | %s | %d | %.0f | %.2f | %.2f | %.2f | %s |" % (r["store"], r["clients"], r["iterations"], r["requests"], r["rps"], r["p50_ms"], r["p99_ms"], r["max_ms"], "%.2f" % r["mean_solve_ms"] if r["mean_solve_ms"] else "-"))' "$r"
done
echo
/usr/bin/python3 -c '
import json, sys
rows = [json.loads(a) for a in sys.argv[1:]]
mem = {(r["iterations"], r["clients"]): r["rps"] for r in rows if r["store"] == "memory"}
for (it, c), m in mem.items():
    others = ", ".join("%s %.2f" % (r["store"], r["rps"] / m) for r in rows
                       if r["store"] != "memory" and (r["iterations"], r["clients"]) == (it, c) and m > 0)
    print("ratio to memory (%s iterations, %d clients): %s" % (it, c, others))' "${results[@]}"
