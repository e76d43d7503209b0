#!/usr/bin/python3
"""test_gpu_retrain.py -- the one-command retrain of train/GPU.md rehearsed on the CPU at a tiny
budget, on small data this test writes (a Fashion-MNIST-shaped IDX pair and a small Omniglot):
train/gpu_carry.sh (checksums, the size check), train/gpu_retrain.sh (four parallel train.py
processes, --device cpu, stopped by step count or by the global deadline), the packing under OUT
(file count, sizes, names, the manifest), train/gpu_unpack.sh (checksums, every model file loaded),
resuming from the returned checkpoints, and checkpoints that do not fit being left out and said so."""
import gzip
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import types
import unittest

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "train"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_retrain  # noqa: E402
from test_train import make_small_omniglot  # noqa: E402
from vbmtrain import nets  # noqa: E402

MODELS = ["fashion-mnist-mixture", "fashion-mnist-vae", "omniglot-mixture", "omniglot-vae"]
# a small architecture and budget: 64 training frames = 4 episodes of 16 = 2 steps of 2 per pass
TINY = ["--code-size=8", "--filters=8", "--norm-groups=4", "--episode-length=16", "--batch=2", "--clusters=3",
        "--rows=2", "--iterations=3", "--train-frames=64", "--eval-episodes=1"]
LIMIT = 16 * 1024 * 1024


