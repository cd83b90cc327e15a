import { readLimited } from "./keylist.js";
import type { components, operations } from "./openapi.js";
import { printable, validNamespace } from "./util.js";

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
/** One page of the namespace list; next_cursor is null on the last. */
export type NamespacePage = Schemas["NamespacePage"];
/** A namespace with its endpoint count and its backlog over all its streams. */
export type NamespaceSummary = Schemas["NamespaceSummary"];
/** One page of a namespace's retained outcomes; next_cursor is absent on the last. */
export type OutcomesPage = Schemas["OutcomesPage"];
/** One outcome of a list: its kind and its state on each endpoint. */
export type OutcomeSummary = Schemas["OutcomeSummary"];
/** A retained outcome as it was accepted, and its story on each endpoint. */
export type OutcomeStory = Schemas["OutcomeStory"];
/** One page of an endpoint's stream: its backlog, state and pending rows; next_cursor is null on the last. */
export type OutboxPage = Schemas["OutboxPage"];
export type EndpointDeleted = Schemas["EndpointDeleted"];
export type ReplayResult = Schemas["ReplayResult"];
export type ResendResult = Schemas["ResendResult"];
export type OutcomeErased = Schemas["OutcomeErased"];
/** A recovery job of an endpoint. */
export type Recovery = Schemas["Recovery"];
/** What a retry of an endpoint's stream made due. */
export type RetryResult = Schemas["RetryResult"];
/** The test outcome testEndpoint queued. */
export type TestQueued = Schemas["TestQueued"];
/** What a recovery of a range would find, counted without writing. */
export type RecoveryPreview = Schemas["RecoveryPreview"];
/** A console link to one namespace's pages; see createConsoleLink. */
export type ConsoleLink = Schemas["ConsoleLink"];

