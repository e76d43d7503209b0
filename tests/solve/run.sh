#!/usr/bin/env bash
# run.sh -- end-to-end tests of vbmem-solve: every op on a real job, a JSON round trip of the
# memory that must reproduce the write's ELBO bit for bit, the read modes, and malformed jobs that must fail
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

# 2. elbo on the exported memory reproduces the write's ELBO exactly; every op runs, and
#    append, refit, resize and export are checked against what proto/solve-job.md promises
py "$dir/w.json" "$dir/job.json" "$dir" <<'PYEOF'
import json, sys
w = json.load(open(sys.argv[1])); job = json.load(open(sys.argv[2])); d = sys.argv[3]
assert w["elbo"]["per_frame"] < 0 and len(w["addresses"]["s"]) == 48, "bad write result"
mem = w["posterior"]
assert mem["frames"] == 48 and len(mem["codes"]["mu"]) == 48, "the write must retain its 48 codes"
# a new memory with the same configuration (and so the same default base prior) as mem
model = dict(mem["config"])
retained = mem["codes"]
extra = {"mu": job["codes"]["mu"][:10]}
ops = {
  "elbo": {"op": "elbo", "memory": mem, "codes": job["codes"]},
  "sample": {"op": "sample", "memory": mem, "count": 5, "seed": 2},
  "read": {"op": "read", "memory": mem, "codes": {"mu": job["codes"]["mu"][:2]}, "seed": 4},
  "append": {"op": "append", "memory": mem, "codes": extra, "iterations": 5},
  "refit": {"op": "refit", "memory": mem, "iterations": 5, "seed": 7},
  # refit is batch VB from the base prior over the retained codes (plus `codes`): the same
  # job as a write of a new memory of the same configuration on those codes
  "refit_ref": {"op": "write", "model": model, "codes": retained, "iterations": 5, "seed": 7},
  "refit_extra": {"op": "refit", "memory": mem, "codes": extra, "iterations": 5, "seed": 7},
  "refit_extra_ref": {"op": "write", "model": model, "iterations": 5, "seed": 7,
                      "codes": {"mu": retained["mu"] + extra["mu"],
                                "sigma2": retained["sigma2"] + [[0.0] * 8 for _ in extra["mu"]]}},
  "resize": {"op": "resize", "memory": mem, "clusters": 4, "rows": 2, "iterations": 5, "seed": 1},
  "export": {"op": "export", "memory": mem},
}
for name, j in ops.items():
    json.dump(j, open(f"{d}/{name}.job", "w"))
json.dump(w["elbo"]["per_frame"], open(f"{d}/expected", "w"))
PYEOF
for op in elbo sample read append refit refit_ref refit_extra refit_extra_ref resize export; do
  if run "$dir/$op.job" "$dir/$op.out"; then ok; else bad "$op exited non-zero: $(head -c 300 "$dir/$op.out")"; fi
done
# the exported memory, imported again: its ELBO on the written codes
py "$dir" <<'PYEOF'
import json, sys
d = sys.argv[1]
x = json.load(open(f"{d}/export.out")); job = json.load(open(f"{d}/job.json"))
json.dump({"op": "elbo", "memory": x["posterior"], "codes": job["codes"]}, open(f"{d}/reimport.job", "w"))
PYEOF
if run "$dir/reimport.job" "$dir/reimport.out"; then ok; else bad "elbo on the export exited non-zero: $(head -c 300 "$dir/reimport.out")"; fi
py "$dir" <<'PYEOF' && ok || bad "op results inconsistent"
import json, math, sys
d = sys.argv[1]
expected = json.load(open(f"{d}/expected"))
w = json.load(open(f"{d}/w.json")); mem = w["posterior"]
job = json.load(open(f"{d}/job.json")); extra = job["codes"]["mu"][:10]
e = json.load(open(f"{d}/elbo.out"))
assert e["elbo"]["per_frame"] == expected, (e["elbo"]["per_frame"], expected)
s = json.load(open(f"{d}/sample.out")); assert len(s["codes"]) == 5 and len(s["codes"][0]) == 8
r = json.load(open(f"{d}/read.out")); assert len(r["codes"]) == 2

