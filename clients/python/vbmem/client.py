"""The vbmemd HTTP/JSON client (standard library only; NumPy and PIL used when installed).

The contract is vbmem's proto/openapi.yaml. Codes travel as base64 float32 tensors; images as
base64 PNGs (files and PNG bytes untouched, PIL images saved as PNG), uint8 tensors (uint8
arrays) or float32 tensors (float arrays in [0, 1]), NCHW.
"""
import base64
import json
import os
import random
import socket
import ssl
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import png as _png

__all__ = [
    "Client", "VbmemError", "ConnectionFailed", "Matrix", "Images", "Model", "Session",
    "SessionPage", "FitResult", "SampleResult", "ReadStep", "ReadResult", "EncodeResult",
    "DecodeResult", "DEFAULT_URL",
]

DEFAULT_URL = "http://127.0.0.1:8080"
MAX_RETRY_WAIT = 60.0  # seconds: a longer Retry-After is waited this long
OUTCOME_UNKNOWN = "urn:vbmem:problem:outcome-unknown"  # a 503 whose write the store may hold


class VbmemError(Exception):
    """An error answered by vbmemd (an RFC 9457 problem+json), or a failure to reach it.

    Attributes: status (HTTP status; None when the server was not reached), title, detail,
    field (the JSON path or header at fault, when one is), request_id, type, and problem (the
    whole problem document as a dict)."""

    def __init__(self, status=None, title="", detail="", field=None, request_id=None,
                 type=None, problem=None):
        self.status = status
        self.title = title
        self.detail = detail
        self.field = field
        self.request_id = request_id
        self.type = type
        self.problem = problem or {}
        msg = "%s %s: %s" % (status, title, detail) if status else (detail or title)
        if field:
            msg += " (field %s)" % field
        super().__init__(msg)


class ConnectionFailed(VbmemError):
    """The server could not be reached, or did not answer within the timeout (status None)."""


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _is_numpy(x):
    return type(x).__module__ == "numpy" and hasattr(x, "shape") and hasattr(x, "dtype")


def _is_pil(x):
    return hasattr(x, "mode") and hasattr(x, "tobytes") and hasattr(x, "size")


def _sid(session):
    sid = session.id if isinstance(session, Session) else str(session)
    return urllib.parse.quote(sid, safe="")


# ---------------------------------------------------------------------------------- results


class Matrix:
    """A T x C matrix of float32 codes as the server returned it (a base64 tensor or nested
    arrays). `rows` gives lists of floats (None for a non-finite value of a JSON matrix),
    `numpy()` a float32 array, `shape` the (T, C) pair."""

    def __init__(self, wire):
        self.wire = wire
        if isinstance(wire, dict):
            t, c = wire["shape"]
            vals = struct.unpack("<%df" % (t * c), base64.b64decode(wire["data"]))
            self.rows = [list(vals[i * c:(i + 1) * c]) for i in range(t)]
            self.shape = (t, c)
        else:
            self.rows = [list(r) for r in wire]
            self.shape = (len(self.rows), len(self.rows[0]) if self.rows else 0)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, i):
        return self.rows[i]

    def __iter__(self):
        return iter(self.rows)

    def numpy(self):
        """The matrix as a float32 NumPy array (requires NumPy)."""
        np = _numpy()
        if np is None:
            raise RuntimeError("NumPy is not installed")
        return np.array([[float("nan") if v is None else v for v in r] for r in self.rows],
                        dtype=np.float32).reshape(self.shape)

    def __repr__(self):
        return "Matrix(shape=%r)" % (self.shape,)


