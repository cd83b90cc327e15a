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
