import { readLimited } from "./keylist.js";
import type { components } from "./openapi.js";
import { validNamespace } from "./util.js";

type Schemas = components["schemas"];
/** One outcome, as POST /v1/namespaces/{ns}/outcomes takes it. */
export type Outcome = Schemas["Outcome"];
/** What became of one outcome. */
export type IngestResult = Schemas["IngestResult"];
/** An endpoint as the API shows it. */
export type Endpoint = Schemas["Endpoint"];
/** An endpoint as PUT answers it: with the secret relay generated, once. */
export type EndpointSaved = Schemas["EndpointSaved"];
/** An endpoint's configuration, as PUT takes it; fields left out take their defaults. */
export type EndpointConfig = Partial<Schemas["EndpointRequest"]> & Pick<Schemas["EndpointRequest"], "url">;
/** A problem type, urn:hookrelay:problem:<slug>. */
export type ProblemType = Schemas["ProblemType"];
export type OutcomeError = Schemas["OutcomeError"];

/** The most outcomes one ingest request carries; ingestAll splits longer lists. */
export const MAX_OUTCOMES_PER_REQUEST = 100;
/** Bounds every answer the client reads. */
export const MAX_RESPONSE_BYTES = 1 << 20;
export const DEFAULT_MAX_ATTEMPTS = 4;
export const DEFAULT_MAX_RETRY_WAIT_MS = 30_000;
/** The wait before resending a 503 that carries no usable Retry-After. */
export const DEFAULT_RETRY_WAIT_MS = 1_000;

const typePrefix = "urn:hookrelay:problem:";

/**
 * RelayProblem is an answer that is not 2xx: relay's RFC 9457 problem, or,
 * when the body is not one (a proxy's page), the status alone with its
 * text as title. Branch on `type` (or `slug`), never on title or detail.
 * Its fields come from the server; the client adds none of the request's,
 * so no token.
 */
export class RelayProblem extends Error {
  /** The HTTP status of the answer. */
  readonly status: number;
  /** The problem type; "" when the body was not a problem. */
  readonly type: ProblemType | "";
  /** The type's last part, e.g. "conflict"; "" when there is no type. */
  readonly slug: string;
  readonly title: string;
  readonly detail: string;
  readonly instance: string;
  readonly requestId: string;
  /** The broken outcomes of an invalid-outcome list; after ingestAll, index is into its whole list. */
  readonly errors: OutcomeError[];
  /** An endpoint's pending rows (endpoint-has-backlog). */
  readonly backlogRows: number | undefined;
  /** The answer's Retry-After in ms; -1 when it had none or it did not parse. */
  readonly retryAfterMs: number;

  constructor(status: number, body: Partial<Schemas["Problem"]>, statusText: string, retryAfterMs: number) {
    const type = typeof body.type === "string" ? body.type : "";
    const slug = type.startsWith(typePrefix) ? type.slice(typePrefix.length) : "";
    const title = typeof body.title === "string" ? body.title : type === "" ? statusText : "";
    const detail = typeof body.detail === "string" ? body.detail : "";
    let msg = `relayclient: ${status}`;
    const name = printable(slug || title, 64);
    if (name) msg += ` ${name}`;
    const d = printable(detail, 512);
    if (d) msg += `: ${d}`;
    super(msg);
    this.name = "RelayProblem";
    this.status = status;
    this.type = type as ProblemType | "";
    this.slug = slug;
    this.title = title;
    this.detail = detail;
    this.instance = typeof body.instance === "string" ? body.instance : "";
    this.requestId = typeof body.request_id === "string" ? body.request_id : "";
    this.errors = Array.isArray(body.errors) ? body.errors.filter((e) => typeof e?.index === "number").map((e) => ({ index: e.index, detail: String(e.detail ?? "") })) : [];
    this.backlogRows = typeof body.backlog_rows === "number" ? body.backlog_rows : undefined;
    this.retryAfterMs = retryAfterMs;
  }
}

