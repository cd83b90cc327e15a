// fetchKeyList trusts only what the relay named answers: https or a
// loopback relay, no redirect, a 200 of at most 1 MiB.
import assert from "node:assert/strict";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { checkKeyListURL, fetchKeyList, isHookVerifyError, KeyListRefresher, MkitVerifier, parseKeyList } from "@hookrelay/relay";
import { vectors } from "./helpers.js";

const list = JSON.stringify(vectors.mkitHookV2.keyList);
let answer: (res: ServerResponse) => void = (res) => res.end(list);
let base = "";
const server = createServer((_, res) => answer(res));
before(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/mkit-hook-keys.json`;
});
after(() => server.close());

test("checkKeyListURL: https, or plain http from a loopback relay", () => {
  for (const ok of ["https://relay.example.com/k.json", "http://127.0.0.1:8080/k.json", "http://localhost/k.json", "http://[::1]:80/k.json", "http://127.1.2.3/k.json"]) {
    checkKeyListURL(ok);
  }
  for (const bad of ["http://relay.example.com/k.json", "ftp://127.0.0.1/k.json", "not a url", "http://10.0.0.1/k.json"]) {
    assert.throws(() => checkKeyListURL(bad), (e) => isHookVerifyError(e, "ErrKeyListSource"), bad);
  }
  // The refusal shows no credentials or query, which may carry a token.
  assert.throws(() => checkKeyListURL("http://user:pw-secret@relay.example.com/k.json?token=q-secret"), (e: Error) => !/secret/.test(e.message));
});

test("fetchKeyList: a 200 parses; a redirect, another status or a list too large is refused", async () => {
  answer = (res) => res.writeHead(200, { "Content-Type": "application/json" }).end(list);
  assert.deepEqual(await fetchKeyList(base), parseKeyList(list));
  answer = (res) => res.writeHead(302, { Location: "http://127.0.0.1:9/" }).end();
  await assert.rejects(fetchKeyList(base), /answered 302/);
  answer = (res) => res.writeHead(404).end();
  await assert.rejects(fetchKeyList(base), /answered 404/);
  answer = (res) => res.end(" ".repeat((1 << 20) + 10) + list);
  await assert.rejects(fetchKeyList(base), (e) => isHookVerifyError(e, "ErrKeyList") && /larger than/.test((e as Error).message));
  answer = (res) => res.end('{"version":1,"keys":[]}');
  await assert.rejects(fetchKeyList(base), (e) => isHookVerifyError(e, "ErrKeyList"));
  answer = () => {}; // never answers
  await assert.rejects(fetchKeyList(base, { timeoutMs: 50 }), /TimeoutError/);
});

test("KeyListRefresher: a refresh installs the list; a failed one keeps the keys", async () => {
  const v = new MkitVerifier({ keys: { version: 1, keys: [] }, audience: "https://hooks.example.com", namespaces: ["acme"] });
  const r = new KeyListRefresher(v, base);
  answer = (res) => res.end(list);
  await r.refresh();
  assert.deepEqual(v.keys, parseKeyList(list));
  answer = (res) => res.writeHead(500).end();
  await assert.rejects(r.refresh());
  assert.deepEqual(v.keys, parseKeyList(list));
  assert.throws(() => new KeyListRefresher(v, "http://relay.example.com/k.json"), (e) => isHookVerifyError(e, "ErrKeyListSource"));
});