class Images:
    """A batch of n images as the server returned them (PNG strings, a uint8 or float32 tensor,
    or nested arrays). `shape` is (n, c, h, w) (for PNGs, known once decoded); `png(i)` gives
    frame i as PNG bytes, `uint8()` all pixels as NCHW bytes, `numpy()` an array (uint8 for
    PNG/uint8, float32 otherwise), `pil()` a list of PIL images."""

    def __init__(self, wire):
        self.wire = wire
        self._pngs = None
        self._u8 = None
        self._f32 = None
        if isinstance(wire, list) and (not wire or isinstance(wire[0], str)):
            self.format = "png"
            self._pngs = [base64.b64decode(s.split(",", 1)[1] if s.startswith("data:") else s)
                          for s in wire]
            self.shape = None
            if self._pngs:
                _, w, h, c = _png.decode_png(self._pngs[0])
                self.shape = (len(self._pngs), c, h, w)
        elif isinstance(wire, dict):
            self.format = wire["dtype"]
            self.shape = tuple(wire["shape"])
            raw = base64.b64decode(wire["data"])
            if self.format == "uint8":
                self._u8 = raw
            else:
                self._f32 = struct.unpack("<%df" % (len(raw) // 4), raw)
        else:
            self.format = "json"
            n, c, h = len(wire), len(wire[0]), len(wire[0][0])
            w = len(wire[0][0][0])
            self.shape = (n, c, h, w)
            self._f32 = [v for img in wire for ch in img for row in ch for v in row]

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def uint8(self):
        """Every pixel as bytes, NCHW; float pixels x become min(255, floor(256 x))."""
        if self._u8 is None:
            if self._pngs is not None:
                out = bytearray()
                for p in self._pngs:
                    px, w, h, c = _png.decode_png(p)
                    for ch in range(c):  # HWC -> CHW
                        out += px[ch::c]
                self._u8 = bytes(out)
            else:
                self._u8 = bytes(min(255, max(0, int(256 * v))) for v in self._f32)
        return self._u8

    def png(self, i):
        """Frame i as PNG bytes (8-bit grey, or RGB for three channels)."""
        if self._pngs is not None:
            return self._pngs[i]
        n, c, h, w = self.shape
        frame = self.uint8()[i * c * h * w:(i + 1) * c * h * w]
        if c == 1:
            return _png.encode_png(frame, w, h, 1)
        hwc = bytearray(h * w * 3)
        for ch in range(3):
            hwc[ch::3] = frame[ch * h * w:(ch + 1) * h * w]
        return _png.encode_png(bytes(hwc), w, h, 3)

    def numpy(self):
        """An (n, c, h, w) NumPy array: uint8 for PNG and uint8 images, float32 otherwise."""
        np = _numpy()
        if np is None:
            raise RuntimeError("NumPy is not installed")
        if self._f32 is not None:
            return np.array(self._f32, dtype=np.float32).reshape(self.shape)
        return np.frombuffer(self.uint8(), dtype=np.uint8).reshape(self.shape).copy()

    def pil(self):
        """A list of PIL images (mode L or RGB; requires Pillow)."""
        import io
        from PIL import Image
        return [Image.open(io.BytesIO(self.png(i))).convert("L" if self.shape[1] == 1 else "RGB")
                for i in range(len(self))]

    def __repr__(self):
        return "Images(format=%r, shape=%r)" % (self.format, self.shape)


def _images(wire):
    return None if wire is None else Images(wire)


@dataclass
class Model:
    """A hosted model (GET /v1/models): name, whether it is the default, observation shape
    (channels, height, width), code size, episode length, memory defaults, and the raw dict."""
    name: str
    default: bool
    observation_shape: tuple
    code_size: int
    episode_length: int
    defaults: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def _from(cls, d):
        return cls(d["name"], d["default"], tuple(d["observation_shape"]), d["code_size"],
                   d["episode_length"], d.get("defaults", {}), d)


@dataclass
class Session:
    """A session (GET /v1/sessions/{id}): id, model (None for a latent session), kind, sizes,
    frames written, retained codes, last ELBO, version (the ETag), TTL, times, and the raw dict.
    A session of kind "temporal" has no rows, clusters, groups or retained codes (None); its
    components, attributes, sequences and free energy are in raw."""
    id: str
    model: Optional[str]
    kind: str
    code_size: int
    rows: int
    clusters: int
    groups: int
    frames: int
    retained_codes: int
    last_elbo: Optional[float]
    version: int
    ttl_seconds: int
    created: str
    updated: str
    memory_bytes: int
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def _from(cls, d):
        return cls(d["id"], d.get("model"), d["kind"], d["code_size"], d.get("rows"),
                   d.get("clusters"), d.get("groups"), d["frames"], d.get("retained_codes"),
                   d.get("last_elbo"), d["version"], d["ttl_seconds"], d["created"], d["updated"],
                   d["memory_bytes"], d)


@dataclass
class SessionPage:
    """One page of list_sessions: the sessions and the cursor of the next page (None at the end)."""
    sessions: List[Session]
    next_cursor: Optional[str]


@dataclass
class FitResult:
    """The result of a write or resize: the new version, ELBO per frame (and the terms in
    `elbo`), iterations, converged, frames, retained codes, sizes, cluster usage, timings; for a
    resize also elbo_before / elbo_after; `raw` is the whole response."""
    version: int
    mode: Optional[str]
    elbo_per_frame: Optional[float]
    elbo: Dict[str, Any]
    iterations: int
    converged: bool
    time_limited: bool
    frames: int
    retained_codes: int
    clusters: int
    rows: int
    groups: int
    cluster_usage: Any
    timings: Dict[str, Any]
    addresses: Any = None
    elbo_before: Optional[float] = None
    elbo_after: Optional[float] = None
    raw: Dict[str, Any] = field(default=None, repr=False)

    @classmethod
    def _from(cls, d):
        return cls(d["version"], d.get("mode"), d["elbo"].get("per_frame"), d["elbo"],
                   d["iterations"], d["converged"], d["time_limited"], d["frames"],
                   d["retained_codes"], d["clusters"], d["rows"], d["groups"],
                   d.get("cluster_usage"), d["timings"], d.get("addresses"),
                   d.get("elbo_before"), d.get("elbo_after"), d)


@dataclass
class Forgotten:
    """One cue of a forget: its index, the retained code it removed (its index among the
    retained codes before the forget; None when the memory was downdated), the distance from
    the cue to that code (downdate: to the memory's posterior-mean read of the cue) and the
    cue's most probable cluster of each group."""
    cue: int
    item: Optional[int]
    distance: Optional[float]
    clusters: Optional[List[int]]


@dataclass
class ForgetResult:
    """The result of a forget: the new version, whether it was exact (the memory is what it
    would be had the items never been written: the refit over the retained codes left) or the
    approximate downdate, what each cue removed, and the fit members (elbo None when nothing
    was refitted); `raw` is the whole response."""
    version: int
    exact: bool
    removed: List[Forgotten]
    elbo_per_frame: Optional[float]
    elbo: Optional[Dict[str, Any]]
    iterations: int
    frames: int
    retained_codes: int
    cluster_usage: Any
    timings: Dict[str, Any]
    raw: Dict[str, Any] = field(default=None, repr=False)

    @classmethod
    def _from(cls, d):
        elbo = d.get("elbo")
        return cls(d["version"], d["exact"],
                   [Forgotten(x["cue"], x["item"], x["distance"], x["clusters"]) for x in d["removed"]],
                   elbo.get("per_frame") if elbo else None, elbo, d["iterations"], d["frames"],
                   d["retained_codes"], d.get("cluster_usage"), d["timings"], d)


@dataclass
class SampleResult:
    """Samples of a memory: version, codes (Matrix), the cluster of each (count x G), and the
    decoded images (Images, None for a latent session or format "none")."""
    version: int
    codes: Matrix
    clusters: List[List[int]]
    images: Optional[Images]
    raw: Dict[str, Any] = field(repr=False)


@dataclass
class ReadStep:
    """One step of an iterative read: codes (Matrix), most probable clusters (T x G), the
    addressing posterior (dict or None) and the step's images (Images or None)."""
    codes: Matrix
    clusters: List[List[int]]
    addresses: Any
    images: Optional[Images]


@dataclass
class ReadResult:
    """An iterative read: the version read, every step (each the state after that step), for
    a read without a query the start (codes and images sampled from memory), `familiarity`
    (one number per query frame, <= 0, larger = more familiar: -|z - zhat|^2 / (2 sigma_z^2 n)
    of the cue's code z against the memory's reconstruction zhat, 0 when the memory holds z
    exactly; compare it within one session or sessions of one configuration) and `stopped_at`
    (the first step from which every later step is identical; len(steps) - 1 when the read
    was still changing at its last step)."""
    version: int
    steps: List[ReadStep]
    start_codes: Optional[Matrix]
    start_images: Optional[Images]
    raw: Dict[str, Any] = field(repr=False)
    familiarity: List[float] = field(default_factory=list)
    stopped_at: Optional[int] = None


@dataclass
class EncodeResult:
    """Codes of images under a model: mu and sigma2 (Matrix each)."""
    model: str
    mu: Matrix
    sigma2: Matrix
    raw: Dict[str, Any] = field(repr=False)


@dataclass
class DecodeResult:
    """Images decoded from codes under a model."""
    model: str
    images: Images
    raw: Dict[str, Any] = field(repr=False)


# ------------------------------------------------------------------------- request encoding


def encode_codes(codes):
    """Codes (a T x C NumPy array, a list of rows, or a Matrix) as a base64 float32 tensor."""
    if isinstance(codes, Matrix):
        codes = codes.rows
    if isinstance(codes, dict):
        return codes
    if _is_numpy(codes):
        np = _numpy()
        arr = np.asarray(codes, dtype="<f4")
        if arr.ndim != 2:
            raise ValueError("codes must be 2-D (T x C), not shape %r" % (arr.shape,))
        return {"dtype": "float32", "shape": list(arr.shape),
                "data": base64.b64encode(arr.tobytes()).decode()}
    rows = [list(r) for r in codes]
    if not rows or not rows[0]:
        raise ValueError("codes must be a non-empty T x C matrix")
    c = len(rows[0])
    if any(len(r) != c for r in rows):
        raise ValueError("codes rows differ in length")
    data = struct.pack("<%df" % (len(rows) * c), *[float(v) for r in rows for v in r])
    return {"dtype": "float32", "shape": [len(rows), c], "data": base64.b64encode(data).decode()}


def _sigma2(s):
    if s is None or isinstance(s, (int, float)):
        return s
    return encode_codes(s)


def _read_png_file(p):
    with open(p, "rb") as f:
        return base64.b64encode(f.read()).decode()


def encode_images(images, mask=False):
    """Images in a wire form of proto/openapi.yaml: PNG bytes or file paths (a list, or one)
    go as base64 PNG strings untouched; a NumPy array n x h x w or n x c x h x w goes as a uint8
    tensor (uint8 or bool arrays, and every mask) or a float32 tensor (values in [0, 1]); PIL
    images as PNGs saved by PIL; an Images result as it came; nested lists as JSON."""
    if isinstance(images, Images):
        return images.wire
    if isinstance(images, (bytes, bytearray, str, os.PathLike)) or _is_pil(images):
        images = [images]
    if _is_numpy(images):
        np = _numpy()
        arr = np.asarray(images)
        if arr.ndim == 3:
            arr = arr[:, None, :, :]
        if arr.ndim != 4:
            raise ValueError("an image array is n x h x w or n x c x h x w, not shape %r"
                             % (arr.shape,))
        if mask or arr.dtype == np.bool_ or arr.dtype == np.uint8:
            data = (arr != 0).astype(np.uint8) if mask else arr.astype(np.uint8)
            return {"dtype": "uint8", "shape": list(arr.shape),
                    "data": base64.b64encode(np.ascontiguousarray(data).tobytes()).decode()}
        data = np.ascontiguousarray(arr, dtype="<f4")
        return {"dtype": "float32", "shape": list(arr.shape),
                "data": base64.b64encode(data.tobytes()).decode()}
    items = list(images)
    if not items:
        raise ValueError("no images")
    first = items[0]
    if isinstance(first, (bytes, bytearray)):
        return [base64.b64encode(bytes(x)).decode() for x in items]
    if isinstance(first, (str, os.PathLike)):
        return [_read_png_file(x) for x in items]
    if _is_pil(first):  # as PNG (PIL's writer): the server applies its PNG conversions
        import io
        out = []
        for im in items:
            buf = io.BytesIO()
            im.save(buf, format="PNG")
            out.append(base64.b64encode(buf.getvalue()).decode())
        return out
    if _is_numpy(first):
        np = _numpy()
        return encode_images(np.stack([np.asarray(x) for x in items]), mask)
    return items  # nested JSON arrays


def encode_mask(mask):
    """A read mask: a pixel mask in any form encode_images takes (non-zero = known), or a code
    mask (a T x C array or list of 0/1 rows) as a uint8 tensor."""
    if mask is None:
        return None
    if _is_numpy(mask):
        np = _numpy()
        arr = np.asarray(mask)
        if arr.ndim == 2:
            return {"dtype": "uint8", "shape": list(arr.shape),
                    "data": base64.b64encode((arr != 0).astype(np.uint8).tobytes()).decode()}
        return encode_images(arr, mask=True)
    if isinstance(mask, (list, tuple)) and mask and isinstance(mask[0], (list, tuple)) \
            and mask[0] and isinstance(mask[0][0], (int, float, bool)):
        rows = [[1 if v else 0 for v in r] for r in mask]
        return {"dtype": "uint8", "shape": [len(rows), len(rows[0])],
                "data": base64.b64encode(bytes(v for r in rows for v in r)).decode()}
    return encode_images(mask, mask=True)


def _drop_none(d):
    return {k: v for k, v in d.items() if v is not None}


# ------------------------------------------------------------------------------------ client


class Client:
    """A client of one vbmemd server.

    url: the server (default $VBMEM_URL, else http://127.0.0.1:8080); api_key: sent as
    `Authorization: Bearer KEY` (default $VBMEM_API_KEY); timeout: seconds per HTTP request;
    retries: how many times a request answered 503 or 429 (or refused at connect) is tried
    again, waiting the server's Retry-After (at most 60 s; else an exponential backoff from
    0.5 s with jitter); a write answered 503 "outcome-unknown" (the store may hold it) is
    tried again only when it carries If-Match, else its VbmemError is raised at once; ca_file: PEM file of the certificate authorities an https server's
    certificate is checked against (default $VBMEM_CA_FILE, else the system's); ssl_context:
    an ssl.SSLContext used for https instead (it wins over ca_file); sleep: the function called
    with the seconds to wait between two attempts of a request (default time.sleep; a test
    passes its own to see the waits without spending them).
    Every method raises VbmemError (ConnectionFailed when the server cannot be reached or its
    certificate is not trusted)."""

    def __init__(self, url=None, api_key=None, timeout=30, retries=3, ca_file=None,
                 ssl_context=None, sleep=None):
        self.url = (url or os.environ.get("VBMEM_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else (os.environ.get("VBMEM_API_KEY") or None)
        self.timeout = timeout
        self.retries = retries
        self.last_etag = None
        self._sleep = sleep if sleep is not None else time.sleep
        ca_file = ca_file or os.environ.get("VBMEM_CA_FILE") or None
        if ssl_context is None and ca_file is not None:
            ssl_context = ssl.create_default_context(cafile=ca_file)
        self.ssl_context = ssl_context

    def __repr__(self):
        return "Client(url=%r)" % self.url

    # -- transport

    def request(self, method, path, body=None, headers=None, query=None):
        """One API request with retries; returns the decoded JSON body (None when empty).
        `path` starts with "/"; `body` is JSON-encoded; the response's ETag is kept in
        self.last_etag. Raises VbmemError."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(_drop_none(query))
        data = None if body is None else json.dumps(body).encode()
        h = {"Accept": "application/json"}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(headers or {})
        attempt = 0
        while True:
            req = urllib.request.Request(url, data=data, headers=h, method=method)
            wait = None
            try:
                with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl_context) as r:
                    payload = r.read()
                    self.last_etag = r.headers.get("ETag")
                    return json.loads(payload) if payload else None
            except urllib.error.HTTPError as e:
                payload = e.read()
                err = self._problem(e.code, e.reason, payload)
                unknown = err.type == OUTCOME_UNKNOWN and "If-Match" not in h
                if e.code in (429, 503) and attempt < self.retries and not unknown:
                    wait = self._retry_after(e.headers.get("Retry-After"), attempt)
                else:
                    raise err from None
            except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as e:
                reason = getattr(e, "reason", e)
                refused = isinstance(reason, ConnectionRefusedError)
                if refused and attempt < self.retries:
                    wait = self._retry_after(None, attempt)
                else:
                    raise ConnectionFailed(detail="cannot reach %s: %s" % (self.url, reason)) from None
            attempt += 1
            self._sleep(wait)

    @staticmethod
    def _retry_after(value, attempt):
        if value is not None:
            try:
                return min(MAX_RETRY_WAIT, max(0.0, float(value)))
            except ValueError:
                pass
        return 0.5 * (2 ** attempt) * (0.75 + 0.5 * random.random())

    @staticmethod
    def _problem(status, reason, payload):
        try:
            p = json.loads(payload)
            if not isinstance(p, dict):
                raise ValueError
        except ValueError:
            p = {"title": str(reason), "detail": payload.decode(errors="replace")[:500]}
        return VbmemError(status=p.get("status", status), title=p.get("title", ""),
                          detail=p.get("detail", ""), field=p.get("field"),
                          request_id=p.get("request_id"), type=p.get("type"), problem=p)

    @staticmethod
    def _if_match(version):
        if version is None:
            return None
        if isinstance(version, Session):
            version = version.version
        v = str(version)
        return {"If-Match": v if v.startswith(("\"", "W/")) or v == "*" else '"%s"' % v}

    # -- system

    def healthz(self):
        """GET /healthz: the liveness document ({"status": "ok"})."""
        return self.request("GET", "/healthz")

    def readyz(self):
        """GET /readyz: the readiness document (status and checks); VbmemError 503 when not ready
        (after the retries)."""
        return self.request("GET", "/readyz")

    # -- models

    def models(self):
        """GET /v1/models: the hosted models, as a list of Model."""
        return [Model._from(m) for m in self.request("GET", "/v1/models")["models"]]

    def model(self, name):
        """GET /v1/models/{name}: one Model (its raw dict includes the architecture)."""
        return Model._from(self.request("GET", "/v1/models/" + urllib.parse.quote(name, safe="")))

    def encode(self, model, images):
        """POST /v1/models/{model}/encode: codes (mu, sigma2) of images (any form encode_images
        takes) -> EncodeResult."""
        d = self.request("POST", "/v1/models/%s/encode" % urllib.parse.quote(model, safe=""),
                         {"observations": encode_images(images), "encoding": "base64"})
        return EncodeResult(d["model"], Matrix(d["codes"]["mu"]), Matrix(d["codes"]["sigma2"]), d)

    def decode(self, model, codes, sigma2=None, format="uint8", pixels=None, seed=None):
        """POST /v1/models/{model}/decode: images of codes (format png/uint8/float32/json;
        pixels mean or sample) -> DecodeResult."""
        codes_w = _drop_none({"mu": encode_codes(codes), "sigma2": _sigma2(sigma2)})
        d = self.request("POST", "/v1/models/%s/decode" % urllib.parse.quote(model, safe=""),
                         _drop_none({"codes": codes_w, "format": format, "pixels": pixels,
                                     "seed": seed}))
        return DecodeResult(d["model"], Images(d["observations"]), d)

    def infer(self, model, observations):
        """POST /v1/models/{model}/infer: the posterior q(Z | X) of a served time-series RPM
        (a model file of kind rpm) given J rows of T observations (nested lists of numbers, or
        anything with .tolist(), e.g. a numpy array or torch tensor of shape (J, T)) -> the
        response dict: mean and variance (T rows of latent_size values), steps, factors,
        latent_size, timings."""
        obs = observations.tolist() if hasattr(observations, "tolist") else observations
        return self.request("POST", "/v1/models/%s/infer" % urllib.parse.quote(model, safe=""),
                            {"observations": obs})

    # -- sessions

    def create_session(self, model=None, code_size=None, memory=None, solver=None,
                       ttl_seconds=None, **memory_fields):
        """POST /v1/sessions -> Session. model: a hosted model name (None and no code_size: the
        default model); code_size: a latent session; memory: a dict (kind, rows, clusters,
        groups, retain_max, ...) or memory fields as keyword arguments (kind="mixture",
        clusters=10, ...); solver: {iterations, tolerance, init}; ttl_seconds: idle lifetime."""
        mem = dict(memory or {})
        mem.update(_drop_none(memory_fields))
        if mem and "kind" not in mem:
            raise ValueError("memory needs a kind")
        body = _drop_none({"model": model, "code_size": code_size, "memory": mem or None,
                           "solver": solver, "ttl_seconds": ttl_seconds})
        return Session._from(self.request("POST", "/v1/sessions", body))

    def list_sessions(self, limit=None, cursor=None):
        """GET /v1/sessions: one page (limit 1-1000, cursor from the previous page's
        next_cursor) -> SessionPage."""
        d = self.request("GET", "/v1/sessions", query={"limit": limit, "cursor": cursor})
        return SessionPage([Session._from(s) for s in d["sessions"]], d.get("next_cursor"))

    def iter_sessions(self, page_size=100):
        """Every session of the caller, following next_cursor page by page (a generator)."""
        cursor = None
        while True:
            page = self.list_sessions(limit=page_size, cursor=cursor)
            yield from page.sessions
            cursor = page.next_cursor
            if not cursor:
                return

    def get_session(self, session):
        """GET /v1/sessions/{id} -> Session (its version is the ETag)."""
        return Session._from(self.request("GET", "/v1/sessions/" + _sid(session)))

    def delete_session(self, session):
        """DELETE /v1/sessions/{id} (204); VbmemError 404 when there is no such session."""
        self.request("DELETE", "/v1/sessions/" + _sid(session))

    def write(self, session, images=None, codes=None, sigma2=None, mode="replace",
              iterations=None, tolerance=None, seed=None, init=None, addresses=None,
              if_match=None, views_per_frame=None):
        """POST /v1/sessions/{id}/episodes -> FitResult. Give images (a model session: PNG
        files, PNG bytes, arrays, PIL images) or codes (T x C, with sigma2 a number or a T x C
        matrix); mode replace, append or refit (refit takes neither); if_match: a version
        (int, '"N"' or a Session) the session must be at (VbmemError 409 otherwise);
        views_per_frame J: the images (codes) are T x J views, frame-major, fused into T codes."""
        if mode not in ("replace", "append", "refit"):
            raise ValueError("mode is replace, append or refit, not %r" % (mode,))
        body = _drop_none({"mode": mode, "iterations": iterations, "tolerance": tolerance,
                           "seed": seed, "init": init, "addresses": addresses,
                           "views_per_frame": views_per_frame})
        if images is not None:
            body["observations"] = encode_images(images)
        if codes is not None:
            body["codes"] = _drop_none({"mu": encode_codes(codes), "sigma2": _sigma2(sigma2)})
        return FitResult._from(self.request("POST", "/v1/sessions/%s/episodes" % _sid(session),
                                            body, headers=self._if_match(if_match)))

    def resize(self, session, clusters=None, rows=None, iterations=None, tolerance=None,
               seed=None, init=None, if_match=None):
        """POST /v1/sessions/{id}/resize: new H (clusters) and/or K (rows) -> FitResult with
        elbo_before / elbo_after."""
        body = _drop_none({"clusters": clusters, "rows": rows, "iterations": iterations,
                           "tolerance": tolerance, "seed": seed, "init": init})
        return FitResult._from(self.request("POST", "/v1/sessions/%s/resize" % _sid(session),
                                            body, headers=self._if_match(if_match)))

    def forget(self, session, images=None, codes=None, sigma2=None, iterations=None,
               tolerance=None, seed=None, init=None, if_match=None):
        """POST /v1/sessions/{id}/forget -> ForgetResult: remove the stored items nearest the
        cues, given as images (a model session: PNG files, PNG bytes, arrays, PIL images) or
        codes (T x C). Exact when the session retains codes (the nearest retained code of each
        cue goes, the memory is refitted over the rest with iterations/tolerance/seed/init);
        otherwise an approximate downdate (result.exact False). if_match as for write."""
        if (images is None) == (codes is None):
            raise ValueError("give images or codes (the cues to forget), not both or neither")
        body = _drop_none({"iterations": iterations, "tolerance": tolerance, "seed": seed,
                           "init": init})
        if images is not None:
            body["observations"] = encode_images(images)
        else:
            body["codes"] = _drop_none({"mu": encode_codes(codes), "sigma2": _sigma2(sigma2)})
        return ForgetResult._from(self.request("POST", "/v1/sessions/%s/forget" % _sid(session),
                                               body, headers=self._if_match(if_match)))

    def sample(self, session, count=1, seed=None, cluster=None, format=None, pixels=None):
        """POST /v1/sessions/{id}/samples: count codes from the memory and (model session)
        their images (format png/uint8/float32/json/none; the server default: png for a model session)
        -> SampleResult."""
        body = _drop_none({"count": count, "seed": seed, "cluster": cluster, "encoding": "base64",
                           "format": format, "pixels": pixels})
        d = self.request("POST", "/v1/sessions/%s/samples" % _sid(session), body)
        return SampleResult(d["version"], Matrix(d["codes"]), d["clusters"],
                            _images(d.get("observations")), d)

    def read(self, session, images=None, codes=None, sigma2=None, mode=None, mask=None,
             cue_noise=None, candidates=None, steps=None, iterations=None, count=None,
             seed=None, addresses=None, format=None, pixels=None, views_per_frame=None,
             answer=None):
        """POST /v1/sessions/{id}/reads: an iterative read (App. G.2) -> ReadResult (with
        `familiarity` per frame and `stopped_at`).
        The query is images (model session) or codes; with neither, `count` frames start from
        memory. mode: recall (default), mean or sample; mask: which query pixels (or code
        dimensions) are known, non-zero = known (PNG files/bytes, arrays, 0/1 rows); cue_noise:
        a number or "auto"; candidates: recall draws; answer (recall only): "clean" (the
        server's default: the decoder's mean at the chosen code, a mask's known values kept) or
        "blend" (known values combined with the prediction given cue_noise); steps (alias
        iterations): read steps; views_per_frame J: the query (and mask) is T x J views,
        frame-major, T frames answered."""
        if steps is not None and iterations is not None and steps != iterations:
            raise ValueError("give steps or iterations, not both")
        body = _drop_none({"iterations": steps if steps is not None else iterations,
                           "mode": mode, "cue_noise": cue_noise, "candidates": candidates,
                           "count": count, "seed": seed, "addresses": addresses,
                           "format": format, "pixels": pixels, "encoding": "base64",
                           "mask": encode_mask(mask), "views_per_frame": views_per_frame,
                           "answer": answer})
        if images is not None:
            body["observations"] = encode_images(images)
        if codes is not None:
            body["query"] = _drop_none({"mu": encode_codes(codes), "sigma2": _sigma2(sigma2)})
        d = self.request("POST", "/v1/sessions/%s/reads" % _sid(session), body)
        steps_out = [ReadStep(Matrix(s["codes"]), s["clusters"], s.get("addresses"),
                              _images(s.get("observations"))) for s in d["steps"]]
        start = d.get("start") or {}
        return ReadResult(d["version"], steps_out,
                          Matrix(start["codes"]) if "codes" in start else None,
                          _images(start.get("observations")), d,
                          list(d.get("familiarity") or []), d.get("stopped_at"))

    def export_memory(self, session):
        """GET /v1/sessions/{id}/memory: the whole memory as a dict (the vbmem-memory JSON
        form, bit-exact; give it to import_memory)."""
        return self.request("GET", "/v1/sessions/%s/memory" % _sid(session))

    def import_memory(self, session, memory, if_match=None):
        """PUT /v1/sessions/{id}/memory: replace the session's memory with an exported one
        (a dict, or JSON text/bytes) -> Session."""
        if isinstance(memory, (str, bytes, bytearray)):
            memory = json.loads(memory)
        return Session._from(self.request("PUT", "/v1/sessions/%s/memory" % _sid(session), memory,
                                          headers=self._if_match(if_match)))

    # ---- temporal sessions (the identity/attribute sequence memory of seed 003) ----

    def create_temporal_session(self, model=None, code_size=None, ttl_seconds=None,
                                **memory_fields):
        """POST /v1/sessions with memory kind "temporal" -> Session. code_size: a latent
        session (codes); model: a hosted model (images); memory fields as keyword arguments
        (components=2, attributes=1, pi0, u_T, sigma_a2, lambda_prior, lambda_grid, rho_d,
        rho_e, gamma0, gamma_max, vbe="eq18" or "eq19")."""
        mem = {"kind": "temporal"}
        mem.update(_drop_none(memory_fields))
        body = _drop_none({"model": model, "code_size": code_size, "memory": mem,
                           "ttl_seconds": ttl_seconds})
        return Session._from(self.request("POST", "/v1/sessions", body))

    def write_sequences(self, session, sequences=None, images=None, mode="replace",
                        iterations=None, sweeps=None, restarts=None, tolerance=None, seed=None,
                        if_match=None, start=None, warm_start=None):
        """POST /v1/sessions/{id}/episodes on a temporal session: sequences (a list of T x D
        code matrices, frames in order) or images (a list of image lists, one per sequence, on
        a model session); mode replace or append; start "windows" (the server's default), "pca"
        or "random"; warm_start (eq. 19 sessions) -> the response dict (version, free_energy,
        free_energy_trace, sequences, frames, timings)."""
        if mode not in ("replace", "append"):
            raise ValueError("mode is replace or append, not %r" % (mode,))
        body = _drop_none({"mode": mode, "iterations": iterations, "sweeps": sweeps,
                           "restarts": restarts, "tolerance": tolerance, "seed": seed,
                           "start": start, "warm_start": warm_start})
        if sequences is not None:
            body["sequences"] = [{"mu": encode_codes(q)} for q in sequences]
        if images is not None:
            body["observations"] = [encode_images(q) for q in images]
        return self.request("POST", "/v1/sessions/%s/episodes" % _sid(session), body,
                            headers=self._if_match(if_match))

    def infer_sequence(self, session, codes=None, images=None, sweeps=None):
        """POST /v1/sessions/{id}/infer: the identities (T x P, q(b = 1)) and attribute means
        (T x P*Q) of one query sequence (codes T x D, or images on a model session) -> dict with
        Matrix values under "identities" and "attributes", and "free_energy"."""
        body = _drop_none({"sweeps": sweeps})
        if codes is not None:
            body["sequence"] = {"mu": encode_codes(codes)}
        if images is not None:
            body["observations"] = encode_images(images)
        d = self.request("POST", "/v1/sessions/%s/infer" % _sid(session), body)
        d["identities"] = Matrix(d["identities"])
        d["attributes"] = Matrix(d["attributes"])
        return d

    def sample_sequence(self, session, length, seed=None, format=None, pixels=None):
        """POST /v1/sessions/{id}/samples on a temporal session: one sequence of `length`
        frames drawn ancestrally -> dict with "codes" (Matrix), "identities" (0/1 rows),
        "attributes" (Matrix) and, on a model session, "images" (Images)."""
        body = _drop_none({"length": length, "seed": seed, "encoding": "base64",
                           "format": format, "pixels": pixels})
        d = self.request("POST", "/v1/sessions/%s/samples" % _sid(session), body)
        d["codes"] = Matrix(d["codes"])
        d["attributes"] = Matrix(d["attributes"])
        d["images"] = _images(d.get("observations"))
        return d

    def continue_sequence(self, session, steps, codes=None, images=None, samples=None,
                          seed=None, sweeps=None, format=None, pixels=None):
        """POST /v1/sessions/{id}/continue: continue a prefix (codes T x D, or images on a
        model session) by `steps` frames -> dict with "mean" (Matrix: the predictive mean of
        each next frame), "identities" (Matrix: P(b = 1)), "samples" (a list of Matrix, when
        samples > 0) and, on a model session, "images" (Images of the mean) and
        "sample_images"."""
        body = _drop_none({"steps": steps, "samples": samples, "seed": seed, "sweeps": sweeps,
                           "encoding": "base64", "format": format, "pixels": pixels})
        if codes is not None:
            body["prefix"] = {"mu": encode_codes(codes)}
        if images is not None:
            body["observations"] = encode_images(images)
        d = self.request("POST", "/v1/sessions/%s/continue" % _sid(session), body)
        d["mean"] = Matrix(d["mean"])
        d["identities"] = Matrix(d["identities"])
        d["samples"] = [Matrix(m) for m in d.get("samples", [])]
        obs = d.get("observations") or {}
        d["images"] = _images(obs.get("mean"))
        d["sample_images"] = [_images(x) for x in obs.get("samples", [])]
        return d
