// Type declarations of vbmem, the JavaScript client of vbmemd (hand-written; index.js is the source).

/** The server used when no url is given (and no $VBMEM_URL / page origin applies). */
export declare const DEFAULT_URL: string;
/** The longest Retry-After honoured, in seconds. */
export declare const MAX_RETRY_WAIT: number;
/** The problem type of a 503 whose write the store may hold: retried only with If-Match. */
export declare const OUTCOME_UNKNOWN: string;
/** The package version. */
export declare const VERSION: string;

/** An RFC 9457 problem+json document of vbmemd. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  instance?: string;
  request_id?: string;
  field?: string;
  [key: string]: unknown;
}

/** An error answered by vbmemd, or a failure to reach it (status null). */
export declare class VbmemError extends Error {
  constructor(p?: {
    status?: number | null; title?: string; detail?: string; field?: string | null;
    requestId?: string | null; type?: string | null; problem?: Problem | null;
  });
  /** HTTP status; null when the server was not reached. */
  status: number | null;
  title: string;
  detail: string;
  /** The JSON path (e.g. "codes.mu[3][1]") or header at fault, when one is. */
  field: string | null;
  /** The server's request id (X-Request-Id). */
  requestId: string | null;
  /** The problem type, e.g. "urn:vbmem:problem:invalid". */
  type: string | null;
  /** The whole problem document. */
  problem: Problem;
}

/** The server could not be reached, or did not answer within the timeout (status null). */
export declare class ConnectionFailed extends VbmemError {}

/** A base64 float32 tensor of the wire. */
export interface Tensor {
  dtype: "float32";
  shape: number[];
  data: string;
}

/** An image (or mask) tensor of the wire: NCHW, base64 of the bytes (float32 little-endian). */
export interface ImageTensor {
  dtype: "uint8" | "float32";
  shape: number[];
  data: string;
}

/** One image: a base64 PNG string, a "data:image/png;base64,..." URL, or PNG file bytes. */
export type PngInput = string | Uint8Array | ArrayBuffer;

/** A tensor given by the caller: data as a typed array, an array of numbers, or base64. */
export interface TensorInput {
  dtype?: "uint8" | "float32";
  /** [n, c, h, w] or [n, h, w] for images, [T, C] for codes and code masks. */
  shape: number[];
  data: Uint8Array | Float32Array | ArrayLike<number> | string;
}

/** Images: PNGs (one or an array), a tensor, nested n x c x h x w arrays in [0, 1], or an Images result. */
export type ImagesInput = PngInput | PngInput[] | TensorInput | number[][][][] | Images;

/** Codes T x C: a Matrix, rows (number arrays or Float32Arrays), or a {shape: [T, C], data} tensor. */
export type CodesInput = Matrix | ArrayLike<number>[] | TensorInput;

/** A read mask (non-zero = known): a pixel mask in any ImagesInput form (or n x h x w arrays), or a code mask (T rows of 0/1 or booleans, or a [T, C] tensor). */
export type MaskInput = ImagesInput | (number | boolean)[][] | number[][][];

export type ImageFormat = "png" | "uint8" | "float32" | "json" | "none";
export type Pixels = "mean" | "sample";
/** A non-negative integer, or a string of decimal digits up to 2^64 - 1. */
export type Seed = number | string;
/** A version for If-Match: N, '"N"', 'W/"N"', "*", or a Session (its version). */
export type IfMatch = number | string | { version: number };
/** A session: its id, or any object with an id (a Session). */
export type SessionRef = string | { id: string };
export type Init = "auto" | "prior" | "kmeans++" | "current" | "random";
export type Kind = "gaussian" | "categorical" | "mixture" | "tree" | "dkm";

/** A T x C matrix of float32 codes as the server returned it. */
export declare class Matrix implements Iterable<Float32Array> {
  constructor(wire: Tensor | (number | null)[][]);
  /** The wire form as received. */
  wire: Tensor | (number | null)[][];
  /** Row-major values (a JSON null, a non-finite value, is NaN). */
  data: Float32Array;
  /** [T, C] */
  shape: [number, number];
  /** Rows (T). */
  readonly length: number;
  /** Row i as a Float32Array view. */
  row(i: number): Float32Array;
  /** The rows as arrays of numbers. */
  toArray(): number[][];
  /** The base64 float32 tensor form. */
  toTensor(): Tensor;
  [Symbol.iterator](): Iterator<Float32Array>;
}

