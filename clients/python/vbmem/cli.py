"""The `vbmem` command line (also `python3 -m vbmem`): a thin layer over vbmem.Client.

Exit codes: 0 success, 2 usage errors (bad arguments, unreadable local files), 3 errors
answered by the server (its problem+json is printed), 4 connection failures (no server at the
URL, or a timeout). VBMEM_URL and VBMEM_API_KEY come from the environment.
"""
import argparse
import json
import math
import os
import re
import struct
import sys

from .client import Client, ConnectionFailed, VbmemError
from .png import PngError, decode_png, encode_png, fit_png

EXIT_USAGE, EXIT_SERVER, EXIT_CONNECTION = 2, 3, 4

__all__ = ["main", "read_npy", "contact_sheet", "EXIT_USAGE", "EXIT_SERVER", "EXIT_CONNECTION"]


class UsageError(Exception):
    """A problem with the command line or the local files (exit code 2)."""


# --------------------------------------------------------------------------------- helpers


def read_npy(path):
    """A 2-D little-endian float32/float64 .npy file (NumPy format 1.0-3.0) as a list of rows,
    read with the standard library."""
    import ast
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"\x93NUMPY"):
        raise UsageError("%s is not a .npy file" % path)
    major = data[6]
    if major == 1:
        hlen, off = struct.unpack("<H", data[8:10])[0], 10
    else:
        hlen, off = struct.unpack("<I", data[8:12])[0], 12
    header = ast.literal_eval(data[off:off + hlen].decode("latin1"))
    descr, shape = header["descr"], tuple(header["shape"])
    if header.get("fortran_order") or len(shape) != 2 or descr not in ("<f4", "<f8"):
        raise UsageError("%s: codes must be a 2-D C-order float32 or float64 array (got %s %r)"
                         % (path, descr, shape))
    t, c = shape
    fmt = "<%d%s" % (t * c, "f" if descr == "<f4" else "d")
    vals = struct.unpack_from(fmt, data, off + hlen)
    return [list(vals[i * c:(i + 1) * c]) for i in range(t)]


def _frames_hwc(images):
    """(list of HWC byte strings, h, w, c) of an Images result."""
    n, c, h, w = images.shape
    px, out = images.uint8(), []
    for i in range(n):
        chw = px[i * c * h * w:(i + 1) * c * h * w]
        if c == 1:
            out.append(chw)
        else:
            hwc = bytearray(h * w * c)
            for ch in range(c):
                hwc[ch::c] = chw[ch * h * w:(ch + 1) * h * w]
            out.append(bytes(hwc))
    return out, h, w, c


SHEET_MIN_TILE = 84  # pixels: a tile of a contact sheet is at least this wide (28 x 28: 3x)


def sheet_scale(h, w):
    """The whole-number scale of h x w frames on a contact sheet: the smallest that makes a tile
    SHEET_MIN_TILE pixels or more on its longer side (3 for 28 x 28 images; 1 from 84 up)."""
    return max(1, math.ceil(SHEET_MIN_TILE / max(1, h, w)))


