// The client against a local server that answers as scripted.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { inspect } from "node:util";
import { IngestAllError, RelayClient, RelayProblem, type Outcome } from "@hookrelay/relay";

const token = "tok-e30.c2VjcmV0LXRva2VuLXZhbHVl.sig-do-not-leak";

interface Seen { method: string; url: string; auth: string; body: Buffer }
let seen: Seen[] = [];
let answer: (req: Seen, res: ServerResponse) => void = () => {};
let base = "";
const server = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const s = { method: req.method!, url: req.url!, auth: req.headers.authorization ?? "", body: Buffer.concat(chunks) };
    seen.push(s);
    answer(s, res);
  });
});
before(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => server.close());

const outcome = (i: number): Outcome => ({ reservation_id: `r-${i}`, repository: "acme/widgets", occurred_unix_ms: 1764460800000 + i, expired: {} });
const accepted = (s: Seen, res: ServerResponse) => {
  const list = JSON.parse(s.body.toString()) as { outcomes?: Outcome[] } & Outcome;
  const results = (list.outcomes ?? [list]).map((o) => ({ reservation_id: o.reservation_id, status: "accepted" }));
  res.writeHead(202, { "Content-Type": "application/json" }).end(JSON.stringify({ results }));
};
const problem = (res: ServerResponse, status: number, slug: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  res.writeHead(status, { "Content-Type": "application/problem+json", ...headers })
    .end(JSON.stringify({ type: `urn:hookrelay:problem:${slug}`, title: slug, status, detail: `detail of ${slug}`, request_id: "req-1", ...extra }));

/** noLeak fails when the token shows anywhere in err or what it holds. */
function noLeak(err: unknown): void {
  for (const s of [String(err), inspect(err, { depth: Infinity, showHidden: true }), JSON.stringify(err), (err as Error).stack ?? ""]) {
    assert.ok(!s.includes(token) && !s.includes("c2VjcmV0"), `the token shows in ${s}`);
  }
}

test("ingestAll splits into requests of at most 100 and keeps the order", async () => {
  seen = [];
  answer = accepted;
  const c = new RelayClient(base + "/", { token });
  const outcomes = Array.from({ length: 250 }, (_, i) => outcome(i));
  const results = await c.ingestAll("acme", outcomes);
  assert.deepEqual(seen.map((s) => (JSON.parse(s.body.toString()).outcomes as unknown[]).length), [100, 100, 50]);
  assert.deepEqual(results.map((r) => r.reservation_id), outcomes.map((o) => o.reservation_id));
  for (const s of seen) {
    assert.equal(s.method, "POST");
    assert.equal(s.url, "/v1/namespaces/acme/outcomes");
    assert.equal(s.auth, `Bearer ${token}`);
  }
  seen = [];
  assert.deepEqual(await c.ingestAll("acme", []), []);
  assert.equal(seen.length, 0, "no outcome is no request");
  assert.equal((await c.ingest("acme", outcome(7))).status, "accepted");
  assert.equal(JSON.parse(seen[0]!.body.toString()).reservation_id, "r-7", "one outcome is sent as itself");
  inspect(c).includes(token) && assert.fail("the client shows its token");
});

test("a 503 is resent after its Retry-After with the same bytes", async () => {
  seen = [];
  let n = 0;
  answer = (s, res) => (++n <= 2 ? problem(res, 503, "unavailable", {}, { "Retry-After": n === 1 ? "2" : "0" }) : accepted(s, res));
  const waits: number[] = [];
  const c = new RelayClient(base, { token, sleep: async (ms) => void waits.push(ms) });
  const results = await c.ingestAll("acme", [outcome(1), outcome(2)]);
  assert.equal(results.length, 2);
  assert.equal(seen.length, 3);
  assert.deepEqual(waits, [2000, 0]);
  assert.ok(seen[1]!.body.equals(seen[0]!.body) && seen[2]!.body.equals(seen[0]!.body), "a resend carries the same bytes");

  // With the real timer: Retry-After 0 is resent at once.
  seen = [];
  n = 1;
  await new RelayClient(base, { token }).ingest("acme", outcome(3));
  assert.equal(seen.length, 2);
  assert.ok(seen[1]!.body.equals(seen[0]!.body));

  // Attempts are bounded; a wait longer than allowed is not waited out.
  seen = [];
  answer = (_, res) => problem(res, 503, "unavailable", {}, { "Retry-After": "0" });
  const err = await new RelayClient(base, { token, maxAttempts: 3 }).ingest("acme", outcome(4)).catch((e) => e);
  assert.ok(err instanceof RelayProblem && err.status === 503 && err.slug === "unavailable" && err.retryAfterMs === 0, String(err));
  assert.equal(seen.length, 3);
  noLeak(err);
  seen = [];
  answer = (_, res) => problem(res, 503, "unavailable", {}, { "Retry-After": "3600" });
  const long = await new RelayClient(base, { token }).ingest("acme", outcome(5)).catch((e) => e);
  assert.ok(long instanceof RelayProblem && long.retryAfterMs === 3_600_000);
  assert.equal(seen.length, 1);
});

test("problems are typed errors with their type and slug", async () => {
  const c = new RelayClient(base, { token });
  answer = (_, res) => problem(res, 409, "conflict");
  const conflict = await c.ingest("acme", outcome(1)).catch((e) => e);
  assert.ok(conflict instanceof RelayProblem);
  assert.equal(conflict.type, "urn:hookrelay:problem:conflict");
  assert.equal(conflict.slug, "conflict");
  assert.equal(conflict.status, 409);
  assert.equal(conflict.detail, "detail of conflict");
  assert.equal(conflict.requestId, "req-1");
  assert.equal(conflict.message, "relayclient: 409 conflict: detail of conflict");
  noLeak(conflict);

  // The second request of an ingestAll is invalid: its errors index into the whole list.
  let n = 0;
  answer = (s, res) => (++n === 2 ? problem(res, 400, "invalid-outcome", { errors: [{ index: 3, detail: "no kind" }] }) : accepted(s, res));
  const err = await c.ingestAll("acme", Array.from({ length: 150 }, (_, i) => outcome(i))).catch((e) => e);
  assert.ok(err instanceof IngestAllError, String(err));
  assert.equal(err.results.length, 100);
  assert.ok(err.cause instanceof RelayProblem);
  assert.equal(err.cause.slug, "invalid-outcome");
  assert.deepEqual(err.cause.errors, [{ index: 103, detail: "no kind" }]);
  noLeak(err);

  // Not a problem (a proxy's page): the status alone; the body is dropped.
  answer = (_, res) => res.writeHead(502, { "Content-Type": "text/html" }).end(`<p>${token}</p>`);
  const proxy = await c.ingest("acme", outcome(1)).catch((e) => e);
  assert.ok(proxy instanceof RelayProblem && proxy.status === 502 && proxy.type === "" && proxy.title !== "");
  noLeak(proxy);

  answer = (_, res) => problem(res, 401, "unauthorized", { detail: "control\u0007chars\nstripped" });
  const unauth = await c.putEndpoint("acme", "billing", { url: "http://127.0.0.1:9/hooks" }).catch((e) => e);
  assert.ok(unauth instanceof RelayProblem && unauth.slug === "unauthorized");
  assert.equal(unauth.message, "relayclient: 401 unauthorized: controlcharsstripped");
});

test("no error carries the token", async () => {
  const c = new RelayClient(base, { token });
  answer = (_, res) => res.writeHead(202, { "Content-Type": "application/json" }).end('{"results":[]}');
  noLeak(await c.ingest("acme", outcome(1)).catch((e) => e));
  answer = (_, res) => res.writeHead(200, { "Content-Type": "application/json" }).end("[1]");
  noLeak(await c.listEndpoints("acme").catch((e) => e));
  answer = (_, res) => res.writeHead(302, { Location: "http://127.0.0.1:9/elsewhere" }).end();
  const redirect = await c.listEndpoints("acme").catch((e) => e);
  assert.ok(redirect instanceof RelayProblem && redirect.status === 302, "a redirect is not followed");
  // Nothing listens: a transport error.
  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((r) => closed.close(r));
  const down = await new RelayClient(`http://127.0.0.1:${port}`, { token }).ingest("acme", outcome(1)).catch((e) => e);
  assert.ok(down instanceof Error && /relayclient: ingest:/.test(down.message), String(down));
  noLeak(down);
  const aborted = await c.ingest("acme", outcome(1), { signal: AbortSignal.abort() }).catch((e) => e);
  noLeak(aborted);
  // Bad arguments name no token either.
  noLeak(await c.ingest("Not A Namespace", outcome(1)).catch((e) => e));
  assert.throws(() => new RelayClient(`http://user:${token}@127.0.0.1/`), (e) => (noLeak(e), true));
  assert.throws(() => new RelayClient("http://127.0.0.1/?t=1"));
  assert.throws(() => new RelayClient("ftp://127.0.0.1/"));
});

const json = (status: number, v: unknown) => (_: Seen, res: ServerResponse) => res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(v));