def check_elbo(el, T, what):
    # every term finite, total = loglik_codes - the KLs, per_frame = total / T (both as
    # computed in double precision: a relative 1e-12)
    for k in ("per_frame", "total", "loglik_codes", "kl_w", "kl_s", "kl_M", "kl_b"):
        assert isinstance(el[k], float) and math.isfinite(el[k]), (what, k, el[k])
    assert el["T"] == T, (what, el["T"], T)
    tot = el["loglik_codes"] - el["kl_w"] - el["kl_s"] - el["kl_M"] - el["kl_b"]
    assert abs(tot - el["total"]) <= 1e-12 * abs(tot), (what, tot, el["total"])
    assert abs(el["per_frame"] - el["total"] / T) <= 1e-12 * abs(el["per_frame"]), what

# append: online VB with the old posterior as prior, on the 10 new codes only
a = json.load(open(f"{d}/append.out")); ap = a["posterior"]
check_elbo(a["elbo"], 10, "append")
assert a["iterations"] == 5 and a["converged"] is False, (a["iterations"], a["converged"])
assert ap["frames"] == 48 + 10, ap["frames"]
assert ap["last_elbo"] == a["elbo"]["per_frame"]
assert ap["config"] == mem["config"] and ap["prior"] == mem["prior"], "append changed the configuration or base prior"
# the retained codes are the old ones followed by the new ones (given without variance: 0)
assert ap["codes"]["mu"] == mem["codes"]["mu"] + extra, "append: retained codes"
assert ap["codes"]["sigma2"] == mem["codes"]["sigma2"] + [[0.0] * 8] * 10, "append: retained variances"
# the new data only add precision to the old posterior: sigma2_b' = 1 / (1 / sigma2_b + N_h /
# sigma_z2) and U'^{-1} = U^{-1} + (PSD terms), so every cluster's shift variance shrinks (N_h > 0
# with the s_floor) and no diagonal entry of U grows; a write from the base prior would not obey it
old_b, new_b = mem["posterior"]["clusters"], ap["posterior"]["clusters"]
assert len(new_b) == len(old_b) == 3
for o, n in zip(old_b, new_b):
    assert n["sigma2_b"] < o["sigma2_b"], ("append: sigma2_b grew", o["sigma2_b"], n["sigma2_b"])
    for k in range(len(o["U"])):
        assert n["U"][k][k] <= o["U"][k][k] * (1 + 1e-12), ("append: U grew", k, o["U"][k][k], n["U"][k][k])
assert any(o["R"] != n["R"] or o["mu_b"] != n["mu_b"] for o, n in zip(old_b, new_b)), "append: posterior means unchanged"

# refit: bit for bit a fresh write of the retained codes (plus the extra codes) from the base prior
for name, T in (("refit", 48), ("refit_extra", 58)):
    f = json.load(open(f"{d}/{name}.out")); ref = json.load(open(f"{d}/{name}_ref.out"))
    check_elbo(f["elbo"], T, name)
    assert f["iterations"] == 5, (name, f["iterations"])
    assert f["elbo"] == ref["elbo"], (name, f["elbo"], ref["elbo"])
    fp, rp = f["posterior"], ref["posterior"]
    assert fp["posterior"] == rp["posterior"], name + ": posterior differs from a fresh write"
    assert fp["codes"] == rp["codes"] and len(fp["codes"]["mu"]) == T, name + ": retained codes"
    assert fp["frames"] == T and fp["config"] == mem["config"], name
    assert fp["posterior"] != mem["posterior"], name + ": posterior unchanged"

# resize: judged on the retained codes; the old memory's ELBO there is the write's
z = json.load(open(f"{d}/resize.out")); assert z["posterior"]["config"]["clusters"] == 4 and "elbo_before" in z
assert z["posterior"]["config"]["rows"] == 2
assert z["elbo_before"] == expected, (z["elbo_before"], expected)
assert z["elbo_after"] == z["elbo"]["per_frame"], (z["elbo_after"], z["elbo"]["per_frame"])
check_elbo(z["elbo"], 48, "resize")

# export: the memory given, unchanged (every double round-trips through 17 digits), and importing
# it again gives the write's ELBO bit for bit
x = json.load(open(f"{d}/export.out"))
assert list(x) == ["op", "posterior", "seconds"], list(x)
assert x["posterior"] == mem, "export changed the memory"
ri = json.load(open(f"{d}/reimport.out"))
assert ri["elbo"] == e["elbo"], (ri["elbo"], e["elbo"])
assert ri["elbo"]["per_frame"] == expected
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