/** problemType is the type of the RelayProblem err is; "" otherwise. */
export function problemType(err: unknown): string {
  return err instanceof RelayProblem ? err.type : "";
}

/**
 * IngestAllError is what ingestAll throws when a request fails for good:
 * `results` answers outcomes[i] for every i < results.length, and those are
 * settled; send outcomes.slice(results.length) again as they are, and what
 * was stored answers duplicate. `cause` is the failure (a RelayProblem or
 * a transport error).
 */
export class IngestAllError extends Error {
  constructor(readonly results: IngestResult[], readonly cause: Error) {
    super(cause.message);
    this.name = "IngestAllError";
  }
}

/** printable is s cut to at most n characters, control characters dropped, so a hostile server cannot forge lines in a log. */
function printable(s: string, n: number): string {
  // eslint-disable-next-line no-control-regex
  const clean = s.replace(/[\u0000-\u001f\u007f-\u009f\ufffd]/g, "");
  return clean.length > n ? clean.slice(0, n) + "…" : clean;
}

export interface RelayClientOptions {
  /** The bearer token (a JWT) sent on every /v1 request. It is never part of an error. */
  token?: string;
  /** The fetch to use; globalThis.fetch when not set. */
  fetch?: typeof fetch;
  /** Attempts of one request answered 503 (or stream-busy), the first included; DEFAULT_MAX_ATTEMPTS when not set, 1 never resends. */
  maxAttempts?: number;
  /** The longest Retry-After waited out, in ms; an answer asking for longer is thrown at once. */
  maxRetryWaitMs?: number;
  /** Waits ms or until signal ends; tests replace it. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export interface CallOptions {
  /** Ends the call, waits for a resend included. */
  signal?: AbortSignal;
  /** Sent as X-Request-Id, so relay's logs and problems carry the caller's id. */
  requestId?: string;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/**
 * RelayClient calls one relay's REST API (api/openapi.yaml). A request
 * answered 503 (or stream-busy) is resent after its Retry-After with the
 * same bytes, so what a first attempt stored answers duplicate. Any other
 * non-2xx answer is thrown as a RelayProblem.
 */
export class RelayClient {
  readonly baseURL: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #maxAttempts: number;
  readonly #maxWait: number;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  /**
   * @param baseURL an http or https URL, which may carry a path prefix (a
   * relay behind a proxy) but no credentials, query or fragment
   */
  constructor(baseURL: string, opts: RelayClientOptions = {}) {
    let u: URL;
    try {
      u = new URL(baseURL);
    } catch {
      throw new Error("relayclient: the base URL does not parse");
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("relayclient: the base URL must be http or https");
    if (u.host === "") throw new Error("relayclient: the base URL has no host");
    // Credentials in a URL end up in logs and errors; the token is the credential.
    if (u.username || u.password) throw new Error("relayclient: the base URL must not hold credentials");
    if (u.search || u.hash || baseURL.includes("?") || baseURL.includes("#")) throw new Error("relayclient: the base URL must not hold a query or fragment");
    if ((opts.maxAttempts ?? 0) < 0 || (opts.maxRetryWaitMs ?? 0) < 0) throw new Error("relayclient: maxAttempts and maxRetryWaitMs must not be negative");
    if (/[\r\n]/.test(opts.token ?? "")) throw new Error("relayclient: the token holds a line break");
    this.baseURL = `${u.protocol}//${u.host}${u.pathname}`.replace(/\/+$/, "");
    this.#token = opts.token ?? "";
    this.#fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.#maxAttempts = opts.maxAttempts || DEFAULT_MAX_ATTEMPTS;
    this.#maxWait = opts.maxRetryWaitMs || DEFAULT_MAX_RETRY_WAIT_MS;
    this.#sleep = opts.sleep ?? sleep;
  }

  /**
   * ingest posts one outcome to namespace ns: "accepted" or "duplicate"; a
   * different outcome under the same reservation id is a RelayProblem of
   * slug conflict (409), one no endpoint takes of no-endpoint (422).
   */
  async ingest(ns: string, outcome: Outcome, opts: CallOptions = {}): Promise<IngestResult> {
    checkNamespace("ingest", ns);
    const [res] = await this.#ingest(ns, outcome, [outcome], opts);
    return res!;
  }

  /**
   * ingestAll posts any number of outcomes to namespace ns, as lists of at
   * most MAX_OUTCOMES_PER_REQUEST, one request after another, and returns
   * one result per outcome in input order: accepted, duplicate, conflict or
   * no_endpoint. When a request fails for good it throws an IngestAllError
   * holding the settled results before it. No outcome is no request.
   */
  async ingestAll(ns: string, outcomes: readonly Outcome[], opts: CallOptions = {}): Promise<IngestResult[]> {
    checkNamespace("ingest", ns);
    const results: IngestResult[] = [];
    for (let off = 0; off < outcomes.length; off += MAX_OUTCOMES_PER_REQUEST) {
      const chunk = outcomes.slice(off, off + MAX_OUTCOMES_PER_REQUEST);
      try {
        results.push(...(await this.#ingest(ns, { outcomes: chunk }, chunk, opts)));
      } catch (err) {
        if (err instanceof RelayProblem) for (const e of err.errors) e.index += off;
        throw new IngestAllError(results, err as Error);
      }
    }
    return results;
  }

  async #ingest(ns: string, body: unknown, sent: readonly Outcome[], opts: CallOptions): Promise<IngestResult[]> {
    const out = await this.#json<{ results?: IngestResult[] }>("ingest", "POST", `/v1/namespaces/${ns}/outcomes`, body, opts, true);
    const results = out.results;
    if (!Array.isArray(results) || results.length !== sent.length) {
      throw new Error(`relayclient: ingest: the answer holds ${Array.isArray(results) ? results.length : 0} results for ${sent.length} outcomes`);
    }
    results.forEach((r, i) => {
      if (r?.reservation_id !== sent[i]!.reservation_id) throw new Error(`relayclient: ingest: result ${i} names another reservation id than its outcome`);
    });
    return results;
  }

  /** putEndpoint creates or replaces endpoint id of namespace ns. */
  putEndpoint(ns: string, id: string, config: EndpointConfig, opts: CallOptions = {}): Promise<EndpointSaved> {
    checkNamespace("put endpoint", ns);
    return this.#json("put endpoint", "PUT", `/v1/namespaces/${ns}/endpoints/${encodeURIComponent(id)}`, config, opts, false);
  }

  /** getEndpoint reads endpoint id of namespace ns. */
  getEndpoint(ns: string, id: string, opts: CallOptions = {}): Promise<Schemas["EndpointDetail"]> {
    checkNamespace("get endpoint", ns);
    return this.#json("get endpoint", "GET", `/v1/namespaces/${ns}/endpoints/${encodeURIComponent(id)}`, undefined, opts, false);
  }

  /** listEndpoints lists the endpoints of namespace ns. */
  async listEndpoints(ns: string, opts: CallOptions = {}): Promise<Endpoint[]> {
    checkNamespace("list endpoints", ns);
    const out = await this.#json<{ endpoints?: Endpoint[] }>("list endpoints", "GET", `/v1/namespaces/${ns}/endpoints`, undefined, opts, false);
    return out.endpoints ?? [];
  }

  /** #json sends a call and decodes its 2xx answer, which relay always makes a JSON object. */
  async #json<T>(op: string, method: string, path: string, body: unknown, opts: CallOptions, retry: boolean): Promise<T> {
    const resp = await this.#do(op, method, path, body, opts, retry);
    let v: unknown;
    try {
      v = JSON.parse(new TextDecoder().decode(resp.body));
    } catch {
      v = undefined;
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      throw new Error(`relayclient: ${op}: the answer (status ${resp.status}) is not the JSON object relay sends`);
    }
    return v as T;
  }

  async #do(op: string, method: string, path: string, body: unknown, opts: CallOptions, retry: boolean): Promise<{ status: number; body: Uint8Array }> {
    // Encoded once: a resend carries the same bytes.
    const bytes = body === undefined ? undefined : new TextEncoder().encode(JSON.stringify(body));
    const headers: Record<string, string> = { Accept: "application/json, application/problem+json" };
    if (bytes) headers["Content-Type"] = "application/json";
    if (opts.requestId && !/[\r\n]/.test(opts.requestId)) headers["X-Request-Id"] = opts.requestId;
    if (this.#token) headers.Authorization = `Bearer ${this.#token}`;
    for (let attempt = 1; ; attempt++) {
      let resp: Response;
      let data: Uint8Array;
      try {
        // relay never redirects; following one could carry the token to another host.
        resp = await this.#fetch(this.baseURL + path, { method, headers, body: bytes, redirect: "manual", signal: opts.signal });
        data = await readLimited(resp, MAX_RESPONSE_BYTES + 1);
      } catch (err) {
        throw new Error(`relayclient: ${op}: ${describe(err)}`); // not the error itself: nothing of the request rides along
      }
      if (data.length > MAX_RESPONSE_BYTES) throw new Error(`relayclient: ${op}: the answer (status ${resp.status}) is larger than ${MAX_RESPONSE_BYTES} bytes`);
      if (resp.status >= 200 && resp.status < 300) return { status: resp.status, body: data };
      const p = problemOf(resp, data);
      const retryable = resp.status === 503 || p.type === "urn:hookrelay:problem:stream-busy";
      if (!retry || !retryable || attempt >= this.#maxAttempts) throw p;
      const wait = p.retryAfterMs < 0 ? DEFAULT_RETRY_WAIT_MS : p.retryAfterMs;
      if (wait > this.#maxWait) throw p;
      try {
        await this.#sleep(wait, opts.signal);
      } catch (err) {
        throw new Error(`relayclient: ${op}: ${describe(err)} while waiting to retry: ${p.message}`);
      }
    }
  }
}

/** describe names a transport failure: its message and its cause's code, never the request. */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return "request failed";
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  const code = typeof cause?.code === "string" ? ` (${cause.code})` : "";
  return `${err.name === "AbortError" || err.name === "TimeoutError" ? err.name : err.message}${code}`;
}

function problemOf(resp: Response, data: Uint8Array): RelayProblem {
  let body: Partial<Schemas["Problem"]> = {};
  const mt = (resp.headers.get("Content-Type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (mt === "application/problem+json") {
    try {
      const v = JSON.parse(new TextDecoder().decode(data));
      if (typeof v === "object" && v !== null && !Array.isArray(v)) body = v;
    } catch {
      // not a problem; what it said may echo the request, so it is dropped
    }
  }
  return new RelayProblem(resp.status, body, resp.statusText || `HTTP ${resp.status}`, parseRetryAfter(resp.headers.get("Retry-After")));
}

/** parseRetryAfter reads a Retry-After, seconds or an HTTP date, in ms; -1 when absent or malformed. */
export function parseRetryAfter(v: string | null, now = Date.now()): number {
  const s = (v ?? "").trim();
  if (s === "") return -1;
  if (/^[0-9]/.test(s)) return /^[0-9]+$/.test(s) ? Math.min(Number(s) * 1000, Number.MAX_SAFE_INTEGER) : -1;
  const t = Date.parse(s);
  return Number.isNaN(t) ? -1 : Math.max(t - now, 0);
}

function checkNamespace(op: string, ns: string): void {
  if (!validNamespace(ns)) throw new Error(`relayclient: ${op}: ${JSON.stringify(ns.slice(0, 70))} is not a namespace: 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit`);
}
