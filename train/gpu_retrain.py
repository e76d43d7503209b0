#!/usr/bin/python3
"""gpu_retrain.py -- retrain the bundled models in one command: every model of the
chosen datasets (its memory model and its VAE baseline, each from
train/configs/DATASET-KIND.args) as parallel train.py processes on one device,
all stopped by one global deadline, then the results packed into a few files.

  retrain: python3 train/gpu_retrain.py run --data gpu-data --out "$OUT" --deadline-s 520
  unpack:  python3 train/gpu_retrain.py unpack FILES_DIR DEST

`run` starts one process per model (train.py with --stop-at, --checkpoint,
--checkpoint-every and --result) and waits. Each process stops training at
start + deadline - reserve (after the step it is in), writes a resumable
checkpoint, evaluates the test ELBO (whole test set unless told otherwise) and
writes its model file; a process still running at start + deadline - pack-s is
terminated (its last periodic checkpoint stays). Then the memory model's
provenance gets its VAE's test ELBO, and everything that must come back is
packed under --out: one DATASET.tar.gz per dataset (model files, logs, results,
the processes' output, checkpoints), MANIFEST.json (every member's size and
sha256, each model's status) and summary.txt, at most --max-files files of at
most --max-file-bytes each. Checkpoints that do not fit in their dataset's
archive go to DATASET-ckpt.tar.gz; one that does not fit there either (or would
exceed the file count) is left out, named in the manifest and the summary.

`unpack` checks the manifest and every member's checksum, extracts into DEST
(DEST/models, DEST/runs, DEST/checkpoints, DEST/out), loads every model file
and prints a table; it exits non-zero on any mismatch or unloadable model."""
import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1024 * 1024
KINDS = ("mixture", "vae")
NAME_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train, stop by the deadline, pack")
    r.add_argument("--data", required=True, help="folder with one subfolder per dataset (train/gpu_carry.sh)")
    r.add_argument("--out", required=True, help="folder for the packed files (on the device machine: $OUT)")
    r.add_argument("--work", default=None, help="working folder (default: a new folder under /tmp)")
    r.add_argument("--datasets", default="fashion-mnist,omniglot", help="comma-separated; configs "
                   "train/configs/DATASET-mixture.args and DATASET-vae.args")
    r.add_argument("--device", default="auto", help="auto (cuda when PyTorch sees one, else cpu), cuda or cpu")
    r.add_argument("--deadline-s", type=float, default=520, help="everything done (packed) this many seconds "
                   "after the start")
    r.add_argument("--reserve-s", type=float, default=60, help="training stops this long before the deadline "
                   "(the test evaluation, the model file, the packing)")
    r.add_argument("--pack-s", type=float, default=10, help="processes still running this long before the "
                   "deadline are terminated")
    r.add_argument("--threads", type=int, default=0, help="intra-op threads per process (0: the CPUs / processes)")
    r.add_argument("--checkpoint-every", type=int, default=100, help="steps between periodic checkpoints")
    r.add_argument("--resume-dir", default=None, help="folder of MODEL.ckpt (and MODEL.log.jsonl) from an "
                   "earlier run: the models found there continue from them (default: DATA/resume if present)")
    r.add_argument("--max-files", type=int, default=8)
    r.add_argument("--max-file-bytes", type=int, default=16 * MIB)
    r.add_argument("--python", default=sys.executable, help="the Python that runs train.py")
    r.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                   help="an extra train.py argument for every process, after its config (repeatable; "
                        "the CPU rehearsal's small budget: --train-arg=--max-steps=3 ...)")
    u = sub.add_parser("unpack", help="check and extract the packed files")
    u.add_argument("src", help="folder holding MANIFEST.json and the archives")
    u.add_argument("dest", help="folder to extract into (created)")
    return p.parse_args(argv)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def models_of(datasets):
    return [(d, k, "%s-%s" % (d, k)) for d in datasets for k in KINDS]