# 4. read modes: "mean" and "mean_map" draw nothing (the same output for two seeds), differ from a
#    sample read, and equal sum_h q(s=h) (R_h^T w_mu[h] + mu_b[h]) (mean_map: the argmax cluster's
#    term alone) computed here from the addresses and the posterior; "mode": "sample" is the default
py "$dir/w.json" "$dir/job.json" "$dir" <<'PYEOF'
import json, sys
w = json.load(open(sys.argv[1])); job = json.load(open(sys.argv[2])); d = sys.argv[3]
mem = w["posterior"]
q = {"mu": [[x + 0.7 for x in r] for r in job["codes"]["mu"][:6]]}
for mode in ("mean", "mean_map", "sample"):
    for seed in (4, 99):
        json.dump({"op": "read", "memory": mem, "codes": q, "seed": seed, "mode": mode},
                  open(f"{d}/read_{mode}_{seed}.job", "w"))
json.dump({"op": "read", "memory": mem, "codes": q, "seed": 4}, open(f"{d}/read_default_4.job", "w"))
PYEOF
for j in read_mean_4 read_mean_99 read_mean_map_4 read_mean_map_99 read_sample_4 read_sample_99 read_default_4; do
  if run "$dir/$j.job" "$dir/$j.out"; then ok; else bad "$j exited non-zero: $(head -c 300 "$dir/$j.out")"; fi
done
py "$dir" <<'PYEOF' && ok || bad "read modes inconsistent"
import json, sys
d = sys.argv[1]
out = {n: json.load(open(f"{d}/read_{n}.out")) for n in
       ("mean_4", "mean_99", "mean_map_4", "mean_map_99", "sample_4", "sample_99", "default_4")}
mem = json.load(open(f"{d}/read_mean_4.job"))["memory"]
cfg = mem["config"]; H, G, K = cfg["clusters"], cfg["groups"], cfg["rows"]; cg = cfg["code_size"] // G
blocks = mem["posterior"]["clusters"]
assert out["mean_4"]["codes"] == out["mean_99"]["codes"], "mean read depends on the seed"
assert out["mean_map_4"]["codes"] == out["mean_map_99"]["codes"], "mean_map read depends on the seed"
assert out["sample_4"]["codes"] != out["sample_99"]["codes"], "sample read ignores the seed"
assert out["default_4"]["codes"] == out["sample_4"]["codes"], "mode sample is not the default"
assert out["mean_4"]["codes"] != out["sample_4"]["codes"], "mean read equals a sample read"
assert out["mean_4"]["codes"] != out["mean_map_4"]["codes"], "mean and mean_map agree"
for n in ("mean_4", "mean_map_4", "sample_4"):  # q(y) is inferred the same way in every mode
    assert out[n]["addresses"] == out["default_4"]["addresses"], n
for n, use_map in (("mean_4", False), ("mean_map_4", True)):
    r = out[n]; a = r["addresses"]
    assert list(r) == ["op", "codes", "addresses", "seconds"], list(r)
    for t, z in enumerate(r["codes"]):
        for g in range(G):
            s = a["s"][t][g]
            best = max(range(H), key=lambda h: (s[h], -h))
            for c in range(cg):
                want = 0.0
                for h in range(H):
                    if use_map and h != best:
                        continue
                    b = blocks[g * H + h]
                    e = b["mu_b"][c] + sum(b["R"][k][c] * a["w_mu"][t][g][h][k] for k in range(K))
                    want += (1.0 if use_map else s[h]) * e
                got = z[g * cg + c]
                assert abs(got - want) <= 1e-10 * (1.0 + abs(want)), (n, t, g, c, got, want)
PYEOF

# 5. malformed jobs: exit 2 and an error naming the problem
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
mem_json=$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["posterior"]))' "$dir/w.json")
check_err "unknown read mode" '{"op": "read", "memory": '"$mem_json"', "codes": {"mu": [[1, 2, 3, 4, 5, 6, 7, 8]]}, "mode": "median"}' '"message":"mode: unknown read mode \\"median\\" (expected.*"field":"mode"}'
check_err "read mode not a string" '{"op": "read", "memory": '"$mem_json"', "codes": {"mu": [[1, 2, 3, 4, 5, 6, 7, 8]]}, "mode": 1}' '"message":"mode: expected \\"sample\\", \\"mean\\" or \\"mean_map\\", got integer","field":"mode"}'
check_err "read mode, wrong case" '{"op": "read", "memory": '"$mem_json"', "codes": {"mu": [[1, 2, 3, 4, 5, 6, 7, 8]]}, "mode": "Mean"}' 'unknown read mode \\"Mean\\".*"field":"mode"}'
check_err "mode on sample" '{"op": "sample", "memory": {}, "count": 3, "mode": "mean"}' '"message":"mode: not used by op \\"sample\\"","field":"mode"}'