def write_idx_images(path, n, seed):
    """n 28 x 28 uint8 images (a few bright rectangles each) as a gzipped IDX file."""
    rnd = np.random.default_rng(seed)
    x = np.zeros((n, 28, 28), dtype=np.uint8)
    for i in range(n):
        for _ in range(3):
            r, c = rnd.integers(0, 20, 2)
            h, w = rnd.integers(3, 9, 2)
            x[i, r:r + h, c:c + w] = rnd.integers(100, 256)
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 28, 28) + x.tobytes())


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Retrain(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = cls.tmp.name
        cls.src = os.path.join(t, "src")
        os.makedirs(os.path.join(cls.src, "fashion-mnist"))
        os.makedirs(os.path.join(cls.src, "omniglot"))
        write_idx_images(os.path.join(cls.src, "fashion-mnist", "train-images-idx3-ubyte.gz"), 96, 1)
        write_idx_images(os.path.join(cls.src, "fashion-mnist", "t10k-images-idx3-ubyte.gz"), 32, 2)
        make_small_omniglot(os.path.join(cls.src, "omniglot", "omniglot.tar.gz"))
        rows = []
        for rel in ("fashion-mnist/train-images-idx3-ubyte.gz", "fashion-mnist/t10k-images-idx3-ubyte.gz",
                    "omniglot/omniglot.tar.gz"):
            p = os.path.join(cls.src, rel)
            rows.append("| `%s` | %s | `%s` |" % (rel, format(os.path.getsize(p), ","), sha256(p)))
        with open(os.path.join(cls.src, "README.md"), "w") as f:
            f.write("| file | bytes | sha256 |\n| --- | ---: | --- |\n" + "\n".join(rows) + "\n")
        cls.data = os.path.join(t, "gpu-data")
        r = cls.carry("--src", cls.src, "--dest", cls.data)
        if r.returncode != 0:
            raise AssertionError("gpu_carry.sh failed: %s %s" % (r.stdout, r.stderr))
        cls.carry_out = r.stdout

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @staticmethod
    def carry(*args):
        return subprocess.run(["sh", os.path.join(ROOT, "train", "gpu_carry.sh")] + list(args),
                              capture_output=True, text=True)

    def retrain(self, name, *args, train_args=()):
        out = os.path.join(self.tmp.name, name + "-out")
        work = os.path.join(self.tmp.name, name + "-work")
        env = dict(os.environ, OUT=out, PYTHON=sys.executable, OMP_NUM_THREADS="1")
        argv = ["sh", os.path.join(ROOT, "train", "gpu_retrain.sh"), "--data", self.data, "--work", work,
                "--device", "cpu", "--threads", "1"] + list(args)
        argv += ["--train-arg=" + a for a in TINY + list(train_args)]
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        return r, out, work

    def unpack(self, out, name):
        dest = os.path.join(self.tmp.name, name + "-unpacked")
        r = subprocess.run(["sh", os.path.join(ROOT, "train", "gpu_unpack.sh"), out, dest],
                           capture_output=True, text=True, env=dict(os.environ, PYTHON=sys.executable))
        return r, dest

    def check_packed(self, out):
        """The returned files keep the device's limits; returns the manifest."""
        files = sorted(os.listdir(out))
        self.assertLessEqual(len(files), 8, files)
        for f in files:
            p = os.path.join(out, f)
            self.assertTrue(os.path.isfile(p), f)
            self.assertLessEqual(os.path.getsize(p), LIMIT, f)
            self.assertTrue(set(f) <= gpu_retrain.NAME_OK, f)
        self.assertIn("MANIFEST.json", files)
        self.assertIn("summary.txt", files)
        self.assertIn("fashion-mnist.tar.gz", files)
        self.assertIn("omniglot.tar.gz", files)
        with open(os.path.join(out, "MANIFEST.json")) as f:
            return json.load(f)

    def check_unpacked(self, dest, manifest, steps=None):
        """Every model file loads, is the kind and dataset its name says, and carries the test ELBO of
        its result file; the memory model records its VAE's. Returns {model: result}."""
        results = {}
        for m in MODELS:
            ds, kind = m.rsplit("-", 1)
            enc, dec, arch, mem, prov = nets.load_model(os.path.join(dest, "models", m + ".safetensors"))
            self.assertEqual(mem["kind"], "mixture" if kind == "mixture" else "none", m)
            self.assertEqual(prov["dataset"], ds, m)
            with open(os.path.join(dest, "runs", m + ".result.json")) as f:
                res = json.load(f)
            self.assertTrue(math.isfinite(res["test_elbo_per_frame"]), m)
            self.assertEqual(prov["test_elbo_per_frame"], res["test_elbo_per_frame"], m)
            self.assertEqual(manifest["models"][m]["test_elbo_per_frame"], res["test_elbo_per_frame"], m)
            self.assertEqual(prov["steps"], res["steps"], m)
            if steps is not None:
                self.assertEqual(res["steps"], steps, m)
            self.assertEqual(res["device"], "cpu")
            results[m] = res
            info = subprocess.run([sys.executable, os.path.join(ROOT, "train", "model_info.py"),
                                   os.path.join(dest, "models", m + ".safetensors")], capture_output=True, text=True)
            self.assertEqual(info.returncode, 0, info.stderr)
            self.assertIn("vbmem.provenance", info.stdout)
        for ds in ("fashion-mnist", "omniglot"):
            prov = nets.load_model(os.path.join(dest, "models", ds + "-mixture.safetensors"))[4]
            self.assertEqual(prov["baseline_vae_test_elbo_per_frame"], results[ds + "-vae"]["test_elbo_per_frame"])
        return results

    def test_carry_checks_checksums(self):
        self.assertIn("ok omniglot/omniglot.tar.gz", self.carry_out)
        self.assertEqual(sorted(os.listdir(self.data)), ["fashion-mnist", "omniglot"])
        self.assertEqual(sorted(os.listdir(os.path.join(self.data, "fashion-mnist"))),
                         ["t10k-images-idx3-ubyte.gz", "train-images-idx3-ubyte.gz"])
        bad = os.path.join(self.tmp.name, "bad-src")
        shutil.copytree(self.src, bad)
        with open(os.path.join(bad, "omniglot", "omniglot.tar.gz"), "ab") as f:
            f.write(b"\0")
        r = self.carry("--src", bad, "--dest", os.path.join(self.tmp.name, "bad-data"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("omniglot/omniglot.tar.gz", r.stderr)
        r = self.carry("--src", self.src, "--dest", os.path.join(self.tmp.name, "small-data"), "--limit", "1000")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("more than 1000", r.stderr)

    def test_step_budget_packed_and_unpacked(self):
        # a deadline far beyond the run: every process ends by its step count
        r, out, work = self.retrain("steps", "--deadline-s", "3600", train_args=["--max-steps=2"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        manifest = self.check_packed(out)
        self.assertEqual(manifest["left_out"], [])
        for m in MODELS:
            st = manifest["models"][m]
            self.assertEqual((st["returncode"], st["terminated"], st["stopped_at_deadline"]), (0, False, False), m)
            for ext in (".safetensors", ".log.jsonl", ".result.json", ".out.txt", ".ckpt"):
                self.assertIn(m + ext, manifest["members"], m + ext)
            self.assertIn(m, r.stdout)
        ur, dest = self.unpack(out, "steps")
        self.assertEqual(ur.returncode, 0, ur.stdout + ur.stderr)
        self.check_unpacked(dest, manifest, steps=2)
        # a member that does not match its manifest entry is refused
        with open(os.path.join(out, "MANIFEST.json")) as f:
            bad = json.load(f)
        bad["members"]["omniglot-vae.safetensors"]["sha256"] = "0" * 64
        broken = os.path.join(self.tmp.name, "broken-out")
        shutil.copytree(out, broken)
        with open(os.path.join(broken, "MANIFEST.json"), "w") as f:
            json.dump(bad, f)
        ur, _ = self.unpack(broken, "broken")
        self.assertNotEqual(ur.returncode, 0)
        self.assertIn("omniglot-vae.safetensors does not match", ur.stderr)
        # checkpoints too large for a returned file are left out, and the manifest and summary say so
        self.pack_small_limit(work, manifest)

    def pack_small_limit(self, work, manifest):
        sizes = {m: os.path.getsize(os.path.join(work, m + ".ckpt")) for m in MODELS}
        main = {}
        for ds in ("fashion-mnist", "omniglot"):
            files = [m + ext for m in MODELS if m.startswith(ds + "-")
                     for ext in (".safetensors", ".log.jsonl", ".result.json", ".out.txt")]
            main[ds] = gpu_retrain.make_tar(os.path.join(self.tmp.name, ds + "-main.tar.gz"), files, work)
        limit = max(main.values())
        self.assertLess(limit, min(sizes.values()), "the test's premise: a checkpoint is larger than the models")
        out = os.path.join(self.tmp.name, "small-out")
        a = types.SimpleNamespace(out=out, max_file_bytes=limit, max_files=8, deadline_s=3600)
        procs = [{"name": m, "dataset": m.rsplit("-", 1)[0], "kind": m.rsplit("-", 1)[1], "resumed": None,
                  "proc": types.SimpleNamespace(returncode=0),
                  "files": {x: os.path.join(work, m + x) for x in (".result.json", ".log.jsonl")}} for m in MODELS]
        small, summary = gpu_retrain.pack(a, work, procs, ["fashion-mnist", "omniglot"], 0.0, "cpu")
        self.assertEqual(sorted(lo["file"] for lo in small["left_out"]), sorted(m + ".ckpt" for m in MODELS))
        for m in MODELS:
            self.assertIn("LEFT OUT %s.ckpt" % m, summary)
            self.assertIsNone(small["models"][m]["checkpoint"])
            self.assertEqual(small["models"][m]["model_file"], m + ".safetensors")
        self.assertEqual(sorted(os.listdir(out)), ["MANIFEST.json", "fashion-mnist.tar.gz", "omniglot.tar.gz",
                                                   "summary.txt"])
        for f in os.listdir(out):
            self.assertLessEqual(os.path.getsize(os.path.join(out, f)), limit, f)
        ur, dest = self.unpack(out, "small")
        self.assertEqual(ur.returncode, 0, ur.stdout + ur.stderr)
        self.check_unpacked(dest, small)
        self.assertEqual(os.listdir(os.path.join(dest, "checkpoints")), [])
        # a limit one checkpoint fits under (two do not): each dataset's smaller checkpoint comes back
        # in DATASET-ckpt.tar.gz, the other is left out and named; none is both or neither
        a.out, a.max_file_bytes = os.path.join(self.tmp.name, "split-out"), max(sizes.values()) + 4096
        self.assertLess(a.max_file_bytes, 2 * min(sizes.values()), "the test's premise: two do not fit")
        split, summary = gpu_retrain.pack(a, work, procs, ["fashion-mnist", "omniglot"], 0.0, "cpu")
        left = sorted(lo["file"] for lo in split["left_out"])
        for ds in ("fashion-mnist", "omniglot"):
            kept = split["archives"].get(ds + "-ckpt.tar.gz")
            self.assertIsNotNone(kept, ds)
            self.assertEqual(len(kept), 1, kept)
            self.assertTrue(kept[0].startswith(ds + "-"), kept)
            self.assertNotIn(ds + "-ckpt.tar.gz", split["archives"][ds + ".tar.gz"])
        got = sorted(c for files in split["archives"].values() for c in files if c.endswith(".ckpt"))
        self.assertEqual(sorted(got + left), sorted(m + ".ckpt" for m in MODELS))
        self.assertEqual(len(left), 2)
        for c in left:
            self.assertIn("LEFT OUT " + c, summary)
        self.assertLessEqual(len(os.listdir(a.out)), 8)
        for f in os.listdir(a.out):
            self.assertLessEqual(os.path.getsize(os.path.join(a.out, f)), a.max_file_bytes, f)
        ur, dest = self.unpack(a.out, "split")
        self.assertEqual(ur.returncode, 0, ur.stdout + ur.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(dest, "checkpoints"))), got)
        for c in got:
            ck = torch.load(os.path.join(dest, "checkpoints", c), map_location="cpu")
            self.assertEqual(ck["step"], split["models"][c[:-5]]["steps"], c)

    def test_deadline_stops_and_checkpoints_resume(self):
        # no step limit (10^5 passes): the deadline stops every process (training stops 15 s after the
        # start, the rest of the 300 s for the test evaluation and the packing), each with a checkpoint
        r, out, work = self.retrain("deadline", "--deadline-s", "300", "--reserve-s", "285",
                                    train_args=["--epochs=100000"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        manifest = self.check_packed(out)
        for m in MODELS:
            st = manifest["models"][m]
            self.assertEqual((st["returncode"], st["terminated"], st["stopped_at_deadline"]), (0, False, True), m)
            self.assertGreaterEqual(st["steps"], 1, m)
            self.assertEqual(st["checkpoint"], m + ".ckpt")
        self.assertIn("stopped at deadline", r.stdout)
        ur, dest = self.unpack(out, "deadline")
        self.assertEqual(ur.returncode, 0, ur.stdout + ur.stderr)
        first = self.check_unpacked(dest, manifest)
        for m in MODELS:
            prov = nets.load_model(os.path.join(dest, "models", m + ".safetensors"))[4]
            self.assertTrue(prov["stopped_at_deadline"], m)
        # the next run continues from the returned checkpoints (gpu_carry.sh --resume puts them beside
        # the data): two more steps each, and each log holds the first run's lines too
        r = self.carry("--src", self.src, "--dest", self.data, "--resume", dest)
        self.assertEqual(r.returncode, 0, r.stderr)
        target = max(first[m]["steps"] for m in MODELS) + 2
        r, out2, _ = self.retrain("resumed", "--deadline-s", "3600",
                                  train_args=["--epochs=100000", "--max-steps=%d" % target])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        manifest2 = self.check_packed(out2)
        ur, dest2 = self.unpack(out2, "resumed")
        self.assertEqual(ur.returncode, 0, ur.stdout + ur.stderr)
        self.check_unpacked(dest2, manifest2, steps=target)
        for m in MODELS:
            self.assertEqual(manifest2["models"][m]["resumed_from"], m + ".ckpt")
            self.assertFalse(manifest2["models"][m]["stopped_at_deadline"])
            with open(os.path.join(dest2, "out", m + ".out.txt")) as f:
                self.assertIn("resumed from", f.read())
            with open(os.path.join(dest2, "runs", m + ".log.jsonl")) as f:
                lines = [json.loads(x) for x in f]
            done = [x for x in lines if "test_elbo_per_frame" in x]
            self.assertEqual([x["steps"] for x in done], [first[m]["steps"], target], m)
        shutil.rmtree(os.path.join(self.data, "resume"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