def pick_device(want, python):
    if want != "auto":
        return want
    probe = subprocess.run([python, "-c", "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit("cannot run PyTorch with %s: %s" % (python, probe.stderr.strip()[-400:]))
    return probe.stdout.strip()


def start_process(a, ds, kind, name, work, device, threads, stop_at):
    cfg = os.path.join(HERE, "configs", name + ".args")
    if not os.path.isfile(cfg):
        raise SystemExit("no configuration %s" % cfg)
    data_root = os.path.join(a.data, ds)
    if not os.path.isdir(data_root):
        raise SystemExit("no data folder %s (train/gpu_carry.sh makes it)" % data_root)
    f = {x: os.path.join(work, name + x) for x in (".safetensors", ".log.jsonl", ".ckpt", ".result.json", ".out.txt")}
    argv = [a.python, os.path.join(HERE, "train.py"), "@" + cfg, "--data-root", data_root, "--device", device,
            "--threads", str(threads), "--out", f[".safetensors"], "--log", f[".log.jsonl"],
            "--checkpoint", f[".ckpt"], "--checkpoint-every", str(a.checkpoint_every),
            "--stop-at", "%.3f" % stop_at, "--result", f[".result.json"], "--quiet"]
    resumed = None
    if a.resume_dir and os.path.isfile(os.path.join(a.resume_dir, name + ".ckpt")):
        resumed = os.path.join(a.resume_dir, name + ".ckpt")
        shutil.copyfile(resumed, f[".ckpt"])  # returned even when no step is left to run
        old_log = os.path.join(a.resume_dir, name + ".log.jsonl")
        if os.path.isfile(old_log):
            with open(old_log, "rb") as src, open(f[".log.jsonl"], "wb") as dst:
                dst.write(src.read())
        argv += ["--resume", f[".ckpt"]]
    argv += a.train_arg
    out = open(f[".out.txt"], "w")
    out.write("$ %s\n" % " ".join(shlex.quote(x) for x in argv))
    out.flush()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return {"dataset": ds, "kind": kind, "name": name, "proc": proc, "outf": out, "files": f, "resumed": resumed}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_step(log_path):
    """The step of the last line of a training log that has one (None if none)."""
    step = None
    try:
        with open(log_path) as f:
            for line in f:
                try:
                    step = json.loads(line).get("step", step)
                except ValueError:
                    pass
    except OSError:
        pass
    return step


def record_baseline(work, ds):
    """The VAE's test ELBO in the memory model's provenance (as --baseline-elbo would)."""
    res = read_json(os.path.join(work, ds + "-vae.result.json"))
    model = os.path.join(work, ds + "-mixture.safetensors")
    if not res or not os.path.isfile(model):
        return
    sys.path.insert(0, HERE)
    from vbmtrain import nets
    tensors, meta = nets.read_safetensors(model)
    prov = json.loads(meta["vbmem.provenance"])
    prov["baseline_vae_test_elbo_per_frame"] = res["test_elbo_per_frame"]
    meta["vbmem.provenance"] = json.dumps(prov)
    nets.write_safetensors(model, tensors, meta)


def make_tar(path, members, work):
    """A .tar.gz of the named files of work (flat); returns its size."""
    with tarfile.open(path, "w:gz", compresslevel=6) as t:
        for m in members:
            t.add(os.path.join(work, m), arcname=m, recursive=False)
    return os.path.getsize(path)


def pack(a, work, procs, datasets, started, device):
    """Pack work's files under a.out (see the module's doc); returns the manifest."""
    os.makedirs(a.out, exist_ok=True)
    limit, budget = a.max_file_bytes, a.max_files - 2  # MANIFEST.json and summary.txt
    manifest = {"format": 1, "device": device, "deadline_s": a.deadline_s, "datasets": datasets,
                "archives": {}, "left_out": [], "models": {}}
    plans = []
    for ds in datasets:
        names = [p["name"] for p in procs if p["dataset"] == ds]
        main, ckpts = [], []
        for n in names:
            for ext in (".safetensors", ".log.jsonl", ".result.json", ".out.txt"):
                if os.path.isfile(os.path.join(work, n + ext)):
                    main.append(n + ext)
            if os.path.isfile(os.path.join(work, n + ".ckpt")):
                ckpts.append(n + ".ckpt")
        plans.append((ds, main, ckpts))
    if len(plans) > budget:
        raise SystemExit("%d datasets need more than %d files" % (len(plans), a.max_files))
    spare = budget - len(plans)
    for ds, main, ckpts in plans:
        archive = ds + ".tar.gz"
        path = os.path.join(a.out, archive)
        if make_tar(path, main + ckpts, work) <= limit:
            manifest["archives"][archive] = main + ckpts
            continue
        if make_tar(path, main, work) > limit:
            os.remove(path)
            raise SystemExit("%s: the models and logs alone exceed %d bytes" % (archive, limit))
        manifest["archives"][archive] = list(main)
        kept, cpath = [], os.path.join(a.out, ds + "-ckpt.tar.gz")
        for c in sorted(ckpts, key=lambda c: os.path.getsize(os.path.join(work, c))):
            size = os.path.getsize(os.path.join(work, c))
            if not spare:
                why = "no returned file left for it"
            elif make_tar(cpath, kept + [c], work) <= limit:
                kept.append(c)
                continue
            else:
                why = "does not fit in a returned file of %d bytes" % limit
            manifest["left_out"].append({"file": c, "bytes": size, "why": why})
        if kept:
            make_tar(cpath, kept, work)
            manifest["archives"][ds + "-ckpt.tar.gz"] = kept
            spare -= 1
        elif os.path.exists(cpath):
            os.remove(cpath)
    members = {}
    for archive, files in manifest["archives"].items():
        for m in files:
            members[m] = {"archive": archive, "bytes": os.path.getsize(os.path.join(work, m)),
                          "sha256": sha256_file(os.path.join(work, m))}
    manifest["members"] = members
    for p in procs:
        n = p["name"]
        res = read_json(p["files"][".result.json"])
        manifest["models"][n] = {
            "dataset": p["dataset"], "kind": p["kind"], "returncode": p["proc"].returncode,
            "terminated": p.get("terminated", False), "resumed_from": os.path.basename(p["resumed"] or "") or None,
            "model_file": (n + ".safetensors") if (n + ".safetensors") in members else None,
            "checkpoint": (n + ".ckpt") if (n + ".ckpt") in members else None,
            "test_elbo_per_frame": res.get("test_elbo_per_frame") if res else None,
            "test_episodes": res.get("test_episodes") if res else None,
            "steps": res.get("steps") if res else last_step(p["files"][".log.jsonl"]),
            "epochs": res.get("epochs") if res else None,
            "stopped_at_deadline": res.get("stopped_at_deadline") if res else None}
    manifest["seconds"] = round(time.time() - started, 1)
    summary = summarize(manifest)
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(summary)
    with open(os.path.join(a.out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    for name in os.listdir(a.out):
        size = os.path.getsize(os.path.join(a.out, name))
        if size > limit or not set(name) <= NAME_OK:
            raise SystemExit("packed file %s (%d bytes) breaks the limits" % (name, size))
    if len(os.listdir(a.out)) > a.max_files:
        raise SystemExit("%d packed files, more than %d" % (len(os.listdir(a.out)), a.max_files))
    return manifest, summary


def summarize(m):
    lines = ["retrain on %s, deadline %.0f s, packed after %.1f s" % (m["device"], m["deadline_s"], m["seconds"]),
             "%-24s %8s %7s %6s %12s %s" % ("model", "steps", "epochs", "rc", "test ELBO", "state")]
    for n, r in m["models"].items():
        state = ("terminated" if r["terminated"] else "stopped at deadline" if r["stopped_at_deadline"]
                 else "finished" if r["returncode"] == 0 else "failed")
        if r["resumed_from"]:
            state += ", resumed"
        if not r["model_file"]:
            state += ", NO MODEL FILE"
        if not r["checkpoint"]:
            state += ", no checkpoint returned"
        elbo = "%.2f" % r["test_elbo_per_frame"] if r["test_elbo_per_frame"] is not None else "-"
        lines.append("%-24s %8s %7s %6s %12s %s" % (n, r["steps"], r["epochs"], r["returncode"], elbo, state))
    for ds in m["datasets"]:
        mix, vae = m["models"].get(ds + "-mixture", {}), m["models"].get(ds + "-vae", {})
        a, b = mix.get("test_elbo_per_frame"), vae.get("test_elbo_per_frame")
        if a is not None and b is not None:
            lines.append("%s: memory %.2f vs VAE %.2f nats/frame (%s ahead by %.2f)"
                         % (ds, a, b, "memory" if a > b else "VAE", abs(a - b)))
    for archive, files in m["archives"].items():
        lines.append("packed %s: %d files" % (archive, len(files)))
    for lo in m["left_out"]:
        lines.append("LEFT OUT %s (%d bytes): %s" % (lo["file"], lo["bytes"], lo["why"]))
    return "\n".join(lines) + "\n"


def run(a):
    started = time.time()
    if a.resume_dir is None and os.path.isdir(os.path.join(a.data, "resume")):
        a.resume_dir = os.path.join(a.data, "resume")
    datasets = [d for d in a.datasets.split(",") if d]
    device = pick_device(a.device, a.python)
    work = a.work or "/tmp/vbmem-retrain-%d" % os.getpid()
    os.makedirs(work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    if os.listdir(a.out):
        raise SystemExit("--out %s is not empty" % a.out)
    models = models_of(datasets)
    threads = a.threads or max(1, len(os.sched_getaffinity(0)) // len(models))
    stop_at = started + a.deadline_s - a.reserve_s
    kill_at = started + a.deadline_s - a.pack_s
    print("retrain: %d processes on %s, %d threads each, training stops in %.0f s, work %s"
          % (len(models), device, threads, stop_at - started, work), flush=True)
    procs = [start_process(a, ds, kind, name, work, device, threads, stop_at) for ds, kind, name in models]
    while any(p["proc"].poll() is None for p in procs) and time.time() < kill_at:
        time.sleep(0.5)
    for p in procs:
        if p["proc"].poll() is None:
            p["terminated"] = True
            os.killpg(p["proc"].pid, signal.SIGTERM)
    for p in procs:
        try:
            p["proc"].wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.killpg(p["proc"].pid, signal.SIGKILL)
            p["proc"].wait()
        p["outf"].close()
    for ds in datasets:
        record_baseline(work, ds)
    manifest, summary = pack(a, work, procs, datasets, started, device)
    sys.stdout.write(summary)
    ok = all(r["model_file"] for r in manifest["models"].values())
    return 0 if ok else 1


def unpack(a):
    src, dest = a.src, a.dest
    manifest = read_json(os.path.join(src, "MANIFEST.json"))
    if not manifest or manifest.get("format") != 1:
        raise SystemExit("%s: no readable MANIFEST.json" % src)
    dirs = {".safetensors": "models", ".log.jsonl": "runs", ".result.json": "runs", ".out.txt": "out",
            ".ckpt": "checkpoints"}
    for d in set(dirs.values()):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    errors, seen = [], set()
    for archive, files in manifest["archives"].items():
        path = os.path.join(src, archive)
        if not os.path.isfile(path):
            errors.append("missing archive %s" % archive)
            continue
        with tarfile.open(path, "r:gz") as t:
            for info in t.getmembers():
                name = info.name
                if name not in files or not info.isfile() or "/" in name:
                    errors.append("%s: unexpected member %r" % (archive, name))
                    continue
                sub = next((d for ext, d in dirs.items() if name.endswith(ext)), None)
                blob = t.extractfile(info).read()
                want = manifest["members"].get(name, {})
                if hashlib.sha256(blob).hexdigest() != want.get("sha256") or len(blob) != want.get("bytes"):
                    errors.append("%s: %s does not match the manifest" % (archive, name))
                    continue
                with open(os.path.join(dest, sub, name), "wb") as f:
                    f.write(blob)
                seen.add(name)
        for m in files:
            if m not in seen:
                errors.append("%s: %s missing" % (archive, m))
    sys.path.insert(0, HERE)
    from vbmtrain import nets
    rows = []
    for n, r in manifest["models"].items():
        if not r["model_file"]:
            errors.append("%s: no model file came back" % n)
            continue
        path = os.path.join(dest, "models", r["model_file"])
        try:
            _, _, arch, mem, prov = nets.load_model(path)
        except Exception as exc:  # a model file that does not load is reported, not raised
            errors.append("%s: %s does not load: %s" % (n, r["model_file"], exc))
            continue
        elbo = prov.get("test_elbo_per_frame")
        if elbo is None or not math.isfinite(elbo) or elbo != r["test_elbo_per_frame"]:
            errors.append("%s: test ELBO %r in the model, %r in the manifest" % (n, elbo, r["test_elbo_per_frame"]))
        rows.append("%-24s %-9s %8s steps %12s nats/frame  %s" % (n, mem["kind"], prov.get("steps"), elbo, path))
    for lo in manifest["left_out"]:
        rows.append("left out on the device: %s (%d bytes): %s" % (lo["file"], lo["bytes"], lo["why"]))
    print("\n".join(rows))
    for e in errors:
        print("ERROR: " + e, file=sys.stderr)
    if not errors:
        print("unpacked into %s: models/, runs/, checkpoints/, out/" % dest)
    return 1 if errors else 0


def main(argv=None):
    a = parse_args(argv)
    return run(a) if a.cmd == "run" else unpack(a)


if __name__ == "__main__":
    sys.exit(main())