def contact_sheet(frames, h, w, c, cols=None, gap=2, fill=255, scale=None):
    """One PNG tiling HWC frames (bytes) of h x w x c on a grid of `cols` columns (default
    ceil(sqrt(n))), each frame enlarged `scale` times by repeating its pixels (default
    sheet_scale(h, w): 3 for 28 x 28), `gap` pixels of `fill` between them."""
    n = len(frames)
    s = scale or sheet_scale(h, w)
    cols = cols or max(1, math.ceil(math.sqrt(n)))
    rows = max(1, math.ceil(n / cols))
    th, tw = h * s, w * s
    W, H = cols * tw + (cols + 1) * gap, rows * th + (rows + 1) * gap
    sheet = bytearray([fill]) * (W * H * c)
    for i, fr in enumerate(frames):
        x0, y0 = gap + (i % cols) * (tw + gap), gap + (i // cols) * (th + gap)
        for y in range(h):
            src = fr[y * w * c:(y + 1) * w * c]
            row = b"".join(src[x * c:(x + 1) * c] * s for x in range(w)) if s > 1 else src
            for k in range(s):
                dst = ((y0 + y * s + k) * W + x0) * c
                sheet[dst:dst + tw * c] = row
    return encode_png(bytes(sheet), W, H, c)


def _write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _progress(done, total, enabled):
    if not enabled:
        return
    width = 30
    filled = int(width * done / total) if total else width
    sys.stderr.write("\r[%s%s] %d/%d frames" % ("#" * filled, "." * (width - filled), done, total))
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _out(args, human, data):
    if args.json:
        print(json.dumps(data, indent=None, sort_keys=True))
    else:
        print(human)


def _fmt(x):
    return "n/a" if x is None else ("%.4f" % x if isinstance(x, float) else str(x))


def _session_line(s):
    return "%s  %-22s %-11s frames %-6d version %d" % (s.id, s.model or "(latent C=%d)" % s.code_size,
                                                      s.kind, s.frames, s.version)


# -------------------------------------------------------------------------------- commands


def cmd_models(c, args):
    models = c.models()
    lines = ["%s%s  %dx%dx%d images, code size %d, episodes of %d" % (
        m.name, " (default)" if m.default else "", *m.observation_shape, m.code_size,
        m.episode_length) for m in models]
    _out(args, "\n".join(lines) or "(no models)", [m.raw for m in models])


def cmd_health(c, args):
    h = c.healthz()
    r = c.readyz()
    _out(args, "%s, %s" % (h.get("status"), r.get("status")), {"healthz": h, "readyz": r})


def cmd_session_create(c, args):
    mem = {k: v for k, v in (("kind", args.kind), ("clusters", args.clusters), ("rows", args.rows),
                             ("groups", args.groups), ("retain_max", args.retain_max)) if v is not None}
    if mem and "kind" not in mem:
        raise UsageError("--clusters, --rows, --groups and --retain-max need --kind")
    solver = {"iterations": args.iterations} if args.iterations is not None else None
    s = c.create_session(model=args.model, code_size=args.code_size, memory=mem or None,
                         solver=solver, ttl_seconds=args.ttl)
    _out(args, s.id, s.raw)


def cmd_session_list(c, args):
    sessions = list(c.iter_sessions(page_size=args.page_size))
    _out(args, "\n".join(_session_line(s) for s in sessions) or "(no sessions)",
         [s.raw for s in sessions])


def cmd_session_show(c, args):
    s = c.get_session(args.session)
    lines = ["%-15s %s" % (k + ":", _fmt(v)) for k, v in (
        ("id", s.id), ("model", s.model), ("kind", s.kind), ("code_size", s.code_size),
        ("clusters", s.clusters), ("rows", s.rows), ("groups", s.groups), ("frames", s.frames),
        ("retained_codes", s.retained_codes), ("last_elbo", s.last_elbo), ("version", s.version),
        ("ttl_seconds", s.ttl_seconds), ("created", s.created), ("updated", s.updated),
        ("memory_bytes", s.memory_bytes))]
    _out(args, "\n".join(lines), s.raw)


def cmd_session_delete(c, args):
    c.delete_session(args.session)
    _out(args, "deleted %s" % args.session, {"deleted": args.session})


def _collect_inputs(paths, skipped=None):
    """('png', [paths]) or ('codes', rows) from the command line's FILES... | DIR. The entries of
    a DIR that are not .png files are left out and named in `skipped` (a list) when given."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(os.listdir(p))
            found = [os.path.join(p, f) for f in names if f.lower().endswith(".png")
                     and os.path.isfile(os.path.join(p, f))]
            if skipped is not None:
                skipped += [os.path.join(p, f) for f in names if os.path.join(p, f) not in found]
            if not found:
                raise UsageError("%s holds no .png files" % p)
            files += found
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise UsageError("%s: no such file or directory" % p)
    npys = [f for f in files if f.lower().endswith(".npy")]
    if npys:
        if len(files) != 1:
            raise UsageError("give one .npy file of codes, or PNG files")
        return "codes", read_npy(npys[0])
    return "png", files


def _name_the_file(e, chunk):
    """A VbmemError about observations[k] of a request of PNG files `chunk`, its detail led by
    the file's name (the server knows only the index)."""
    m = re.match(r"observations\[(\d+)\]", e.field or "")
    if m is None or int(m.group(1)) >= len(chunk):
        return e
    name = str(chunk[int(m.group(1))])
    return VbmemError(status=e.status, title=e.title, detail="%s: %s" % (name, e.detail),
                      field=e.field, request_id=e.request_id, type=e.type,
                      problem=dict(e.problem, file=name))


def _fit_files(c, session, paths):
    """The PNG files `paths` as the session's model takes them (fit_png, the web page's rule):
    bytes per file, each converted file named on stderr; a file that is not a PNG, or that
    needs converting and cannot be, is a UsageError naming it. A latent session takes no
    images: the files then go as they are (the server refuses them)."""
    model = session.model and c.model(session.model)
    out = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError("%s: %s" % (p, e.strerror or e)) from None
        if not model:
            out.append(data)
            continue
        ch, h, w = model.observation_shape
        try:
            png, how = fit_png(data, w, h, ch)
        except PngError as e:
            raise UsageError("%s: %s" % (p, e)) from None
        if how is not None:
            print("vbmem: converted %s (%s)" % (p, how), file=sys.stderr)
        out.append(png)
    return out


def cmd_write(c, args):
    skipped = []
    kind, items = _collect_inputs(args.files, skipped)
    for p in skipped:
        print("vbmem: skipped %s (not a .png file)" % p, file=sys.stderr)
    mode, if_match = args.mode, args.if_match
    s = c.get_session(args.session)
    if mode is None:
        # no silent replace: a session that holds frames needs --replace or --append
        if s.frames:
            raise UsageError("session %s holds %d frames: give --replace to write over them or "
                             "--append to add to them" % (args.session, s.frames))
        mode = "replace"
        if if_match is None:  # and nobody wrote in between
            if_match = s.version
    episode = args.episode
    if episode is None:
        episode = c.model(s.model).episode_length if s.model else 64
    if episode < 1:
        raise UsageError("--episode must be at least 1")
    names = items
    if kind == "png":
        items = _fit_files(c, s, items)
    chunks = [items[i:i + episode] for i in range(0, len(items), episode)]
    show = sys.stderr.isatty() and not args.json
    results, done = [], 0
    _progress(0, len(items), show)
    for i, chunk in enumerate(chunks):
        m = mode if i == 0 else "append"
        im = if_match if i == 0 else None
        try:
            if kind == "png":
                r = c.write(args.session, images=chunk, mode=m, seed=args.seed,
                            iterations=args.iterations, if_match=im)
            else:
                r = c.write(args.session, codes=chunk, sigma2=args.sigma2, mode=m, seed=args.seed,
                            iterations=args.iterations, if_match=im)
        except VbmemError as e:
            if kind == "png" and not isinstance(e, ConnectionFailed):
                raise _name_the_file(e, names[i * episode:(i + 1) * episode]) from None
            raise
        except OSError as e:  # a file that cannot be read
            raise UsageError("%s: %s" % (getattr(e, "filename", None) or "?", e.strerror or e)) from None
        results.append(r)
        done += len(chunk)
        _progress(done, len(items), show)
    last = results[-1]
    human = "wrote %d frames in %d episode%s (%s%s); version %d, ELBO per frame %s" % (
        len(items), len(chunks), "" if len(chunks) == 1 else "s", mode,
        ", then appends" if len(chunks) > 1 else "", last.version, _fmt(last.elbo_per_frame))
    if skipped:
        human += "; skipped %d file%s that %s not .png" % (
            len(skipped), "" if len(skipped) == 1 else "s", "is" if len(skipped) == 1 else "are")
    _out(args, human, [r.raw for r in results])


def cmd_forget(c, args):
    kind, items = _collect_inputs(args.files)
    if kind == "png":
        r = c.forget(args.session, images=_fit_files(c, c.get_session(args.session), items), seed=args.seed, iterations=args.iterations,
                     if_match=args.if_match)
    else:
        r = c.forget(args.session, codes=items, sigma2=args.sigma2, seed=args.seed,
                     iterations=args.iterations, if_match=args.if_match)
    lines = ["forgot %d item%s (%s); version %d, %d frames, %d retained codes" % (
        len(r.removed), "" if len(r.removed) == 1 else "s",
        "exact: the retained codes left were refitted" if r.exact
        else "approximate: the memory was downdated", r.version, r.frames, r.retained_codes)]
    for x in r.removed:
        lines.append("  cue %d: %s, distance %s, clusters %s" % (
            x.cue, "retained code %d" % x.item if x.item is not None else "no retained code",
            _fmt(x.distance), x.clusters))
    _out(args, "\n".join(lines), r.raw)


def cmd_sample(c, args):
    has_images = c.get_session(args.session).model is not None
    if args.output and not has_images:
        raise UsageError("%s is a latent session: its samples are codes, not images (omit -o)"
                         % args.session)
    r = c.sample(args.session, count=args.n, seed=args.seed, cluster=args.cluster,
                 format="uint8" if has_images and args.output else "none", pixels=args.pixels)
    out = {"version": r.version, "count": len(r.codes), "files": [], "contact_sheet": None}
    if r.images is not None and args.output:
        os.makedirs(args.output, exist_ok=True)
        for i in range(len(r.images)):
            p = os.path.join(args.output, "sample_%03d.png" % i)
            _write_file(p, r.images.png(i))
            out["files"].append(p)
        frames, h, w, ch = _frames_hwc(r.images)
        p = os.path.join(args.output, "contact_sheet.png")
        _write_file(p, contact_sheet(frames, h, w, ch))
        out["contact_sheet"] = p
    if args.output is None or r.images is None:
        out["codes"] = r.codes.rows
    human = "%d samples (version %d)" % (len(r.codes), r.version)
    if out["files"]:
        human += " -> %s (%d PNGs and contact_sheet.png)" % (args.output, len(out["files"]))
    elif not args.json:
        human += "\n" + "\n".join(" ".join("%.4g" % v for v in row) for row in r.codes.rows)
    _out(args, human, out)


def cmd_read(c, args):
    cue = _fit_files(c, c.get_session(args.session), [args.image])[0]
    mask = None
    if args.mask:
        with open(args.mask, "rb") as f:
            mask = [f.read()]
    cue_noise = args.cue_noise
    if cue_noise is not None and cue_noise != "auto":
        try:
            cue_noise = float(cue_noise)
        except ValueError:
            raise UsageError("--cue-noise is a number or auto") from None
    r = c.read(args.session, images=[cue], mask=mask, mode=args.mode, cue_noise=cue_noise,
               candidates=args.candidates, steps=args.steps, seed=args.seed, format="uint8",
               addresses=False, answer=args.answer)
    os.makedirs(args.output, exist_ok=True)
    files, strip = [], []
    h = w = ch = None
    try:
        px, w0, h0, c0 = decode_png(cue)
        if mask:  # the cue as the server sees it: unknown pixels black
            m, mw, mh, mc = decode_png(mask[0])
            if (mw, mh) == (w0, h0):
                known = [any(m[i * mc:(i + 1) * mc]) for i in range(w0 * h0)]
                px = bytes(v if known[i // c0] else 0 for i, v in enumerate(px))
        strip.append((px, h0, w0, c0))
    except PngError:
        pass  # the strip shows the steps only (or the unmasked cue)
    for i, step in enumerate(r.steps):
        p = os.path.join(args.output, "step_%02d.png" % (i + 1))
        _write_file(p, step.images.png(0))
        files.append(p)
        frames, h, w, ch = _frames_hwc(step.images)
        strip.append((frames[0], h, w, ch))
    # the cue joins the strip when it has the steps' size (grey replicated for RGB steps)
    tiles = []
    for px, th, tw, tc in strip:
        if (th, tw) != (h, w):
            continue
        if tc != ch:
            px = bytes(b for v in px for b in (v, v, v)) if ch == 3 else px[0::3]
        tiles.append(px)
    sp = os.path.join(args.output, "strip.png")
    _write_file(sp, contact_sheet(tiles, h, w, ch, cols=len(tiles)))
    out = {"version": r.version, "steps": len(r.steps), "files": files, "strip": sp,
           "clusters": [s.clusters for s in r.steps], "familiarity": r.familiarity,
           "stopped_at": r.stopped_at}
    fam = " ".join("%.4g" % v for v in r.familiarity)
    n = len(r.steps)
    if r.stopped_at is None or r.stopped_at >= n - 1:
        stop = "still changing at its last step (%d)" % n if n > 1 else "one step"
    else:
        stop = "stopped changing at step %d of %d (every later step is the same)" % (
            r.stopped_at + 1, n)
    _out(args, "%d read steps (version %d) -> %s (step_NN.png, strip.png)\n"
         "familiarity %s (<= 0, larger = more familiar: 0 when the memory holds the cue's code "
         "exactly)\n%s" % (n, r.version, args.output, fam, stop), out)


def cmd_resize(c, args):
    if args.clusters is None and args.rows is None:
        raise UsageError("give --clusters and/or --rows")
    r = c.resize(args.session, clusters=args.clusters, rows=args.rows, seed=args.seed,
                 iterations=args.iterations, if_match=args.if_match)
    _out(args, "resized to H=%d K=%d; version %d, ELBO before %s, after %s" % (
        r.clusters, r.rows, r.version, _fmt(r.elbo_before), _fmt(r.elbo_after)), r.raw)


def cmd_export(c, args):
    mem = c.export_memory(args.session)
    text = json.dumps(mem)
    if args.output and args.output != "-":
        _write_file(args.output, text.encode())
        if args.json:
            print(json.dumps({"session": args.session, "file": args.output, "bytes": len(text)}))
        else:
            print("exported %s -> %s (%d bytes)" % (args.session, args.output, len(text)))
    else:
        print(text)


def cmd_import(c, args):
    try:
        with open(args.file, "rb") as f:
            mem = json.loads(f.read())
    except ValueError as e:
        raise UsageError("%s is not JSON: %s" % (args.file, e)) from None
    s = c.import_memory(args.session, mem, if_match=args.if_match)
    _out(args, "imported %s into %s; version %d" % (args.file, s.id, s.version), s.raw)


# ------------------------------------------------------------------------------------ parser


def build_parser():
    """The argparse parser of the command line."""
    def options(suppress):
        # the subcommands take the same options; SUPPRESS keeps their defaults from overwriting
        # values given before the subcommand
        d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
        o = argparse.ArgumentParser(add_help=False)
        o.add_argument("--url", default=d(None),
                       help="server URL (default $VBMEM_URL or http://127.0.0.1:8080)")
        o.add_argument("--api-key", default=d(None), help="API key (default $VBMEM_API_KEY)")
        o.add_argument("--ca-file", default=d(None),
                       help="PEM certificate authorities for an https URL (default $VBMEM_CA_FILE)")
        o.add_argument("--json", action="store_true", default=d(False), help="print JSON for scripts")
        o.add_argument("--timeout", type=float, default=d(60), help="seconds per request (60)")
        o.add_argument("--retries", type=int, default=d(3), help="retries on 503/429 (3)")
        return o

    top, common = options(False), options(True)
    p = argparse.ArgumentParser(prog="vbmem", parents=[top],
                                description="Command line of vbmemd, the episodic-memory daemon.",
                                epilog="exit codes: 0 ok, 2 usage error, 3 server error, "
                                       "4 connection failure")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(parent, name, func, help_):
        sp = parent.add_parser(name, parents=[common], help=help_, description=help_)
        sp.set_defaults(func=func)
        return sp

    add(sub, "models", cmd_models, "list the hosted models")
    add(sub, "health", cmd_health, "liveness and readiness of the server")
    sess = sub.add_parser("session", help="create, list, show or delete sessions",
                          description="create, list, show or delete sessions")
    ssub = sess.add_subparsers(dest="session_command", metavar="ACTION")
    ssub.required = True
    sp = add(ssub, "create", cmd_session_create, "create a session (prints its id)")
    sp.add_argument("--model", help="hosted model (default: the server's default model)")
    sp.add_argument("--code-size", type=int, help="a latent session of codes of this size")
    sp.add_argument("--kind", choices=["gaussian", "categorical", "mixture", "tree", "dkm"])
    sp.add_argument("--clusters", type=int, help="H")
    sp.add_argument("--rows", type=int, help="K")
    sp.add_argument("--groups", type=int, help="G (tree)")
    sp.add_argument("--retain-max", type=int, help="codes retained for refit and resize")
    sp.add_argument("--iterations", type=int, help="default VB iterations per write")
    sp.add_argument("--ttl", type=int, help="delete after this many idle seconds")
    sp = add(ssub, "list", cmd_session_list, "list every session (all pages)")
    sp.add_argument("--page-size", type=int, default=100, help="sessions per request (100)")
    sp = add(ssub, "show", cmd_session_show, "show one session")
    sp.add_argument("session")
    sp = add(ssub, "delete", cmd_session_delete, "delete one session")
    sp.add_argument("session")

    sp = add(sub, "write", cmd_write, "write PNG files (or a directory of them, or a .npy of "
             "codes) to a session; more than an episode is written as successive appends. A "
             "session that already holds frames needs --replace or --append: there is no "
             "default for it, because replacing would lose its memory without a word and "
             "appending may not be what was meant; an empty session is written with replace. "
             "Entries of a directory that are not .png files are skipped and named on stderr. "
             "A PNG that is not grey or not of the model's size is converted as the web page "
             "converts it (alpha over black, grey by luminance, stretched to the model's size) "
             "and named on stderr; one that needs converting must be 8-bit and non-interlaced.")
    sp.add_argument("session")
    sp.add_argument("files", nargs="+", metavar="FILE|DIR")
    how = sp.add_mutually_exclusive_group()
    how.add_argument("--replace", dest="mode", action="store_const", const="replace",
                     help="write over what the session holds")
    how.add_argument("--append", dest="mode", action="store_const", const="append",
                     help="add to what the session holds")
    how.add_argument("--mode", choices=["replace", "append"], dest="mode",
                     help="the same as --replace or --append")
    sp.add_argument("--episode", type=int,
                    help="frames per request (default: the model's episode length, else 64)")
    sp.add_argument("--sigma2", type=float, help="variance of .npy codes (default exact)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--iterations", type=int)
    sp.add_argument("--if-match", help="version the session must be at")

    sp = add(sub, "forget", cmd_forget, "forget the stored items nearest PNG files (or a "
             "directory of them, or a .npy of codes): exactly when the session retains codes, "
             "else approximately")
    sp.add_argument("session")
    sp.add_argument("files", nargs="+", metavar="FILE|DIR")
    sp.add_argument("--sigma2", type=float, help="variance of .npy codes (default exact)")
    sp.add_argument("--seed", type=int, help="seed of the refit over the retained codes left")
    sp.add_argument("--iterations", type=int, help="VB iterations of that refit")
    sp.add_argument("--if-match", help="version the session must be at")

    sp = add(sub, "sample", cmd_sample, "draw samples: PNGs plus contact_sheet.png in DIR")
    sp.add_argument("session")
    sp.add_argument("-n", type=int, default=16, help="how many (16)")
    sp.add_argument("-o", "--output", metavar="DIR", help="directory for the PNGs (without: "
                    "print the codes)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--cluster", type=int, help="fix the cluster (-1 draws it)")
    sp.add_argument("--pixels", choices=["mean", "sample"])

    sp = add(sub, "read", cmd_read, "iterative read of one image: step_NN.png for every step "
             "and strip.png (the cue, unknown pixels black, then the steps) in DIR")
    sp.add_argument("session")
    sp.add_argument("image", help="query PNG")
    sp.add_argument("--mask", help="PNG of the known pixels (non-zero = known)")
    sp.add_argument("--mode", choices=["recall", "mean", "sample"])
    sp.add_argument("--steps", type=int, default=5, help="read steps (5)")
    sp.add_argument("--cue-noise", help="a number or auto (recall only)")
    sp.add_argument("--candidates", type=int, help="recall candidates per step")
    sp.add_argument("--answer", choices=["clean", "blend"], help="recall only: clean (the "
                    "server's default: the decoder's mean, a mask's known pixels kept) or blend "
                    "(known pixels combined with the prediction given the cue noise)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("-o", "--output", metavar="DIR", required=True)

    sp = add(sub, "resize", cmd_resize, "change H and/or K of a session's memory")
    sp.add_argument("session")
    sp.add_argument("--clusters", type=int)
    sp.add_argument("--rows", type=int)
    sp.add_argument("--seed", type=int)
    sp.add_argument("--iterations", type=int)
    sp.add_argument("--if-match")

    sp = add(sub, "export", cmd_export, "export a session's memory as JSON")
    sp.add_argument("session")
    sp.add_argument("-o", "--output", metavar="FILE", help="file (default stdout)")
    sp = add(sub, "import", cmd_import, "import an exported memory into a session")
    sp.add_argument("session")
    sp.add_argument("file")
    sp.add_argument("--if-match")
    return p


def main(argv=None):
    """Run the command line; returns the exit code (0, 2 usage, 3 server, 4 connection)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    client = Client(url=args.url, api_key=args.api_key, timeout=args.timeout,
                    retries=args.retries, ca_file=args.ca_file)
    try:
        args.func(client, args)
    except ConnectionFailed as e:
        print("vbmem: %s" % e, file=sys.stderr)
        return EXIT_CONNECTION
    except VbmemError as e:
        if args.json:
            print(json.dumps(e.problem or {"status": e.status, "detail": e.detail}), file=sys.stderr)
        else:
            print("vbmem: server error %s" % e, file=sys.stderr)
        return EXIT_SERVER
    except (UsageError, OSError, ValueError) as e:
        print("vbmem: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