# 6. tree memos (docs/design/memos.md): a write keeps one memo per frame, an append adds the new
#    frames' memos to the imported ones, and bad memo_k values name model.memo_k
py "$dir/mj.json" <<'PYEOF'
import json, random, sys
r = random.Random(5)
mu = [[r.gauss(0.0, 1.0) for _ in range(4)] for _ in range(12)]
json.dump({"op": "write", "model": {"kind": "tree", "code_size": 4, "clusters": 3, "rows": 2, "groups": 2,
                                    "memo_k": 3}, "codes": {"mu": mu, "sigma2": 0.01}, "iterations": 5, "seed": 1},
          open(sys.argv[1], "w"))
PYEOF
if run "$dir/mj.json" "$dir/mw.json"; then ok; else bad "memo write exited non-zero: $(cat "$dir/mw.json.err")"; fi
py "$dir/mw.json" "$dir/ma.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))["posterior"]
assert p["config"]["memo_k"] == 3 and len(p["memos"]) == 12, "one memo per frame"
for m in p["memos"]:
    assert 1 <= len(m["s"]) <= 3 and all(a >= b for a, b in zip(m["score"], m["score"][1:])), m
json.dump({"op": "append", "memory": p, "codes": {"mu": [[0.1, 0.2, 0.3, 0.4]]}, "iterations": 3, "seed": 2},
          open(sys.argv[2], "w"))
PYEOF
if run "$dir/ma.json" "$dir/mao.json" && py "$dir/mw.json" "$dir/mao.json" <<'PYEOF'
import json, sys
before = json.load(open(sys.argv[1]))["posterior"]["memos"]
after = json.load(open(sys.argv[2]))["posterior"]["memos"]
assert len(after) == 13 and after[:12] == before, "an append keeps the earlier memos and adds one"
PYEOF
then ok; else bad "memo append: $(cat "$dir/mao.json.err")"; fi
check_err "memo_k too large" '{"op": "write", "model": {"kind": "tree", "code_size": 4, "memo_k": 65}, "codes": {"mu": [[1, 2, 3, 4]]}}' '"field":"model.memo_k"'
check_err "memo_k on a mixture" '{"op": "write", "model": {"kind": "mixture", "clusters": 1, "rows": 1, "memo_k": 2}, "codes": {"mu": [[1, 2]]}}' '"field":"model.memo_k"'
# 7. temporal jobs (seed 003): write two sequences, append one, infer, sample (seeded),
#    continue a prefix; the posterior's export round-trips (a job on the appended memory gives
#    the same answer twice), and bad temporal jobs fail with the field
py "$dir" <<'PYEOF'
import json, math, random, sys
d = sys.argv[1]
def seq(T, seed):
    r = random.Random(seed); a = [0.0, 0.0]; b = [1, 0]; out = []
    W = [[r.gauss(0, 1) for _ in range(3)] for _ in range(2)]
    for _ in range(T):
        for p in range(2):
            if r.random() < 0.1: b[p] = 1 - b[p]
            a[p] = 0.9 * a[p] + math.sqrt(0.19) * r.gauss(0, 1)
        out.append([sum(W[p][k] * a[p] * b[p] for p in range(2)) + 0.2 * r.gauss(0, 1) for k in range(3)])
    return out
json.dump({"op": "temporal_write", "model": {"kind": "temporal", "code_size": 3, "components": 2},
           "sequences": [{"mu": seq(30, 1)}, {"mu": seq(30, 2)}], "iterations": 15, "seed": 1},
          open(f"{d}/tw.job", "w"))
json.dump(seq(12, 3), open(f"{d}/tq.json", "w"))
PYEOF
if run "$dir/tw.job" "$dir/tw.out"; then ok; else bad "temporal_write: $(head -c 300 "$dir/tw.out")"; fi
py "$dir" <<'PYEOF'
import json, sys
d = sys.argv[1]
w = json.load(open(f"{d}/tw.out")); q = json.load(open(f"{d}/tq.json"))
tr = w["free_energy_trace"]
assert len(tr) == 15 and all(b >= a - 1e-9 * abs(a) for a, b in zip(tr, tr[1:])), tr
assert w["sequences"] == 2 and w["frames"] == 60 and w["free_energy"] == tr[-1], w
mem = w["posterior"]
assert mem["kind"] == "temporal" and len(mem["posterior"]["W"]) == 3, list(mem)
jobs = {
  "ta": {"op": "temporal_append", "memory": mem, "sequences": [{"mu": q}], "iterations": 5},
  "ti": {"op": "temporal_infer", "memory": mem, "sequence": {"mu": q}},
  "ts1": {"op": "temporal_sample", "memory": mem, "length": 6, "seed": 4},
  "ts2": {"op": "temporal_sample", "memory": mem, "length": 6, "seed": 4},
  "tc": {"op": "temporal_continue", "memory": mem, "prefix": {"mu": q[:8]}, "steps": 3, "samples": 2,
         "seed": 1},
}
for n, j in jobs.items():
    json.dump(j, open(f"{d}/{n}.job", "w"))
