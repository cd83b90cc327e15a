// The package against the real relay binary: built from this repository,
// run on its embedded miniredis, its webhooks received on a local server and
// verified with this package's verifiers.
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { promisify } from "node:util";
import {
  fetchKeyList, HookVerifyError, MkitVerifier, parseKeyList, RelayClient, RelayProblem, StandardVerifier, type NamespaceSummary, type Outcome, type OutcomeSummary, type Verifier,
} from "@hookrelay/relay";
import { withVerification } from "@hookrelay/relay/node";
import { repoRoot, within } from "./helpers.js";

const run = promisify(execFile);
const requireReal = process.env.RELAY_TEST_REQUIRE_REAL === "1";

function goOnPath(): boolean {
  return (process.env.PATH ?? "").split(delimiter).some((d) => {
    try {
      accessSync(join(d, "go"), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

const skip = !goOnPath() && !requireReal ? "go is not on PATH (set RELAY_TEST_REQUIRE_REAL=1 to make this a failure)" : false;

/** freePort is a port nothing listens on now. */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * poll calls f until ok holds of its value, for what relay records after
 * the receiver has answered (a delivery, a recovery's end): nothing tells
 * the test when it has.
 */
async function poll<T>(f: () => Promise<T>, ok: (v: T) => boolean, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}; last: ${JSON.stringify(v)}`);
    await delay(25);
  }
}

/** Events is what the receiver saw, with promises that wait for what a test expects. */
class Events<T> {
  readonly all: T[] = [];
  #waiters: { pred: (all: T[]) => boolean; resolve: () => void }[] = [];
  push(e: T): void {
    this.all.push(e);
    this.#waiters = this.#waiters.filter((w) => (w.pred(this.all) ? (w.resolve(), false) : true));
  }
  until(pred: (all: T[]) => boolean, ms: number, what: string): Promise<void> {
    if (pred(this.all)) return Promise.resolve();
    return within(new Promise<void>((resolve) => this.#waiters.push({ pred, resolve })), ms, what);
  }
}

test("end to end: outcomes posted with the client arrive verified in every scheme; another namespace's are refused", { skip, timeout: 300_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "relay-ts-e2e-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const bin = join(dir, "relay");
  await run("go", ["build", "-o", bin, "./cmd/relay"], { cwd: repoRoot, maxBuffer: 16 << 20 });
  await run(bin, ["keygen", "--out", join(dir, "hook.pem")]);

  // The receiver: one path per scheme, its verifiers set once relay has shown the keys.
  const verifiers: Record<string, Verifier> = {};
  const verified = new Events<{ path: string; namespace: string; reservation: string }>();
  const refused = new Events<{ path: string; code: string; namespace: string }>();
  const receiver = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "").split("?")[0]!;
    const v = verifiers[path];
    if (!v) return void res.writeHead(404).end();
    withVerification(v, (r, w) => {
      const body = JSON.parse(r.rawBody.toString()) as { data: { namespace: string; reservation_id: string } };
      verified.push({ path, namespace: body.data.namespace, reservation: body.data.reservation_id });
      w.writeHead(204).end();
    }, {
      onError: (r, err) => refused.push({ path, code: err instanceof HookVerifyError ? err.code : err.message, namespace: String(r.headers["x-mkit-hook-namespace"] ?? "") }),
    })(req, res);
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  t.after(() => receiver.close());
  const recv = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;

  // relay on its embedded miniredis: no RELAY_REDIS_URL.
  const port = await freePort();
  const relayURL = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    RELAY_REDIS_URL: "",
    RELAY_LISTEN: `127.0.0.1:${port}`,
    RELAY_PUBLIC_URL: relayURL,
    RELAY_JWT_SECRET: "ts-e2e-".padEnd(48, "k"),
    RELAY_HOOK_KEY_FILE: join(dir, "hook.pem"),
    RELAY_HOOK_KEY_ID: "relay-ts-e2e",
    RELAY_ALLOW_CIDRS: "127.0.0.1/32",
    RELAY_LOG_LEVEL: "warn",
  };
  const relay: ChildProcess = spawn(bin, ["serve"], { env, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const exited = new Promise<never>((_, reject) => relay.on("exit", (code) => reject(new Error(`relay exited (${code}):\n${log}`))));
  exited.catch(() => {});
  t.after(async () => {
    if (relay.exitCode !== null || relay.signalCode !== null) return;
    relay.kill("SIGTERM");
    await within(once(relay, "exit"), 60_000, "relay to stop").catch(() => relay.kill("SIGKILL"));
  });
  const listening = new Promise<void>((resolve) => {
    relay.stderr!.on("data", (c: Buffer) => {
      log += c.toString();
      if (log.includes("relay listening")) resolve();
    });
  });
  await within(Promise.race([listening, exited]), 30_000, "relay to listen");

  const { stdout } = await run(bin, ["token", "--scope", "admin"], { env });
  const token = stdout.trim();
  const client = new RelayClient(relayURL, { token });

  const mkit = await client.putEndpoint("acme", "mkit", { url: `${recv}/mkit`, scheme: "mkit-hook-v2" });
  const std = await client.putEndpoint("acme", "std", { url: `${recv}/std`, scheme: "standard-webhooks" });
  const v1a = await client.putEndpoint("acme", "v1a", { url: `${recv}/v1a`, scheme: "standard-webhooks-v1a" });
  // Another tenant registers the same URL: its webhooks must not pass for acme's.
  await client.putEndpoint("other", "spy", { url: `${recv}/mkit`, scheme: "mkit-hook-v2" });
  assert.equal(mkit.scheme, "mkit-hook-v2");
  assert.match(std.secret ?? "", /^whsec_/);
  assert.match(v1a.public_key ?? "", /^whpk_/);

  const keys = await fetchKeyList(`${relayURL}/.well-known/mkit-hook-keys.json`);
  assert.ok(keys.keys.some((k) => k.keyId === "relay-ts-e2e"), JSON.stringify(keys));
  const mkitVerifier = new MkitVerifier({ keys, audience: recv, namespaces: ["acme"] });
  mkitVerifier.check();
  verifiers["/mkit"] = mkitVerifier;
  verifiers["/std"] = new StandardVerifier({ secrets: [std.secret!] });
  verifiers["/v1a"] = new StandardVerifier({ publicKeys: [v1a.public_key!] });

  const outcomes: Outcome[] = Array.from({ length: 3 }, (_, i) => ({
    reservation_id: `r-ts-${i}`, repository: "acme/widgets", occurred_unix_ms: Date.now(), expired: {},
  }));
  const results = await client.ingestAll("acme", outcomes);
  assert.deepEqual(results.map((r) => r.status), ["accepted", "accepted", "accepted"]);
  assert.deepEqual((await client.ingestAll("acme", outcomes)).map((r) => r.status), ["duplicate", "duplicate", "duplicate"]);

  const want = ["/mkit", "/std", "/v1a"].flatMap((path) => outcomes.map((o) => `${path} ${o.reservation_id}`)).sort();
  await verified.until((all) => want.every((w) => all.some((e) => `${e.path} ${e.reservation}` === w)), 60_000, `verified webhooks ${want.join(", ")}`);
  assert.ok(verified.all.every((e) => e.namespace === "acme"));

  // Signed by relay for namespace other, posted to acme's receiver: refused.
  await client.ingest("other", { reservation_id: "r-ts-other", repository: "other/x", occurred_unix_ms: Date.now(), expired: {} });
  await refused.until((all) => all.some((e) => e.path === "/mkit" && e.namespace === "other"), 60_000, "the refusal of namespace other's webhook");
  const r = refused.all.find((e) => e.namespace === "other")!;
  assert.equal(r.code, "ErrNamespace");
  assert.ok(!verified.all.some((e) => e.reservation === "r-ts-other"), "namespace other's webhook was taken");
  assert.deepEqual(refused.all.filter((e) => e.namespace !== "other"), [], "only namespace other's webhooks are refused");

  // What relay keeps of it, read with the client.
  await client.healthz();
  await client.readyz();
  assert.ok(parseKeyList(await client.hookKeys()).keys.some((k) => k.keyId === "relay-ts-e2e"));
  const summaries: NamespaceSummary[] = [];
  for await (const page of client.namespacePages({ limit: 1 })) summaries.push(...page.namespaces);
  assert.deepEqual(summaries.map((n) => `${n.namespace} ${n.endpoints}`).sort(), ["acme 3", "other 1"]);

  const ids = outcomes.map((o) => o.reservation_id);
  const listed: OutcomeSummary[] = [];
  for await (const page of client.outcomePages("acme", { limit: 2, since: new Date(Date.now() - 3_600_000) })) listed.push(...page.outcomes);
  assert.deepEqual(listed.map((o) => o.reservation_id), ids, "the outcomes, in acceptance order");
  assert.deepEqual((await client.listOutcomes("acme", { endpoint: "mkit", since: new Date(Date.now() + 3_600_000) })).outcomes, [], "none accepted in an hour");
  const delivered = (o: { endpoints: { endpoint: string; state: string }[] }) =>
    o.endpoints.map((e) => `${e.endpoint} ${e.state}`).join(", ") === "mkit delivered, std delivered, v1a delivered";
  const story = await poll(() => client.getOutcome("acme", ids[0]!), delivered, 60_000, "r-ts-0 delivered on every endpoint");
  assert.equal(story.reservation_id, ids[0]);
  assert.deepEqual(story.outcome, outcomes[0]);
  const outbox = await poll(() => client.getOutbox("acme", "mkit"), (o) => o.backlog.rows === 0, 60_000, "mkit's stream empty");
  assert.equal(outbox.endpoint, "mkit");
  assert.deepEqual(outbox.rows, []);
  assert.equal(outbox.next_cursor, null);

  // Resent on one endpoint: it arrives there once more, at its own place.
  const resent = await client.resendOutcome("acme", "mkit", ids[0]!);
  assert.equal(resent.seq, story.seq);
  await verified.until((all) => all.filter((e) => e.path === "/mkit" && e.reservation === ids[0]).length === 2, 60_000, "r-ts-0 resent to /mkit");

  // Recovered on another: every outcome it delivered is queued again, and
  // arrives there once more.
  await poll(() => client.listOutcomes("acme", { endpoint: "std", state: "delivered" }), (p) => p.outcomes.length === ids.length, 60_000, "std's outcomes delivered");
  const job = await client.recoverEndpoint("acme", "std", new Date(Date.now() - 3_600_000), new Date(Date.now() + 60_000));
  assert.equal(job.endpoint, "std");
  const done = await poll(() => client.getRecovery("acme", "std", job.id), (j) => j.state !== "running", 60_000, "the recovery to end");
  assert.equal(done.state, "done");
  assert.equal(done.queued, ids.length);
  await verified.until((all) => ids.every((id) => all.filter((e) => e.path === "/std" && e.reservation === id).length === 2), 60_000, "the recovered outcomes at /std again");

  // Erased: gone from the history.
  const erased = await client.eraseOutcome("acme", ids[2]!);
  assert.equal(erased.reservation_id, ids[2]);
  const gone = await client.getOutcome("acme", ids[2]!).catch((e) => e);
  assert.ok(gone instanceof RelayProblem && gone.status === 404 && gone.slug === "not-found", String(gone));

  // The other tenant's endpoint, its refused webhook still pending, deleted with force: the namespace is gone.
  const deleted = await client.deleteEndpoint("other", "spy", true);
  assert.equal(deleted.id, "spy");
  const missing = await client.getEndpoint("other", "spy").catch((e) => e);
  assert.ok(missing instanceof RelayProblem && missing.slug === "not-found", String(missing));
  assert.deepEqual((await client.listNamespaces()).namespaces.map((n) => n.namespace), ["acme"]);
});
