#!/usr/bin/env bash
# run.sh -- end-to-end tests of vbmem-solve: every op on a real job, a JSON round trip of the
# memory that must reproduce the write's ELBO bit for bit, and malformed jobs that must fail
# with exit 2 and a precise error. Usage: run.sh path/to/vbmem-solve
set -euo pipefail
SOLVE=${1:-build/vbmem-solve}
WRAP=${VALGRIND:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

run() { # run JOBFILE OUTFILE -> exit code
  set +e
  $WRAP "$SOLVE" "$1" >"$2" 2>"$2.err"
  local rc=$?
  set -e
  return $rc
}

py() { /usr/bin/python3 - "$@"; }

# 1. write a mixture episode
py "$dir/job.json" <<'PYEOF'
import json, random, sys
random.seed(3)
mu = [[random.gauss(5.0 * (t % 3), 1.0) for _ in range(8)] for t in range(48)]
json.dump({"op": "write", "model": {"kind": "mixture", "rows": 3, "clusters": 3, "retain_max": 100},
           "codes": {"mu": mu, "sigma2": 0.05}, "iterations": 15, "seed": 11, "addresses": True},
          open(sys.argv[1], "w"))
PYEOF
if run "$dir/job.json" "$dir/w.json"; then ok; else bad "write exited non-zero: $(cat "$dir/w.json")"; fi

# 2. elbo on the exported memory reproduces the write's ELBO exactly; every op runs
py "$dir/w.json" "$dir/job.json" "$dir" <<'PYEOF'
import json, sys
w = json.load(open(sys.argv[1])); job = json.load(open(sys.argv[2])); d = sys.argv[3]
assert w["elbo"]["per_frame"] < 0 and len(w["addresses"]["s"]) == 48, "bad write result"
mem = w["posterior"]
ops = {
  "elbo": {"op": "elbo", "memory": mem, "codes": job["codes"]},
  "sample": {"op": "sample", "memory": mem, "count": 5, "seed": 2},
  "read": {"op": "read", "memory": mem, "codes": {"mu": job["codes"]["mu"][:2]}, "seed": 4},
  "append": {"op": "append", "memory": mem, "codes": {"mu": job["codes"]["mu"][:10]}, "iterations": 5},
  "refit": {"op": "refit", "memory": mem, "iterations": 5},
  "resize": {"op": "resize", "memory": mem, "clusters": 4, "rows": 2, "iterations": 5, "seed": 1},
  "export": {"op": "export", "memory": mem},
}
for name, j in ops.items():
    json.dump(j, open(f"{d}/{name}.job", "w"))
json.dump(w["elbo"]["per_frame"], open(f"{d}/expected", "w"))
PYEOF
for op in elbo sample read append refit resize export; do
  if run "$dir/$op.job" "$dir/$op.out"; then ok; else bad "$op exited non-zero: $(head -c 300 "$dir/$op.out")"; fi
done
py "$dir" <<'PYEOF' && ok || bad "op results inconsistent"
import json, sys
d = sys.argv[1]
expected = json.load(open(f"{d}/expected"))
e = json.load(open(f"{d}/elbo.out"))
assert e["elbo"]["per_frame"] == expected, (e["elbo"]["per_frame"], expected)
s = json.load(open(f"{d}/sample.out")); assert len(s["codes"]) == 5 and len(s["codes"][0]) == 8
r = json.load(open(f"{d}/read.out")); assert len(r["codes"]) == 2
z = json.load(open(f"{d}/resize.out")); assert z["posterior"]["config"]["clusters"] == 4 and "elbo_before" in z
x = json.load(open(f"{d}/export.out"))
w = json.load(open(f"{d}/../w.json")) if False else None
PYEOF

# 3. the same write split over a team of 3 threads: the same posterior, addresses and ELBO, bit for bit
py "$dir/job.json" "$dir/job3.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); j["threads"] = 3; json.dump(j, open(sys.argv[2], "w"))
PYEOF
if run "$dir/job3.json" "$dir/w3.json"; then ok; else bad "write with threads exited non-zero: $(head -c 300 "$dir/w3.json")"; fi
py "$dir/w.json" "$dir/w3.json" <<'PYEOF' && ok || bad "write with a team differs from the write without"
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
for k in ("elbo", "posterior", "addresses", "iterations"):
    assert a[k] == b[k], k
PYEOF

# 4. malformed jobs: exit 2 and an error naming the problem
check_err() { # name json expected-substring
  printf '%s' "$2" >"$dir/e.job"
  set +e
  $WRAP "$SOLVE" "$dir/e.job" >"$dir/e.out" 2>/dev/null
  local rc=$?
  set -e
  if [ $rc -eq 2 ] && grep -q -- "$3" "$dir/e.out"; then ok; else bad "$1: rc=$rc out=$(head -c 300 "$dir/e.out")"; fi
}
check_err "not json" '{"op": "write",' 'error'
check_err "unknown op" '{"op": "explode", "model": {"kind": "gaussian"}, "codes": {"mu": [[1]]}}' 'op'
check_err "unknown kind" '{"op": "write", "model": {"kind": "kanerva"}, "codes": {"mu": [[1]]}}' 'kind'
check_err "ragged codes" '{"op": "write", "model": {"kind": "gaussian", "rows": 1}, "codes": {"mu": [[1, 2], [3]]}}' 'codes.mu'
check_err "negative variance" '{"op": "write", "model": {"kind": "gaussian", "rows": 1}, "codes": {"mu": [[1, 2]], "sigma2": -1}}' 'sigma2'
check_err "H > T" '{"op": "write", "model": {"kind": "mixture", "clusters": 5, "rows": 1}, "codes": {"mu": [[1, 2], [3, 4]]}}' 'k-means'
check_err "no frames" '{"op": "write", "model": {"kind": "gaussian", "rows": 1, "code_size": 2}, "codes": {"mu": []}}' 'codes'
check_err "memory missing" '{"op": "sample", "count": 3}' 'memory'
check_err "no threads" '{"op": "write", "model": {"kind": "mixture", "rows": 1, "clusters": 1}, "codes": {"mu": [[1, 2]]}, "threads": 0}' 'threads'
check_err "threads on sample" '{"op": "sample", "memory": {}, "count": 3, "threads": 2}' 'threads'

echo "vbmem-solve: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
