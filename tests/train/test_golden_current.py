#!/usr/bin/python3
"""test_golden_current.py -- the golden files of tests/data/ are what their scripts produce now:
train/golden_vb.py (golden_vb.json, all ten cases), train/golden_nets.py
(golden_nets*.safetensors) and train/golden_rpm.py (golden_rpm.safetensors, golden_rpm_io.json)
are run by PyTorch on the CPU into a temporary directory, and every committed file is compared
with its fresh twin: the same structure (keys, case names, tensor names, shapes and dtypes,
metadata but for the date and torch version the trainer stamps), every number within the float
tolerance the C test that reads the file allows for it (named at each rule below). The
regeneration runs on whatever CPU this is, so the comparison is never bit for bit.

usage: /usr/bin/python3 tests/train/test_golden_current.py   (meson test golden-current)"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "train"))

from vbmtrain import nets  # noqa: E402 (read_safetensors)

DATA = os.path.join(ROOT, "tests", "data")


def regenerate(script, out):
    """Run train/SCRIPT --out OUT on one CPU thread; fail the test with its output if it fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train", script), "--out", out], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (script, r.returncode, r.stdout, r.stderr))


def flat(v):
    """A number or nested lists of numbers as a flat list of floats."""
    return [w for u in v for w in flat(u)] if isinstance(v, list) else [float(v)]


def numeric(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) or (
        isinstance(v, list) and all(numeric(u) for u in v))


class Mismatches:
    """Collects every difference (a message per file and place) so that one run names them all."""

    def __init__(self):
        self.found = []

    def check(self, ok, what):
        if not ok:
            self.found.append(what)

    def close(self, what, got, want, allowed):
        """got (committed) against want (fresh): |got - want| <= allowed(want, i, want_all)."""
        got, want = flat(got), flat(want)
        if len(got) != len(want):
            self.found.append("%s: %d values, the script now gives %d" % (what, len(got), len(want)))
            return
        for i, (g, w) in enumerate(zip(got, want)):
            tol = allowed(w, want)
            if not (abs(g - w) <= tol):  # NaN fails too
                self.found.append("%s[%d]: committed %.12g, the script now gives %.12g (|diff| %.3g > %.3g)"
                                  % (what, i, g, w, abs(g - w), tol))
                return


# ---- the tolerances of the C tests ----

def parity_array(w, arr):
    """tests/test_parity.c check_close: 1e-6 max(|want|, 1e-2 max|want|) (floor 1e-12)."""
    floor = 1e-2 * max((abs(x) for x in arr), default=0.0) or 1e-12
    return 1e-6 * max(abs(w), floor)


def parity_scalar(w, arr):
    """tests/test_parity.c, ELBO terms: 1e-6 max(|want|, 1e-3)."""
    return 1e-6 * max(abs(w), 1e-3)


def nets_abs(w, arr):
    """tests/test_nets.c check_parity: mu, log sigma, mean, scale within 1e-4."""
    return 1e-4


def nets_loglik(w, arr):
    """tests/test_nets.c check_parity: loglik within 1e-6 |want| + 1e-4."""
    return 1e-6 * abs(w) + 1e-4


def float32_input(w, arr):
    """Inputs the C tests read and do not check (weights, x, z, the RPM's X): drawn from seeded
    generators, they can move only by the last float32 bits a vectorised transform of the same
    draws rounds differently: a few ulps, 1e-6 (1 + |w|)."""
    return 1e-6 * (1.0 + abs(w))


def rpm_factors(w, arr):
    """tests/test_rpm.c parity with rpm.py: a and P within 1e-5 (|want| + 1e-3)."""
    return 1e-5 * (abs(w) + 1e-3)


def rpm_posterior(w, arr):
    """tests/test_rpm.c and tests/http/test_rpm.py: mu and var within 1e-4 (|want| + 1e-3)."""
    return 1e-4 * (abs(w) + 1e-3)


def exact(w, arr):
    return 0.0


# ---- per file ----

VB_RULES = {"codes_mu": parity_array, "codes_s2": parity_array, "start": parity_array,
            "expect": parity_array}
VB_SCALARS = ("loglik_codes", "kl_w", "kl_s", "kl_M", "kl_b")


def compare_vb(m, got, want):
    m.check(set(got) == set(want), "golden_vb.json: top-level keys %s, now %s" % (sorted(got), sorted(want)))
    m.check(got.get("generator") == want.get("generator"), "golden_vb.json: generator")
    gc, wc = got.get("cases", []), want.get("cases", [])
    m.check([c["name"] for c in gc] == [c["name"] for c in wc],
            "golden_vb.json: cases %s, the script now writes %s" % ([c["name"] for c in gc], [c["name"] for c in wc]))
    for g, w in zip(gc, wc):
        name = "golden_vb.json %s" % w["name"]
        m.check(set(g) == set(w), "%s: keys %s, now %s" % (name, sorted(g), sorted(w)))
        for k in w:
            if k not in g:
                continue
            if k in ("start", "expect"):
                m.check(set(g[k]) == set(w[k]), "%s.%s: keys" % (name, k))
                for f in w[k]:
                    if f not in g[k]:
                        continue
                    rule = parity_scalar if k == "expect" and f in VB_SCALARS else VB_RULES[k]
                    m.close("%s.%s.%s" % (name, k, f), g[k][f], w[k][f], rule)
            elif k in VB_RULES and w[k] is not None:
                m.check(g[k] is not None, "%s.%s: null in the committed file" % (name, k))
                if g[k] is not None:
                    m.close("%s.%s" % (name, k), g[k], w[k], VB_RULES[k])
            else:  # sizes, flags, the configuration's constants: as written
                m.check(g[k] == w[k], "%s.%s: committed %r, now %r" % (name, k, g[k], w[k]))