type Query<Op extends keyof operations> = NonNullable<operations[Op]["parameters"]["query"]>;
/** A time as a Date or an RFC 3339 string. */
export type TimeInput = Date | string;
/** Pages the namespace list; cursor is the previous page's next_cursor. */
export type NamespacesQuery = Omit<Query<"listNamespaces">, "failing" | "disabled"> & { failing?: boolean; disabled?: boolean };
/** The fleet's figures; see getFleet. */
export type Fleet = Schemas["Fleet"];
/** Filters and pages the outcome list: accepted in [since, until), cursor a page's next_cursor or prev_cursor. */
export type OutcomesQuery = Omit<Query<"listOutcomes">, "since" | "until"> & { since?: TimeInput; until?: TimeInput };
/** Pages an endpoint's stream. */
export type OutboxQuery = Omit<Query<"getOutbox">, "endpoint">;

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
 * RelayClient calls one relay's REST API (api/openapi.yaml). A /v1
 * request answered 503 (or stream-busy) is resent after its Retry-After
 * with the same bytes, so what a first attempt stored answers duplicate;
 * healthz, readyz and hookKeys report what they are answered. Any other
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
  async putEndpoint(ns: string, id: string, config: EndpointConfig, opts: CallOptions = {}): Promise<EndpointSaved> {
    const op = "put endpoint";
    checkEndpoint(op, ns, id);
    // A resend carries the same configuration, so it is safe.
    return this.#json(op, "PUT", endpointPath(ns, id), config, opts, true);
  }

  /** getEndpoint reads endpoint id of namespace ns. */
  async getEndpoint(ns: string, id: string, opts: CallOptions = {}): Promise<Schemas["EndpointDetail"]> {
    const op = "get endpoint";
    checkEndpoint(op, ns, id);
    return this.#json(op, "GET", endpointPath(ns, id), undefined, opts, true);
  }

  /** listEndpoints lists the endpoints of namespace ns. */
  async listEndpoints(ns: string, opts: CallOptions = {}): Promise<Endpoint[]> {
    checkNamespace("list endpoints", ns);
    const out = await this.#json<{ endpoints?: Endpoint[] }>("list endpoints", "GET", `/v1/namespaces/${ns}/endpoints`, undefined, opts, true);
    return out.endpoints ?? [];
  }

  /**
   * enableEndpoint enables endpoint id of namespace ns and changes nothing
   * else of it: why it was disabled is cleared and its stream is delivered
   * at once. One already enabled is answered as it is.
   */
  async enableEndpoint(ns: string, id: string, opts: CallOptions = {}): Promise<Schemas["EndpointDetail"]> {
    const op = "enable endpoint";
    checkEndpoint(op, ns, id);
    return this.#json(op, "POST", `${endpointPath(ns, id)}/enable`, undefined, opts, true);
  }

  /**
   * disableEndpoint disables endpoint id of namespace ns and changes nothing
   * else of it; its stream keeps its rows until it is enabled. One already
   * disabled is answered as it is.
   */
  async disableEndpoint(ns: string, id: string, opts: CallOptions = {}): Promise<Schemas["EndpointDetail"]> {
    const op = "disable endpoint";
    checkEndpoint(op, ns, id);
    return this.#json(op, "POST", `${endpointPath(ns, id)}/disable`, undefined, opts, true);
  }

  /**
   * testEndpoint queues a test outcome, an operator event of type
   * endpoint.test, on the stream of endpoint id of namespace ns alone,
   * whatever its kinds (scope endpoints:write). getOutcome of its
   * reservation_id shows its attempts. A disabled endpoint is a
   * RelayProblem of slug endpoint-disabled.
   */
  async testEndpoint(ns: string, id: string, opts: CallOptions = {}): Promise<TestQueued> {
    const op = "test endpoint";
    checkEndpoint(op, ns, id);
    return this.#json(op, "POST", `${endpointPath(ns, id)}/test`, undefined, opts, true);
  }

  /**
   * retryEndpoint makes every pending row of endpoint's stream due now with
   * its backoff reset (scope admin). A disabled endpoint is a RelayProblem
   * of slug endpoint-disabled, unless enable, which enables it and makes
   * its stream due in one atomic step.
   */
  async retryEndpoint(ns: string, endpoint: string, enable = false, opts: CallOptions = {}): Promise<RetryResult> {
    const op = "retry endpoint";
    checkEndpoint(op, ns, endpoint);
    return this.#json(op, "POST", `${endpointPath(ns, endpoint)}/retry` + query({ enable: enable ? "true" : undefined }), undefined, opts, true);
  }

  /**
   * deleteEndpoint deletes endpoint id of namespace ns. While rows are
   * pending it is a RelayProblem of slug endpoint-has-backlog, with
   * backlogRows, unless force, which drops them.
   */
  async deleteEndpoint(ns: string, id: string, force = false, opts: CallOptions = {}): Promise<EndpointDeleted> {
    const op = "delete endpoint";
    checkEndpoint(op, ns, id);
    return this.#json(op, "DELETE", endpointPath(ns, id) + query({ force: force ? "true" : undefined }), undefined, opts, true);
  }

  /**
   * listNamespaces returns a page of every namespace that has an endpoint
   * (scope admin, on a token bound to no namespace). Page on with cursor
   * set to next_cursor until it is null, or use namespacePages.
   */
  async listNamespaces(q: NamespacesQuery = {}, opts: CallOptions = {}): Promise<NamespacePage> {
    const op = "list namespaces";
    const qs = query({
      cursor: cursorOf(op, q.cursor), limit: limitOf(op, q.limit), failing: q.failing ? "true" : undefined,
      disabled: q.disabled ? "true" : undefined, prefix: q.prefix || undefined,
    });
    return this.#json(op, "GET", "/v1/namespaces" + qs, undefined, opts, true);
  }

  /**
   * getFleet returns how many namespaces have a failing endpoint, how many
   * have one an operator disabled, and the backlog over every namespace
   * (scope admin, on a token bound to no namespace): relay keeps them per
   * bucket, so the call costs the same whatever the number of namespaces.
   */
  async getFleet(opts: CallOptions = {}): Promise<Fleet> {
    return this.#json("fleet", "GET", "/v1/fleet", undefined, opts, true);
  }

  /** namespacePages walks the namespace list from q.cursor (or the first page) to its last page. */
  async *namespacePages(q: NamespacesQuery = {}, opts: CallOptions = {}): AsyncGenerator<NamespacePage, void, undefined> {
    let cursor = q.cursor;
    for (;;) {
      const page = await this.listNamespaces({ ...q, cursor }, opts);
      yield page;
      if (!page.next_cursor) return;
      // A cursor that does not move would walk forever.
      if (page.next_cursor === cursor) throw new Error("relayclient: namespacePages: the answer's next_cursor is the cursor it answers");
      cursor = page.next_cursor;
    }
  }

  /**
   * listOutcomes returns a page of the retained outcomes of namespace ns in
   * acceptance order, or newest first with order "desc", filtered by q
   * (scope outbox:read). Page on with cursor set to next_cursor until it
   * is absent, or use outcomePages; back with prev_cursor.
   */
  async listOutcomes(ns: string, q: OutcomesQuery = {}, opts: CallOptions = {}): Promise<OutcomesPage> {
    const op = "list outcomes";
    checkNamespace(op, ns);
    if (q.endpoint !== undefined && !validNamespace(q.endpoint)) throw invalid(op, "endpoint id", nameRule);
    if (q.rid_prefix !== undefined && (typeof q.rid_prefix !== "string" || !/^[A-Za-z0-9._:-]{1,128}$/.test(q.rid_prefix))) {
      throw invalid(op, "rid_prefix", "1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'");
    }
    const qs = query({
      endpoint: q.endpoint,
      state: q.state,
      kind: q.kind,
      since: timeOf(op, "since", q.since),
      until: timeOf(op, "until", q.until),
      rid_prefix: q.rid_prefix,
      order: q.order,
      cursor: cursorOf(op, q.cursor),
      limit: limitOf(op, q.limit),
    });
    return this.#json(op, "GET", `/v1/namespaces/${ns}/outcomes` + qs, undefined, opts, true);
  }

  /** outcomePages walks the outcome list of namespace ns from q.cursor (or the first page) to its last page. */
  async *outcomePages(ns: string, q: OutcomesQuery = {}, opts: CallOptions = {}): AsyncGenerator<OutcomesPage, void, undefined> {
    let cursor = q.cursor;
    for (;;) {
      const page = await this.listOutcomes(ns, { ...q, cursor }, opts);
      yield page;
      if (!page.next_cursor) return;
      // A cursor that does not move would walk forever.
      if (page.next_cursor === cursor) throw new Error("relayclient: outcomePages: the answer's next_cursor is the cursor it answers");
      cursor = page.next_cursor;
    }
  }

  /**
   * getOutcome returns the retained outcome of reservation rid in namespace
   * ns and its story on every endpoint (scope outbox:read); a RelayProblem
   * of slug not-found when none is retained.
   */
  async getOutcome(ns: string, rid: string, opts: CallOptions = {}): Promise<OutcomeStory> {
    const op = "get outcome";
    checkNamespace(op, ns);
    checkRID(op, rid);
    return this.#json(op, "GET", `/v1/namespaces/${ns}/outcomes/${seg(rid)}`, undefined, opts, true);
  }

  /**
   * eraseOutcome removes the retained outcome of reservation rid from
   * namespace ns at once (scope admin), dropping it where it is pending. The
   * reservation id still answers duplicate at ingest for its window.
   */
  async eraseOutcome(ns: string, rid: string, opts: CallOptions = {}): Promise<OutcomeErased> {
    const op = "erase outcome";
    checkNamespace(op, ns);
    checkRID(op, rid);
    return this.#json(op, "DELETE", `/v1/namespaces/${ns}/outcomes/${seg(rid)}`, undefined, opts, true);
  }

  /**
   * getOutbox returns a page of the stream of endpoint of namespace ns: its
   * backlog, its state and its pending rows in sequence order. Page on with
   * cursor set to next_cursor until it is null; from_sequence starts the
   * page at the row of an outcome's seq.
   */
  async getOutbox(ns: string, endpoint: string, q: OutboxQuery = {}, opts: CallOptions = {}): Promise<OutboxPage> {
    const op = "outbox";
    checkEndpoint(op, ns, endpoint);
    const from = q.from_sequence;
    if (from !== undefined && (!Number.isSafeInteger(from) || from < 0)) throw invalid(op, "from_sequence", "a sequence number, a whole number from 0");
    const qs = query({ endpoint, cursor: cursorOf(op, q.cursor), from_sequence: from === undefined ? undefined : String(from), limit: limitOf(op, q.limit) });
    return this.#json(op, "GET", `/v1/namespaces/${ns}/outbox` + qs, undefined, opts, true);
  }

  /**
   * replayOutcome makes the pending row of reservation rid the first the
   * stream of endpoint tries, now (scope admin). A row not pending is a
   * RelayProblem of slug not-pending; a stream being delivered this instant
   * (stream-busy) is resent after its Retry-After.
   */
  async replayOutcome(ns: string, endpoint: string, rid: string, opts: CallOptions = {}): Promise<ReplayResult> {
    const op = "replay";
    checkEndpoint(op, ns, endpoint);
    checkRID(op, rid);
    return this.#json(op, "POST", `/v1/admin/namespaces/${ns}/endpoints/${seg(endpoint)}/outcomes/${seg(rid)}/replay`, undefined, opts, true);
  }

  /**
   * resendOutcome queues the retained outcome of reservation rid, which
   * endpoint delivered, on its stream again at its own place (scope admin).
   * One still pending there is a RelayProblem of slug still-pending; one
   * the endpoint never delivered is not-delivered.
   */
  async resendOutcome(ns: string, endpoint: string, rid: string, opts: CallOptions = {}): Promise<ResendResult> {
    const op = "resend";
    checkEndpoint(op, ns, endpoint);
    checkRID(op, rid);
    return this.#json(op, "POST", `${endpointPath(ns, endpoint)}/outcomes/${seg(rid)}/resend`, undefined, opts, true);
  }

  /**
   * recoverEndpoint starts a recovery of endpoint (scope admin): every
   * retained outcome it delivered that was accepted in [since, until) is
   * queued again by a background job; follow it with getRecovery. One
   * running already is a RelayProblem of slug recovery-running.
   */
  async recoverEndpoint(ns: string, endpoint: string, since: TimeInput, until: TimeInput, opts: CallOptions = {}): Promise<Recovery> {
    const op = "recover";
    checkEndpoint(op, ns, endpoint);
    if (since === undefined || until === undefined) throw invalid(op, "since and until", "given");
    const body: Schemas["RecoveryRequest"] = { since: timeOf(op, "since", since)!, until: timeOf(op, "until", until)! };
    return this.#json(op, "POST", `${endpointPath(ns, endpoint)}/recover`, body, opts, true);
  }

  /**
   * previewRecovery counts, writing nothing, what a recovery of endpoint
   * over outcomes accepted in [since, until) would find (scope
   * outbox:read); partial says the count stopped at its bound.
   */
  async previewRecovery(ns: string, endpoint: string, since: TimeInput, until: TimeInput, opts: CallOptions = {}): Promise<RecoveryPreview> {
    const op = "preview recovery";
    checkEndpoint(op, ns, endpoint);
    if (since === undefined || until === undefined) throw invalid(op, "since and until", "given");
    const qs = query({ since: timeOf(op, "since", since), until: timeOf(op, "until", until) });
    return this.#json(op, "GET", `${endpointPath(ns, endpoint)}/recover` + qs, undefined, opts, true);
  }

  /** getRecovery returns the recovery job of endpoint (scope outbox:read); a RelayProblem of slug not-found when it is not the endpoint's last. */
  async getRecovery(ns: string, endpoint: string, job: string, opts: CallOptions = {}): Promise<Recovery> {
    const op = "get recovery";
    checkEndpoint(op, ns, endpoint);
    if (!/^[0-9a-f]{32}$/.test(job)) throw invalid(op, "recovery id", "32 lowercase hex");
    return this.#json(op, "GET", `${endpointPath(ns, endpoint)}/recoveries/${job}`, undefined, opts, true);
  }

  /**
   * createConsoleLink mints a link to the console's pages of ns (scope
   * admin), to hand to whoever should see them: read-only, or with every
   * action the console offers there, for ttlSeconds (an hour when left
   * out). A relay that verifies tokens with public keys only throws a
   * RelayProblem of slug cannot-mint.
   */
  async createConsoleLink(ns: string, access: "read" | "write", ttlSeconds?: number, opts: CallOptions = {}): Promise<ConsoleLink> {
    const op = "create console link";
    checkNamespace(op, ns);
    if (access !== "read" && access !== "write") throw invalid(op, "access", '"read" or "write"');
    if (ttlSeconds !== undefined && (!Number.isInteger(ttlSeconds) || ttlSeconds < 60 || ttlSeconds > 604800)) {
      throw invalid(op, "ttlSeconds", "an integer of 60 to 604800");
    }
    const body: Schemas["ConsoleLinkRequest"] = ttlSeconds === undefined ? { access } : { access, ttl_seconds: ttlSeconds };
    return this.#json(op, "POST", `/v1/namespaces/${seg(ns)}/console-links`, body, opts, true);
  }

  /** healthz resolves when relay serves HTTP at all (200). It sends no token. */
  async healthz(opts: CallOptions = {}): Promise<void> {
    await this.#do("healthz", "GET", "/healthz", undefined, opts, false, false);
  }

  /**
   * readyz resolves when relay can serve traffic (200); otherwise it throws
   * a RelayProblem whose detail is relay's reason. It sends no token.
   */
  async readyz(opts: CallOptions = {}): Promise<void> {
    await this.#do("readyz", "GET", "/readyz", undefined, opts, false, false, true);
  }

  /**
   * hookKeys returns the key list at /.well-known/mkit-hook-keys.json as
   * served; receivers parse and check it with parseKeyList. It sends no token.
   */
  async hookKeys(opts: CallOptions = {}): Promise<Uint8Array> {
    return (await this.#do("hook keys", "GET", "/.well-known/mkit-hook-keys.json", undefined, opts, false, false)).body;
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

  /**
   * #do sends a call and returns its 2xx answer. auth is false for the
   * routes outside /v1, which take no token: it is not sent where it is not
   * needed. plainDetail makes a text answer's body the problem's detail,
   * for /readyz, whose text is its reason and carries no secret.
   */
  async #do(op: string, method: string, path: string, body: unknown, opts: CallOptions, retry: boolean, auth = true, plainDetail = false): Promise<{ status: number; body: Uint8Array }> {
    // Encoded once: a resend carries the same bytes.
    const bytes = body === undefined ? undefined : new TextEncoder().encode(JSON.stringify(body));
    const headers: Record<string, string> = { Accept: "application/json, application/problem+json" };
    if (bytes) headers["Content-Type"] = "application/json";
    if (opts.requestId && !/[\r\n]/.test(opts.requestId)) headers["X-Request-Id"] = opts.requestId;
    if (auth && this.#token) headers.Authorization = `Bearer ${this.#token}`;
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
      const p = problemOf(resp, data, plainDetail);
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

function problemOf(resp: Response, data: Uint8Array, plainDetail = false): RelayProblem {
  let body: Partial<Schemas["Problem"]> = {};
  const mt = (resp.headers.get("Content-Type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (plainDetail && mt !== "application/problem+json") {
    body = { detail: printable(new TextDecoder().decode(data).trim().replace(/^not ready:/, "").trim(), 512) };
  }
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

const nameRule = "1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit";

/** invalid is the error of a call refused before it is sent; it names the rule, not the value. */
function invalid(op: string, what: string, rule: string): Error {
  return new Error(`relayclient: ${op}: ${what} must be ${rule}`);
}

function checkEndpoint(op: string, ns: string, id: string): void {
  checkNamespace(op, ns);
  // Endpoint ids are spelt as namespaces are.
  if (typeof id !== "string" || !validNamespace(id)) throw invalid(op, "endpoint id", nameRule);
}

/** checkRID: a reservation id a client may name, 1 to 128 of [A-Za-z0-9._:-], not starting "s:" (relay's synthetic rows). */
function checkRID(op: string, rid: string): void {
  if (typeof rid !== "string" || !/^[A-Za-z0-9._:-]{1,128}$/.test(rid) || rid.startsWith("s:")) {
    throw invalid(op, "reservation id", "1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-', not starting \"s:\"");
  }
}

function endpointPath(ns: string, id: string): string {
  return `/v1/namespaces/${ns}/endpoints/${seg(id)}`;
}

/**
 * seg escapes a path segment. ':' is left as it is: it is allowed in a
 * segment, reservation ids hold it, and relay's router matches the path
 * as sent, so "%3A" would name another id.
 */
function seg(s: string): string {
  return encodeURIComponent(s).replace(/%3A/g, ":");
}

/** query is "?" and the parameters that are set, or "" when none is. */
function query(params: Record<string, string | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

/** cursorOf is a page cursor to send: "" (the first page) is none. */
function cursorOf(op: string, cursor: string | undefined): string | undefined {
  if (cursor === undefined || cursor === "") return undefined;
  if (typeof cursor !== "string") throw invalid(op, "cursor", "the previous page's next_cursor");
  return cursor;
}

/** limitOf is a page size to send: 0 is relay's default; relay checks the upper bound. */
function limitOf(op: string, limit: number | undefined): string | undefined {
  if (limit === undefined || limit === 0) return undefined;
  if (!Number.isSafeInteger(limit) || limit < 0) throw invalid(op, "limit", "a positive integer");
  return String(limit);
}

const rfc3339 = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$/;

/** timeOf is a time to send, RFC 3339: a Date in UTC, a string as given once it parses. */
function timeOf(op: string, what: string, t: TimeInput | undefined): string | undefined {
  if (t === undefined) return undefined;
  if (t instanceof Date) {
    const y = t.getUTCFullYear();
    if (Number.isNaN(t.getTime()) || y < 0 || y > 9999) throw invalid(op, what, "a valid Date of the years 0 to 9999");
    return t.toISOString();
  }
  if (typeof t !== "string" || !rfc3339.test(t) || Number.isNaN(Date.parse(t))) throw invalid(op, what, "a Date or an RFC 3339 time");
  return t;
}