PYEOF
for n in ta ti ts1 ts2 tc; do
  if run "$dir/$n.job" "$dir/$n.out"; then ok; else bad "temporal job $n: $(head -c 300 "$dir/$n.out")"; fi
done
py "$dir" <<'PYEOF'
import json, sys
d = sys.argv[1]
r = {n: json.load(open(f"{d}/{n}.out")) for n in ("ta", "ti", "ts1", "ts2", "tc")}
assert r["ta"]["sequences"] == 3 and r["ta"]["frames"] == 72, r["ta"]["frames"]
tr = r["ta"]["free_energy_trace"]
assert all(b >= a - 1e-9 * abs(a) for a, b in zip(tr, tr[1:])), tr
assert len(r["ti"]["identities"]) == 12 and all(0 <= v <= 1 for x in r["ti"]["identities"] for v in x)
assert r["ts1"]["codes"] == r["ts2"]["codes"] and len(r["ts1"]["codes"]) == 6
assert len(r["tc"]["mean"]) == 3 and len(r["tc"]["samples"]) == 2 and len(r["tc"]["samples"][0]) == 3
# the appended memory, exported and read back by the next job: the same continuation twice
j = {"op": "temporal_continue", "memory": r["ta"]["posterior"], "prefix": {"mu": [[0.1, 0.2, 0.3]] * 4},
     "steps": 2}
json.dump(j, open(f"{d}/tc2.job", "w"))
PYEOF
run "$dir/tc2.job" "$dir/tc2a.out" && run "$dir/tc2.job" "$dir/tc2b.out" && cmp -s <(head -c 200 "$dir/tc2a.out") <(head -c 200 "$dir/tc2b.out") && ok || bad "temporal_continue on an appended memory"
tmem=$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["posterior"]))' "$dir/tw.out")
check_err "temporal: one frame" '{"op": "temporal_append", "memory": '"$tmem"', "sequences": [{"mu": [[1, 2, 3]]}]}' '"field":"sequences\[0\].mu"'
check_err "temporal: ragged" '{"op": "temporal_append", "memory": '"$tmem"', "sequences": [{"mu": [[1, 2, 3], [1, 2]]}]}' '"field":"sequences\[0\].mu'
check_err "temporal: wrong D" '{"op": "temporal_infer", "memory": '"$tmem"', "sequence": {"mu": [[1, 2]]}}' '"field":"sequence.mu"'
check_err "temporal: count on sample" '{"op": "temporal_sample", "memory": '"$tmem"', "length": 3, "count": 2}' '"field":"count"'
check_err "temporal: no steps" '{"op": "temporal_continue", "memory": '"$tmem"', "prefix": {"mu": [[1, 2, 3]]}}' '"field":"steps"'
check_err "temporal: bad config" '{"op": "temporal_write", "model": {"kind": "temporal", "code_size": 3, "pi0": 2}, "sequences": [{"mu": [[1, 2, 3], [1, 2, 3]]}]}' '"field":"model.pi0"'
check_err "temporal: bad export" '{"op": "temporal_sample", "memory": {"kind": "temporal", "export": "AAAA"}, "length": 3}' '"field":"memory.export"'
check_err "temporal: unknown op" '{"op": "temporal_explode"}' '"field":"op"'
check_err "temporal: bad start" '{"op": "temporal_write", "model": {"kind": "temporal", "code_size": 3}, "sequences": [{"mu": [[1, 2, 3], [1, 2, 3]]}], "start": "kmeans"}' '"field":"start"'
check_err "temporal: bad warm_start" '{"op": "temporal_write", "model": {"kind": "temporal", "code_size": 3}, "sequences": [{"mu": [[1, 2, 3], [1, 2, 3]]}], "warm_start": 2}' '"field":"warm_start"'

echo "vbmem-solve: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