/** A batch of images as the server returned them, with PNG / pixel helpers. */
export declare class Images {
  constructor(wire: string[] | ImageTensor | number[][][][]);
  /** The response's form (base64 PNG strings, a tensor, or nested arrays). */
  wire: string[] | ImageTensor | number[][][][];
  format: "png" | "uint8" | "float32" | "json";
  /** [n, c, h, w] */
  shape: number[];
  /** Images in the batch (n). */
  readonly length: number;
  /** Image i as PNG bytes (the server's PNG, or one written from the pixels). */
  png(i: number): Uint8Array;
  /** Image i as a base64 PNG string (no data: prefix). */
  pngBase64(i: number): string;
  /** Image i as a "data:image/png;base64,..." URL. */
  dataUrl(i: number): string;
  /** Every image as a PNG data: URL. */
  dataUrls(): string[];
  /** Every pixel as bytes, NCHW (float x becomes min(255, floor(256 x))). */
  uint8(): Promise<Uint8Array>;
  /** Every pixel as float32, NCHW (8-bit v becomes (v + 0.5) / 256). */
  float32(): Promise<Float32Array>;
  /** Image i as RGBA bytes for `new ImageData(rgba, width, height)`. */
  rgba(i: number): Promise<Uint8ClampedArray>;
}

/** A hosted model (GET /v1/models). */
export interface Model {
  name: string;
  default: boolean;
  /** [channels, height, width] */
  observationShape: number[];
  codeSize: number;
  episodeLength: number;
  /** The memory defaults (MemoryConfig, snake_case as on the wire). */
  defaults: Record<string, unknown>;
  /** The whole document (GET /v1/models/{name}: with architecture). */
  raw: Record<string, any>;
}

/** A session (GET /v1/sessions/{id}). */
export interface Session {
  id: string;
  /** null for a latent session */
  model: string | null;
  kind: Kind;
  codeSize: number;
  rows: number;
  clusters: number;
  groups: number;
  frames: number;
  retainedCodes: number;
  lastElbo: number | null;
  /** The version (the ETag's number). */
  version: number;
  ttlSeconds: number;
  created: string;
  updated: string;
  memoryBytes: number;
  clusterUsage: number[][] | null;
  config: Record<string, unknown>;
  solver: Record<string, unknown>;
  raw: Record<string, any>;
}

/** One page of listSessions. */
export interface SessionPage {
  sessions: Session[];
  /** The cursor of the next page; null at the end. */
  nextCursor: string | null;
}

/** The result of a write or resize. */
export interface FitResult {
  version: number;
  mode: "replace" | "append" | "refit" | null;
  elboPerFrame: number | null;
  elbo: Record<string, number | null>;
  iterations: number;
  converged: boolean;
  timeLimited: boolean;
  frames: number;
  retainedCodes: number;
  clusters: number;
  rows: number;
  groups: number;
  clusterUsage: number[][] | null;
  timings: Record<string, number>;
  addresses: Record<string, any> | null;
  /** resize: ELBO per frame before */
  elboBefore: number | null;
  /** resize: ELBO per frame after */
  elboAfter: number | null;
  raw: Record<string, any>;
}

/** What one cue of a forget removed. */
export interface Forgotten {
  cue: number;
  /** The retained code removed (its index before the forget); null when downdated. */
  item: number | null;
  distance: number | null;
  clusters: number[] | null;
}

/** The result of a forget. */
export interface ForgetResult {
  version: number;
  /** true: as if never written (the retained codes left were refitted); false: the approximate downdate */
  exact: boolean;
  removed: Forgotten[];
  /** the refit's; null when nothing was refitted */
  elboPerFrame: number | null;
  elbo: Record<string, number | null> | null;
  iterations: number;
  frames: number;
  retainedCodes: number;
  clusterUsage: number[][] | null;
  timings: Record<string, number>;
  raw: Record<string, any>;
}

export interface EncodeResult {
  model: string;
  mu: Matrix;
  sigma2: Matrix;
  raw: Record<string, any>;
}

export interface DecodeResult {
  model: string;
  images: Images;
  raw: Record<string, any>;
}

export interface SampleResult {
  version: number;
  codes: Matrix;
  /** The cluster of every sample and group (count x G). */
  clusters: number[][];
  /** null for a latent session or format "none". */
  images: Images | null;
  raw: Record<string, any>;
}

export interface ReadStep {
  codes: Matrix;
  /** The most probable cluster of every frame and group (T x G). */
  clusters: number[][];
  addresses: Record<string, any> | null;
  images: Images | null;
}

export interface ReadResult {
  version: number;
  steps: ReadStep[];
  /** A read without a query: the codes sampled from memory. */
  startCodes: Matrix | null;
  startImages: Images | null;
  /**
   * One number per query frame (<= 0; larger = more familiar): -|z - zhat|^2 / (2 sigma_z^2 n) of
   * the cue's code z against the memory's reconstruction zhat; 0 when the memory holds z exactly.
   * Compare it within one session (or sessions of one configuration).
   */
  familiarity: number[];
  /** The first step from which every later step is identical (steps.length - 1: still changing at the last step). */
  stoppedAt: number | null;
  raw: Record<string, any>;
}

