// The middleware reads the raw body, verifies it and hands it on.
import assert from "node:assert/strict";
import { createServer, request, type RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { MkitVerifier, parseKeyList, StandardVerifier, EitherVerifier, type HookVerifyError } from "@hookrelay/relay";
import { verifyWebhooks, withVerification } from "@hookrelay/relay/node";
import { vectors } from "./helpers.js";

const mk = vectors.mkitHookV2;
const sw = vectors.standardWebhooks;

async function serve(handler: RequestListener): Promise<{ url: string; close: () => void }> {
  const s = createServer(handler);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, close: () => s.close() };
}

function post(url: string, headers: Record<string, string>, body: string | Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode!, text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const verifier = () =>
  new EitherVerifier({
    mkit: new MkitVerifier({ keys: parseKeyList(JSON.stringify(mk.keyList)), audience: mk.audience, namespaces: ["acme"], now: () => mk.verifyAtMs }),
    standard: new StandardVerifier({ secrets: [sw.secret], now: () => sw.verifyAt * 1000 }),
  });

test("withVerification: verified requests reach the handler with their bytes; others are refused", async () => {
  const got: string[] = [];
  const refusals: string[] = [];
  const srv = await serve(withVerification(verifier(), (req, res) => {
    got.push(req.rawBody.toString());
    res.writeHead(204).end();
  }, { maxBody: 4096, onError: (_, err) => refusals.push((err as HookVerifyError).code ?? err.message) }));
  try {
    assert.equal((await post(srv.url + mk.path + "?attempt=2", mk.headers, mk.body)).status, 204);
    assert.equal((await post(srv.url + "/", sw.headers, sw.body)).status, 204);
    assert.deepEqual(got, [mk.body, sw.body]);
    const replay = await post(srv.url + mk.path, mk.headers, mk.body);
    assert.equal(replay.status, 401);
    assert.match(replay.text, /replayed nonce/);
    assert.equal((await post(srv.url + "/other", sw.headers, sw.body + " ")).status, 401);
    assert.equal((await post(srv.url + "/", {}, "{}")).status, 401);
    assert.equal((await post(srv.url + "/", sw.headers, Buffer.alloc(5000, 32))).status, 413);
    assert.equal(got.length, 2);
    assert.deepEqual(refusals, ["ErrReplay", "ErrBadSignature", "ErrNoScheme", "ErrBodyTooLarge"]);
  } finally {
    srv.close();
  }
});

test("verifyWebhooks: Express-style, a misconfigured verifier answers 500 without details", async () => {
  let nexts = 0;
  const mw = verifyWebhooks(new StandardVerifier({ secrets: ["not-a-secret"] }));
  const srv = await serve((req, res) => mw(req, res, () => {
    nexts++;
    res.end();
  }));
  try {
    const r = await post(srv.url, sw.headers, sw.body);
    assert.equal(r.status, 500);
    assert.equal(r.text.trim(), "hookverify: receiver misconfigured");
    assert.equal(nexts, 0);
  } finally {
    srv.close();
  }
});

test("verifyWebhooks after a body parser refuses rather than hangs", async () => {
  const mw = verifyWebhooks(verifier());
  const srv = await serve((req, res) => {
    req.resume(); // a body parser read the bytes
    req.on("end", () => mw(req, res, () => res.end()));
  });
  try {
    const r = await post(srv.url + mk.path, mk.headers, mk.body);
    assert.equal(r.status, 500);
  } finally {
    srv.close();
  }
});