def compare_safetensors(m, name, got_path, want_path, rules):
    """Tensors by name (shape, dtype, values by rules[name], default float32_input) and the
    metadata, the provenance but for its date and torch version."""
    gt, gm = nets.read_safetensors(got_path)
    wt, wm = nets.read_safetensors(want_path)
    m.check(sorted(gt) == sorted(wt), "%s: tensors %s, the script now writes %s" % (name, sorted(gt), sorted(wt)))

    def meta(d):
        d = dict(d)
        if "vbmem.provenance" in d:
            p = json.loads(d["vbmem.provenance"])
            p.pop("date", None)
            p.pop("torch", None)
            d["vbmem.provenance"] = p
        return d
    m.check(meta(gm) == meta(wm), "%s: metadata %r, now %r" % (name, meta(gm), meta(wm)))
    for k in sorted(set(gt) & set(wt)):
        a, b = gt[k], wt[k]
        m.check(tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype,
                "%s %s: %s %s, now %s %s" % (name, k, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
        if tuple(a.shape) == tuple(b.shape):
            m.close("%s %s" % (name, k), a.double().reshape(-1).tolist(), b.double().reshape(-1).tolist(),
                    rules.get(k, float32_input))


NETS_IO_RULES = {"mu": nets_abs, "log_sigma": nets_abs, "mean": nets_abs, "scale": nets_abs,
                 "loglik": nets_loglik, "x": float32_input, "z": float32_input}
NETS_STEMS = ("golden_nets", "golden_nets_bernoulli", "golden_nets_bounded")


def compare_rpm_io(m, got, want):
    for k in ("model", "J"):
        m.check(got.get(k) == want.get(k), "golden_rpm_io.json %s: committed %r, now %r" % (k, got.get(k), want.get(k)))
    m.check(set(got) == set(want), "golden_rpm_io.json: keys %s, now %s" % (sorted(got), sorted(want)))
    m.close("golden_rpm_io.json lengthscale", got.get("lengthscale", math.nan), want["lengthscale"], float32_input)
    gc, wc = got.get("cases", []), want["cases"]
    m.check(len(gc) == len(wc), "golden_rpm_io.json: %d cases, now %d" % (len(gc), len(wc)))
    rules = {"X": float32_input, "a": rpm_factors, "P": rpm_factors, "mu": rpm_posterior, "var": rpm_posterior}
    for i, (g, w) in enumerate(zip(gc, wc)):
        m.check(set(g) == set(w) and g.get("T") == w["T"], "golden_rpm_io.json case %d: keys or T" % i)
        for k, rule in rules.items():
            if k in g:
                m.close("golden_rpm_io.json case %d (T %d) %s" % (i, w["T"], k), g[k], w[k], rule)


class GoldenFilesAreCurrent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.fresh = cls.tmp.name
        regenerate("golden_vb.py", os.path.join(cls.fresh, "golden_vb.json"))
        regenerate("golden_nets.py", cls.fresh)
        regenerate("golden_rpm.py", cls.fresh)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assertNone(self, m):
        if m.found:
            self.fail("committed golden files differ from what their scripts produce now (regenerate "
                      "them with the script, check the tests that read them):\n  " + "\n  ".join(m.found[:20]))

    def test_golden_vb(self):
        m = Mismatches()
        with open(os.path.join(DATA, "golden_vb.json")) as f:
            got = json.load(f)
        with open(os.path.join(self.fresh, "golden_vb.json")) as f:
            want = json.load(f)
        self.assertEqual(len(want["cases"]), 10)
        compare_vb(m, got, want)
        self.assertNone(m)

    def test_golden_nets(self):
        m = Mismatches()
        for stem in NETS_STEMS:
            compare_safetensors(m, stem + ".safetensors", os.path.join(DATA, stem + ".safetensors"),
                                os.path.join(self.fresh, stem + ".safetensors"), {})
            compare_safetensors(m, stem + "_io.safetensors", os.path.join(DATA, stem + "_io.safetensors"),
                                os.path.join(self.fresh, stem + "_io.safetensors"), NETS_IO_RULES)
        self.assertNone(m)

    def test_golden_rpm(self):
        m = Mismatches()
        compare_safetensors(m, "golden_rpm.safetensors", os.path.join(DATA, "golden_rpm.safetensors"),
                            os.path.join(self.fresh, "golden_rpm.safetensors"), {})
        with open(os.path.join(DATA, "golden_rpm_io.json")) as f:
            got = json.load(f)
        with open(os.path.join(self.fresh, "golden_rpm_io.json")) as f:
            want = json.load(f)
        compare_rpm_io(m, got, want)
        self.assertNone(m)

    def test_every_golden_file_is_checked(self):
        """A golden file added to tests/data without a comparison here fails."""
        fresh = sorted(f for f in os.listdir(self.fresh))
        committed = sorted(f for f in os.listdir(DATA) if f.startswith("golden_"))
        self.assertEqual(committed, fresh)
        checked = {"golden_vb.json", "golden_rpm.safetensors", "golden_rpm_io.json"} | {
            s + x for s in NETS_STEMS for x in (".safetensors", "_io.safetensors")}
        self.assertEqual(set(fresh), checked)


if __name__ == "__main__":
    unittest.main(verbosity=2)