test("every operation sends its method, path, query and body and decodes its answer", async () => {
  const c = new RelayClient(base + "/prefix/", { token });
  const page = { namespaces: [{ namespace: "acme", endpoints: 2, failing: 0, disabled: 0, backlog: { rows: 0, bytes: 0 } }], next_cursor: null };
  const cases: { name: string; call: () => Promise<unknown>; answer: unknown; status?: number; method: string; url: string; body?: unknown; auth?: boolean }[] = [
    { name: "listNamespaces", call: () => c.listNamespaces(), answer: page, method: "GET", url: "/v1/namespaces" },
    { name: "listNamespaces paged", call: () => c.listNamespaces({ cursor: "c/1+2", limit: 10, failing: true }), answer: page, method: "GET", url: "/v1/namespaces?cursor=c%2F1%2B2&limit=10&failing=true" },
    { name: "listNamespaces disabled by prefix", call: () => c.listNamespaces({ disabled: true, prefix: "ac" }), answer: page, method: "GET", url: "/v1/namespaces?disabled=true&prefix=ac" },
    {
      name: "getFleet", call: () => c.getFleet(), method: "GET", url: "/v1/fleet",
      answer: { failing_namespaces: 3, disabled_namespaces: 1, backlog: { rows: 4, bytes: 300 }, oldest_pending: { accepted_at: null, sampled_at: "2026-12-07T10:00:00.000Z" } },
    },
    {
      name: "listOutcomes", answer: { outcomes: [{ reservation_id: "r-1", seq: 1, accepted_at: "2026-12-07T10:00:00Z", kind: "expired", endpoints: [{ endpoint: "billing", state: "delivered", at: "2026-12-07T10:00:01Z" }] }], next_cursor: "n2" },
      call: () => c.listOutcomes("acme", { endpoint: "billing", state: "delivered", since: new Date(Date.UTC(2026, 11, 7, 9)), until: "2026-12-07T11:00:00+01:00", cursor: "n1", limit: 5 }),
      method: "GET", url: "/v1/namespaces/acme/outcomes?endpoint=billing&state=delivered&since=2026-12-07T09%3A00%3A00.000Z&until=2026-12-07T11%3A00%3A00%2B01%3A00&cursor=n1&limit=5",
    },
    {
      name: "listOutcomes newest first", answer: { outcomes: [], next_cursor: "n3", prev_cursor: "p1" },
      call: () => c.listOutcomes("acme", { kind: "aborted", rid_prefix: "ord:1", order: "desc", cursor: "p2" }),
      method: "GET", url: "/v1/namespaces/acme/outcomes?kind=aborted&rid_prefix=ord%3A1&order=desc&cursor=p2",
    },
    {
      name: "getOutcome", call: () => c.getOutcome("acme", "r:1.a_b-c"), method: "GET", url: "/v1/namespaces/acme/outcomes/r:1.a_b-c",
      answer: { reservation_id: "r:1.a_b-c", seq: 3, accepted_at: "2026-12-07T10:00:00Z", outcome: { reservation_id: "r:1.a_b-c", repository: "acme/widgets", occurred_unix_ms: 1, expired: {} }, endpoints: [] },
    },
    { name: "eraseOutcome", call: () => c.eraseOutcome("acme", "r-1"), answer: { reservation_id: "r-1", dropped: ["billing"] }, method: "DELETE", url: "/v1/namespaces/acme/outcomes/r-1" },
    {
      name: "getOutbox", call: () => c.getOutbox("acme", "billing", { cursor: "x", limit: 2 }), method: "GET", url: "/v1/namespaces/acme/outbox?endpoint=billing&cursor=x&limit=2",
      answer: { endpoint: "billing", backlog: { rows: 1, bytes: 5 }, state: "due", next_attempt_at: null, failed_fires: 0, rows: [], next_cursor: null },
    },
    {
      name: "getOutbox from a row", call: () => c.getOutbox("acme", "billing", { from_sequence: 42 }), method: "GET", url: "/v1/namespaces/acme/outbox?endpoint=billing&from_sequence=42",
      answer: { endpoint: "billing", backlog: { rows: 1, bytes: 5 }, state: "due", next_attempt_at: null, failed_fires: 0, rows: [], next_cursor: null },
    },
    { name: "listEndpoints", call: () => c.listEndpoints("acme"), answer: { endpoints: [] }, method: "GET", url: "/v1/namespaces/acme/endpoints" },
    {
      name: "putEndpoint", call: () => c.putEndpoint("acme", "billing", { url: "https://hooks.example.com/x", kinds: ["expired"] }), status: 201,
      method: "PUT", url: "/v1/namespaces/acme/endpoints/billing", body: { url: "https://hooks.example.com/x", kinds: ["expired"] }, answer: { id: "billing", url: "https://hooks.example.com/x" },
    },
    { name: "getEndpoint", call: () => c.getEndpoint("acme", "billing"), answer: { id: "billing", url: "https://hooks.example.com/x" }, method: "GET", url: "/v1/namespaces/acme/endpoints/billing" },
    { name: "deleteEndpoint", call: () => c.deleteEndpoint("acme", "billing"), answer: { id: "billing", dropped_rows: 0 }, method: "DELETE", url: "/v1/namespaces/acme/endpoints/billing" },
    { name: "deleteEndpoint forced", call: () => c.deleteEndpoint("acme", "billing", true), answer: { id: "billing", dropped_rows: 4 }, method: "DELETE", url: "/v1/namespaces/acme/endpoints/billing?force=true" },
    { name: "enableEndpoint", call: () => c.enableEndpoint("acme", "billing"), answer: { id: "billing", enabled: true }, method: "POST", url: "/v1/namespaces/acme/endpoints/billing/enable" },
    { name: "disableEndpoint", call: () => c.disableEndpoint("acme", "billing"), answer: { id: "billing", enabled: false }, method: "POST", url: "/v1/namespaces/acme/endpoints/billing/disable" },
    {
      name: "testEndpoint", call: () => c.testEndpoint("acme", "billing"), status: 202, method: "POST", url: "/v1/namespaces/acme/endpoints/billing/test",
      answer: { endpoint: "billing", reservation_id: "relay.endpoint.test.billing.1765101600000", type: "endpoint.test" },
    },
    {
      name: "retryEndpoint", call: () => c.retryEndpoint("acme", "billing"), status: 202, method: "POST", url: "/v1/namespaces/acme/endpoints/billing/retry",
      answer: { endpoint: "billing", pending_rows: 3, next_attempt_at: "2026-12-07T10:00:00Z", enabled: false },
    },
    {
      name: "retryEndpoint enabling", call: () => c.retryEndpoint("acme", "billing", true), status: 202, method: "POST", url: "/v1/namespaces/acme/endpoints/billing/retry?enable=true",
      answer: { endpoint: "billing", pending_rows: 3, next_attempt_at: "2026-12-07T10:00:00Z", enabled: true },
    },
    {
      name: "previewRecovery", call: () => c.previewRecovery("acme", "billing", new Date(Date.UTC(2026, 11, 6)), "2026-12-07T00:00:00Z"), method: "GET",
      url: "/v1/namespaces/acme/endpoints/billing/recover?since=2026-12-06T00%3A00%3A00.000Z&until=2026-12-07T00%3A00%3A00Z",
      answer: { endpoint: "billing", since: "2026-12-06T00:00:00Z", until: "2026-12-07T00:00:00Z", delivered: 4, pending: 1, examined: 9, partial: false },
    },
    {
      name: "replayOutcome", call: () => c.replayOutcome("acme", "billing", "r-1"), status: 202, method: "POST", url: "/v1/admin/namespaces/acme/endpoints/billing/outcomes/r-1/replay",
      answer: { endpoint: "billing", reservation_id: "r-1", sequence: 9, next_attempt_at: "2026-12-07T10:00:00Z" },
    },
    { name: "resendOutcome", call: () => c.resendOutcome("acme", "billing", "r-1"), status: 202, answer: { seq: 9, due_at: null }, method: "POST", url: "/v1/namespaces/acme/endpoints/billing/outcomes/r-1/resend" },
    {
      name: "recoverEndpoint", call: () => c.recoverEndpoint("acme", "billing", new Date(Date.UTC(2026, 11, 6)), "2026-12-07T00:00:00Z"), status: 202,
      method: "POST", url: "/v1/namespaces/acme/endpoints/billing/recover", body: { since: "2026-12-06T00:00:00.000Z", until: "2026-12-07T00:00:00Z" },
      answer: { id: "0".repeat(32), endpoint: "billing", state: "running", since: "2026-12-06T00:00:00Z", until: "2026-12-07T00:00:00Z", examined: 0, queued: 0, total: 3, created_at: "2026-12-07T10:00:00Z" },
    },
    {
      name: "getRecovery", call: () => c.getRecovery("acme", "billing", "ab".repeat(16)), method: "GET", url: `/v1/namespaces/acme/endpoints/billing/recoveries/${"ab".repeat(16)}`,
      answer: { id: "ab".repeat(16), endpoint: "billing", state: "done", since: "2026-12-06T00:00:00Z", until: "2026-12-07T00:00:00Z", examined: 3, queued: 3, total: 3, created_at: "2026-12-07T10:00:00Z", finished_at: "2026-12-07T10:00:01Z" },
    },
  ];
  for (const k of cases) {
    seen = [];
    answer = json(k.status ?? 200, k.answer);
    const got = await k.call();
    assert.deepEqual(got, k.name === "listEndpoints" ? [] : k.answer, k.name);
    assert.equal(seen.length, 1, k.name);
    const s = seen[0]!;
    assert.equal(s.method, k.method, k.name);
    assert.equal(s.url, "/prefix" + k.url, k.name);
    assert.equal(s.auth, `Bearer ${token}`, k.name);
    if (k.body === undefined) assert.equal(s.body.length, 0, `${k.name} sends no body`);
    else assert.deepEqual(JSON.parse(s.body.toString()), k.body, k.name);

    // The same call answered with a problem throws it, token-free.
    seen = [];
    answer = (_, res) => problem(res, 404, "not-found");
    const err = await k.call().catch((e) => e);
    assert.ok(err instanceof RelayProblem && err.status === 404 && err.slug === "not-found" && err.detail === "detail of not-found", `${k.name}: ${err}`);
    noLeak(err);
  }

  // Pages, walked to the last: namespaces until next_cursor is null, outcomes until it is absent.
  const cursors: (string | null)[] = [];
  answer = (s, res) => {
    const cur = new URL(s.url, base).searchParams.get("cursor");
    cursors.push(cur);
    const next = cur === null ? "p2" : cur === "p2" ? "p3" : undefined;
    json(200, s.url.includes("/outcomes") ? { outcomes: [], ...(next ? { next_cursor: next } : {}) } : { namespaces: [], next_cursor: next ?? null })(s, res);
  };
  let pages = 0;
  for await (const p of c.namespacePages({ limit: 1 })) pages += p.namespaces.length + 1;
  assert.equal(pages, 3);
  for await (const p of c.outcomePages("acme", { state: "pending" })) pages += p.outcomes.length + 1;
  assert.equal(pages, 6);
  assert.deepEqual(cursors, [null, "p2", "p3", null, "p2", "p3"]);

  // A cursor that does not move is not walked forever.
  answer = json(200, { outcomes: [], next_cursor: "same" });
  const stuck = await (async () => {
    for await (const _ of c.outcomePages("acme")) void _;
  })().catch((e) => e);
  assert.ok(stuck instanceof Error && /outcomePages: the answer's next_cursor is the cursor it answers/.test(stuck.message), String(stuck));
});

test("a stream-busy answer is resent, and a 503 to any /v1 call; an endpoint-has-backlog problem carries its rows", async () => {
  seen = [];
  let n = 0;
  answer = (s, res) => (++n === 1 ? problem(res, 409, "stream-busy", {}, { "Retry-After": "1" }) : json(202, { endpoint: "billing", reservation_id: "r-1", sequence: 2, next_attempt_at: "2026-12-07T10:00:00Z" })(s, res));
  const waits: number[] = [];
  const c = new RelayClient(base, { token, sleep: async (ms) => void waits.push(ms) });
  assert.equal((await c.replayOutcome("acme", "billing", "r-1")).sequence, 2);
  assert.equal(seen.length, 2);
  assert.deepEqual(waits, [1000]);

  // Every /v1 call is resent, the endpoint calls included.
  for (const call of [() => c.putEndpoint("acme", "billing", { url: "https://hooks.example.com/x" }), () => c.getEndpoint("acme", "billing"), () => c.listEndpoints("acme"), () => c.deleteEndpoint("acme", "billing")]) {
    seen = [];
    n = 0;
    answer = (s, res) => (++n === 1 ? problem(res, 503, "unavailable", {}, { "Retry-After": "0" }) : json(200, { id: "billing", endpoints: [] })(s, res));
    await call();
    assert.equal(seen.length, 2, String(call));
    assert.ok(seen[1]!.body.equals(seen[0]!.body));
  }

  answer = (_, res) => problem(res, 409, "endpoint-has-backlog", { backlog_rows: 7 });
  const busy = await c.deleteEndpoint("acme", "billing").catch((e) => e);
  assert.ok(busy instanceof RelayProblem && busy.slug === "endpoint-has-backlog" && busy.backlogRows === 7, String(busy));
});

test("health, readiness and the key list send no token", async () => {
  const c = new RelayClient(base, { token });
  seen = [];
  answer = (_, res) => res.writeHead(200, { "Content-Type": "text/plain" }).end("ok");
  await c.healthz();
  await c.readyz();
  const keys = '{"keys":[]}';
  answer = (_, res) => res.writeHead(200, { "Content-Type": "application/json" }).end(keys);
  assert.equal(new TextDecoder().decode(await c.hookKeys()), keys);
  assert.deepEqual(seen.map((s) => `${s.method} ${s.url} ${s.auth}`), ["GET /healthz ", "GET /readyz ", "GET /.well-known/mkit-hook-keys.json "]);

  answer = (_, res) => res.writeHead(503, { "Content-Type": "text/plain" }).end("not ready: redis\u0007 unreachable\n");
  const notReady = await c.readyz().catch((e) => e);
  assert.ok(notReady instanceof RelayProblem && notReady.status === 503 && notReady.type === "", String(notReady));
  assert.equal(notReady.detail, "redis unreachable");
  seen = [];
  const down = await c.healthz().catch((e) => e);
  assert.ok(down instanceof RelayProblem && down.status === 503 && down.detail === "", "a health check is not resent and keeps no text");
  assert.equal(seen.length, 1);
});

test("arguments relay would refuse are refused before a request", async () => {
  const c = new RelayClient(base, { token });
  seen = [];
  const refused: [string, () => Promise<unknown>, RegExp][] = [
    ["a synthetic reservation id", () => c.getOutcome("acme", "s:1"), /get outcome: reservation id must be/],
    ["a reservation id with a slash", () => c.resendOutcome("acme", "billing", "r/../x"), /resend: reservation id must be/],
    ["a long reservation id", () => c.eraseOutcome("acme", "r".repeat(129)), /erase outcome: reservation id/],
    ["an endpoint id with a capital", () => c.getOutbox("acme", "Billing"), /outbox: endpoint id must be/],
    ["an endpoint id filter with a slash", () => c.listOutcomes("acme", { endpoint: "a/b" }), /list outcomes: endpoint id/],
    ["a fractional limit", () => c.listNamespaces({ limit: 1.5 }), /list namespaces: limit must be a positive integer/],
    ["a negative limit", () => c.listOutcomes("acme", { limit: -1 }), /limit must be/],
    ["a reservation id prefix with a space", () => c.listOutcomes("acme", { rid_prefix: "a b" }), /list outcomes: rid_prefix must be/],
    ["a negative sequence number", () => c.getOutbox("acme", "billing", { from_sequence: -1 }), /outbox: from_sequence must be/],
    ["an invalid Date", () => c.listOutcomes("acme", { since: new Date(NaN) }), /since must be a valid Date/],
    ["a time that is not RFC 3339", () => c.listOutcomes("acme", { until: "yesterday" }), /until must be a Date or an RFC 3339 time/],
    ["a time without its zone", () => c.recoverEndpoint("acme", "billing", "2026-12-07T00:00:00", new Date()), /recover: since must be/],
    ["a preview time without its zone", () => c.previewRecovery("acme", "billing", new Date(), "2026-12-07T00:00:00"), /preview recovery: until must be/],
    ["a recovery id that is not 32 hex", () => c.getRecovery("acme", "billing", "AB".repeat(16)), /get recovery: recovery id must be 32 lowercase hex/],
    ["a namespace with a slash", () => c.deleteEndpoint("a/b", "billing"), /delete endpoint: .* is not a namespace/],
    ["an endpoint id with a slash", () => c.putEndpoint("acme", "a/b", { url: "https://hooks.example.com/x" }), /put endpoint: endpoint id must be/],
    ["an endpoint id with a dot", () => c.getEndpoint("acme", ".."), /get endpoint: endpoint id must be/],
  ];
  for (const [name, call, want] of refused) {
    const err = await call().catch((e) => e);
    assert.ok(err instanceof Error && !(err instanceof RelayProblem) && want.test(err.message), `${name}: ${err}`);
    noLeak(err);
  }
  assert.equal(seen.length, 0, "no request was sent");
});