/** Memory fields of createSession (camelCase or snake_case). */
export interface MemoryInput {
  kind: Kind;
  codeSize?: number;
  rows?: number;
  clusters?: number;
  groups?: number;
  sigmaZ2?: number;
  shift?: boolean;
  u0?: number;
  sigma2B0?: number;
  sFloor?: number;
  dkmAddrVar?: number;
  retainMax?: number;
  [snakeCase: string]: unknown;
}

export interface ClientOptions {
  /** The server (default $VBMEM_URL in Node, else the page's origin in a browser, else DEFAULT_URL). */
  url?: string;
  /** Sent as `Authorization: Bearer KEY` (default $VBMEM_API_KEY in Node). */
  apiKey?: string | null;
  /** Seconds per HTTP request (default 30). */
  timeout?: number;
  /** Retries of a 503/429 answer or a refused connection (default 3). */
  retries?: number;
  /** The fetch to use (default the global fetch). */
  fetch?: typeof fetch;
  /** Waits the given seconds between two attempts of a request (default a setTimeout); a test
   * passes its own to see the waits without spending them. */
  sleep?: (seconds: number) => Promise<void>;
}

/** A client of one vbmemd server; every method rejects with a VbmemError. */
export declare class Client {
  constructor(opts?: ClientOptions);
  url: string;
  apiKey: string | null;
  timeout: number;
  retries: number;
  /** The ETag of the last response that had one (e.g. '"5"'). */
  lastEtag: string | null;

  /** One API request with retries: the decoded JSON body (null when empty). */
  request(method: string, path: string, o?: {
    body?: unknown; headers?: Record<string, string>; query?: Record<string, unknown>; signal?: AbortSignal;
  }): Promise<any>;

