#!/usr/bin/env bash
# tls_run.sh -- measures what TLS and API keys cost vbmemd: wrk (keep-alive) against two daemons
# started in the same run with the same options, one plain HTTP and one with --tls-cert/--tls-key (a
# throwaway self-signed certificate made here), on an inline route (GET /healthz) and a pool job
# (POST .../samples); then the same plain daemon's GET /v1/sessions/{id} with a key file of 1 key and
# one of 10,000 keys (every request compares the bearer digest with every key, in constant time).
# Each round measures both sides of a pair back to back (the order alternating by round); prints the
# median req/s and the median of the rounds' ratios (pairs drift together on a shared machine).
# Needs wrk and openssl.
# usage: bench/tls_run.sh [BUILD_DIR]   (env: ROUNDS (7), SECONDS_RUN (2), CONNECTIONS (8))
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-7}
SECONDS_RUN=${SECONDS_RUN:-2}
CONNECTIONS=${CONNECTIONS:-8}
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
echo "bench-key" >"$tmp/keys1"
{ for i in $(seq 9999); do echo "filler-key-$i-$RANDOM$RANDOM"; done; echo "bench-key"; } >"$tmp/keys10k"

# start NAME ARGS...: a vbmemd on an ephemeral port; sets port_NAME
start() {
  local name=$1; shift
  OPENBLAS_NUM_THREADS=1 "$BUILD/vbmemd" --listen 127.0.0.1:0 --threads 2 --log-level warn "$@" \
    2>"$tmp/$name.log" &
  pids+=($!)
  for _ in $(seq 200); do grep -q '"listening"' "$tmp/$name.log" && break; sleep 0.05; done
  eval "port_$name=$(grep -o '"port":[0-9]*' "$tmp/$name.log" | head -1 | cut -d: -f2)"
}
start plain --api-key-file "$tmp/keys1"
start tls --api-key-file "$tmp/keys1" --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem"
start keys10k --api-key-file "$tmp/keys10k"
body='{"code_size":16,"memory":{"kind":"mixture","clusters":4,"rows":4}}'
mk() { # mk URL: create a session, print its id
  curl -sS --cacert "$tmp/cert.pem" -H 'Authorization: Bearer bench-key' -H 'Content-Type: application/json' \
    -d "$body" "$1/v1/sessions" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
sid_plain=$(mk "http://127.0.0.1:$port_plain")
sid_tls=$(mk "https://127.0.0.1:$port_tls")
sid_keys10k=$(mk "http://127.0.0.1:$port_keys10k")
cat >"$tmp/samples.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"count":4,"seed":1}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
LUA
cat >"$tmp/get.lua" <<'LUA'
wrk.headers["Authorization"] = "Bearer bench-key"
LUA
rps() { # rps URL [wrk args]: requests/s of one wrk run (non-2xx answers fail the run)
  local out
  out=$(wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_RUN}s" "${@:2}" "$1")
  if echo "$out" | grep -q 'Non-2xx'; then echo "non-2xx answers: $out" >&2; exit 1; fi
  echo "$out" | awk '/Requests\/sec/ {print $2}'
}
echo "vbmemd $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u '+%F %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
declare -A runs
# pair NAME URL_A URL_B [wrk args]: one measurement of each side, in an order that alternates by round
pair() {
  local name=$1 a=$2 b=$3; shift 3
  if [ $((r % 2)) = 1 ]; then
    runs[${name}_a]+="$(rps "$a" "$@") "; runs[${name}_b]+="$(rps "$b" "$@") "
  else
    runs[${name}_b]+="$(rps "$b" "$@") "; runs[${name}_a]+="$(rps "$a" "$@") "
  fi
}
for r in $(seq "$ROUNDS"); do
  pair healthz "http://127.0.0.1:$port_plain/healthz" "https://127.0.0.1:$port_tls/healthz"
  pair samples "http://127.0.0.1:$port_plain/v1/sessions/$sid_plain/samples" \
    "https://127.0.0.1:$port_tls/v1/sessions/$sid_tls/samples" -s "$tmp/samples.lua"
  pair keys "http://127.0.0.1:$port_plain/v1/sessions/$sid_plain" \
    "http://127.0.0.1:$port_keys10k/v1/sessions/$sid_keys10k" -s "$tmp/get.lua"
  echo "round $r: load $(cut -d' ' -f1 /proc/loadavg)"
done
/usr/bin/python3 - "${runs[healthz_a]}" "${runs[healthz_b]}" "${runs[samples_a]}" "${runs[samples_b]}" \
  "${runs[keys_a]}" "${runs[keys_b]}" "$CONNECTIONS" <<'PY'
import statistics, sys
v = [[float(x) for x in a.split()] for a in sys.argv[1:7]]
print("| route (wrk, 1 thread, %s keep-alive connections) | comparator req/s (median) | measured req/s (median) | "
      "ratio (median of the rounds' ratios) | rounds' ratios |" % sys.argv[7])
print("|---|---|---|---|---|")
rows = [("GET /healthz: plain HTTP -> TLS", 0, 1), ("POST .../samples (4 codes, pool job): plain HTTP -> TLS", 2, 3),
        ("GET /v1/sessions/{id}: 1 key -> 10,000 keys in the key file", 4, 5)]
for name, a, b in rows:
    ratios = [y / x for x, y in zip(v[a], v[b])]
    print("| %s | %.0f | %.0f | %.2f | %s |" % (name, statistics.median(v[a]), statistics.median(v[b]),
                                               statistics.median(ratios), " ".join("%.2f" % x for x in ratios)))
PY