  /** GET /healthz */
  healthz(): Promise<{ status: string }>;
  /** GET /readyz (503 when not ready) */
  readyz(): Promise<{ status: string; checks: Record<string, unknown> }>;
  /** GET /v1/models */
  models(): Promise<Model[]>;
  /** GET /v1/models/{name} */
  model(name: string): Promise<Model>;
  /** POST /v1/models/{model}/encode */
  encode(model: string, images: ImagesInput): Promise<EncodeResult>;
  /** POST /v1/models/{model}/decode (format default "uint8") */
  decode(model: string, codes: CodesInput, o?: {
    sigma2?: number | CodesInput; format?: Exclude<ImageFormat, "none">; pixels?: Pixels; seed?: Seed;
  }): Promise<DecodeResult>;
  /** POST /v1/models/{model}/infer: a served RPM's posterior (mean, variance: T x latentSize) */
  infer(model: string, observations: number[][] | number[][][] | Tensor, o?: { encoding?: "json" | "base64" }):
    Promise<{ model: string; factors: number; steps: number; latentSize: number; mean: Matrix;
              variance: Matrix; raw: unknown }>;
  /** POST /v1/sessions */
  createSession(o?: {
    model?: string; codeSize?: number; memory?: MemoryInput;
    solver?: { iterations?: number; tolerance?: number; init?: Init }; ttlSeconds?: number;
  }): Promise<Session>;
  /** GET /v1/sessions: one page */
  listSessions(o?: { limit?: number; cursor?: string | null }): Promise<SessionPage>;
  /** Every session, page by page: `for await (const s of client.iterSessions())` */
  iterSessions(o?: { pageSize?: number }): AsyncGenerator<Session, void, undefined>;
  /** GET /v1/sessions/{id} */
  getSession(session: SessionRef): Promise<Session>;
  /** DELETE /v1/sessions/{id} */
  deleteSession(session: SessionRef, o?: { ifMatch?: IfMatch }): Promise<void>;
  /** POST /v1/sessions/{id}/episodes */
  write(session: SessionRef, o?: {
    images?: ImagesInput; codes?: CodesInput; sigma2?: number | CodesInput;
    mode?: "replace" | "append" | "refit"; iterations?: number; tolerance?: number; seed?: Seed;
    init?: Init; addresses?: boolean; ifMatch?: IfMatch;
  }): Promise<FitResult>;
  /** POST /v1/sessions/{id}/resize */
  resize(session: SessionRef, o?: {
    clusters?: number; rows?: number; iterations?: number; tolerance?: number; seed?: Seed;
    init?: Init; addresses?: boolean; ifMatch?: IfMatch;
  }): Promise<FitResult>;
  /** POST /v1/sessions/{id}/forget: images or codes, not both */
  forget(session: SessionRef, o: {
    images?: ImagesInput; codes?: CodesInput; sigma2?: number | CodesInput; iterations?: number;
    tolerance?: number; seed?: Seed; init?: Init; ifMatch?: IfMatch;
  }): Promise<ForgetResult>;
  /** POST /v1/sessions/{id}/samples */
  sample(session: SessionRef, o?: {
    count?: number; seed?: Seed; cluster?: number; format?: ImageFormat; pixels?: Pixels;
  }): Promise<SampleResult>;
  /** POST /v1/sessions/{id}/reads */
  read(session: SessionRef, o?: {
    images?: ImagesInput; codes?: CodesInput; sigma2?: number | CodesInput;
    mode?: "recall" | "mean" | "sample"; mask?: MaskInput; cueNoise?: number | "auto";
    candidates?: number;
    /** recall mode only: "clean" (default: the decoder's mean, a mask's known values kept) or "blend" */
    answer?: "clean" | "blend";
    steps?: number; iterations?: number; count?: number; seed?: Seed;
    addresses?: boolean; format?: ImageFormat; pixels?: Pixels;
  }): Promise<ReadResult>;
  /** GET /v1/sessions/{id}/memory */
  exportMemory(session: SessionRef): Promise<Record<string, any>>;
  /** PUT /v1/sessions/{id}/memory */
  importMemory(session: SessionRef, memory: Record<string, any> | string, o?: { ifMatch?: IfMatch }): Promise<Session>;
  /** POST /v1/sessions with memory kind "temporal" */
  createTemporalSession(o?: { model?: string; codeSize?: number; memory?: Record<string, any>; ttlSeconds?: number }): Promise<Session>;
  /** POST /v1/sessions/{id}/episodes of a temporal session */
  writeSequences(session: SessionRef, o?: {
    sequences?: CodesInput[]; images?: ImagesInput[]; mode?: "replace" | "append"; iterations?: number;
    sweeps?: number; restarts?: number; start?: "windows" | "pca" | "random"; warmStart?: boolean;
    tolerance?: number; seed?: Seed; ifMatch?: IfMatch;
  }): Promise<Record<string, any>>;
  /** POST /v1/sessions/{id}/infer */
  inferSequence(session: SessionRef, o?: { codes?: CodesInput; images?: ImagesInput; sweeps?: number }):
    Promise<{ version: number; identities: Matrix; attributes: Matrix; freeEnergy: number | null; raw: any }>;
  /** POST /v1/sessions/{id}/samples of a temporal session */
  sampleSequence(session: SessionRef, o: { length: number; seed?: Seed; format?: ImageFormat; pixels?: Pixels }):
    Promise<{ version: number; codes: Matrix; identities: number[][]; attributes: Matrix; images: Images | null; raw: any }>;
  /** POST /v1/sessions/{id}/continue */
  continueSequence(session: SessionRef, o: {
    steps: number; codes?: CodesInput; images?: ImagesInput; samples?: number; seed?: Seed; sweeps?: number;
    format?: ImageFormat; pixels?: Pixels;
  }): Promise<{ version: number; mean: Matrix; identities: Matrix; samples: Matrix[]; images: Images | null; sampleImages: Images[]; raw: any }>;
}

/** Bytes as base64. */
export declare function toBase64(bytes: Uint8Array | ArrayBuffer | ArrayBufferView): string;
/** base64 (or a data: URL) as bytes. */
export declare function fromBase64(s: string): Uint8Array;
/** Codes as a base64 float32 tensor. */
export declare function encodeCodes(codes: CodesInput): Tensor;
/** Images in a wire form. */
export declare function encodeImages(images: ImagesInput): string[] | ImageTensor | number[][][][];
/** A read mask in a wire form. */
export declare function encodeMask(mask: MaskInput | null | undefined): unknown;
/** An 8-bit PNG (1 grey, 3 RGB, 4 RGBA channels) of HWC pixels, written synchronously. */
export declare function encodePng(pixels: Uint8Array | ArrayLike<number>, width: number, height: number,
                                  channels?: 1 | 3 | 4): Uint8Array;
/** A PNG's header. */
export declare function pngInfo(png: Uint8Array): {
  width: number; height: number; bitDepth: number; colorType: number; channels: number;
};
/** Decode an 8-bit non-interlaced PNG to HWC pixels (1 or 3 channels; alpha dropped). */
export declare function decodePng(png: Uint8Array | ArrayBuffer | string): Promise<{
  pixels: Uint8Array; width: number; height: number; channels: number;
}>;

export default Client;
