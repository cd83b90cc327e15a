// Every vector of api/testdata/webhook-signatures.json verifies, and any
// single change to its headers, path, body or time is refused.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ed25519 } from "@noble/curves/ed25519.js";
import { blake3 } from "@noble/hashes/blake3.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import { Webhook } from "standardwebhooks";
import {
  canonical, HookVerifyError, MkitVerifier, origin, parseKeyList, StandardVerifier, EitherVerifier, requestScheme,
  type HookVerifyErrorCode, type KeyList,
} from "@hookrelay/relay";
import { mutate, signMkit, vectors } from "./helpers.js";

const mk = vectors.mkitHookV2;
const sw = vectors.standardWebhooks;
const v1a = vectors.standardWebhooksV1a;

function mkitVerifier(over: Partial<ConstructorParameters<typeof MkitVerifier>[0]> = {}): MkitVerifier {
  const v = new MkitVerifier({ keys: parseKeyList(JSON.stringify(mk.keyList)), audience: mk.audience, namespaces: [mk.namespace], now: () => mk.verifyAtMs, ...over });
  v.check();
  return v;
}

function refused(f: () => void, code?: HookVerifyErrorCode, what = ""): HookVerifyError {
  try {
    f();
  } catch (err) {
    assert.ok(err instanceof HookVerifyError, `${what}: ${err}`);
    if (code) assert.equal(err.code, code, `${what}: ${err.message}`);
    return err;
  }
  assert.fail(`${what}: accepted`);
}

test("mkit-hook v2: the vector's canonical string, digest and signature", () => {
  const digest = "body:" + bytesToHex(blake3(new TextEncoder().encode(mk.body)));
  assert.equal(mk.headers["X-Mkit-Hook-Digest"], digest);
  const c = canonical(mk.keyId, mk.namespace, mk.audience, mk.path, digest, String(mk.createdMs), String(mk.createdMs + mk.validityMs), mk.nonceHex);
  assert.equal(c, mk.canonical);
  assert.equal(bytesToHex(blake3(new TextEncoder().encode(c))), mk.canonicalBlake3Hex);
  assert.equal(origin(mk.endpoint), mk.audience);
  assert.equal(bytesToHex(ed25519.getPublicKey(Buffer.from(mk.seedHex, "hex"))), mk.publicKeyHex);
  assert.deepEqual(signMkit({ ...mk, expiresMs: mk.createdMs + mk.validityMs }), mk.headers);
});

test("mkit-hook v2: the vector verifies once; again is a replay", () => {
  const v = mkitVerifier();
  v.verify(mk.headers, mk.path, mk.body);
  refused(() => v.verify(mk.headers, mk.path, mk.body), "ErrReplay");
  // Headers as a Fetch API Headers and as Node's lowercase names verify too.
  mkitVerifier().verify(new Headers(mk.headers), mk.path, mk.body);
  mkitVerifier().verify(Object.fromEntries(Object.entries(mk.headers).map(([k, v]) => [k.toLowerCase(), [v]])), mk.path, mk.body);
});

test("mkit-hook v2: any single change is refused", () => {
  const want: Record<string, HookVerifyErrorCode> = {
    "X-Mkit-Hook-Version": "ErrVersion",
    "X-Mkit-Hook-Key-Id": "ErrUnknownKey",
    "X-Mkit-Hook-Namespace": "ErrNamespace",
    "X-Mkit-Hook-Audience": "ErrAudience",
    "X-Mkit-Hook-Created-At": "ErrBadSignature",
    "X-Mkit-Hook-Expires-At": "ErrWindow",
    "X-Mkit-Hook-Nonce": "ErrBadSignature",
    "X-Mkit-Hook-Digest": "ErrDigest",
    "X-Mkit-Hook-Signature": "ErrBadSignature",
  };
  for (const [name, value] of Object.entries(mk.headers)) {
    refused(() => mkitVerifier().verify({ ...mk.headers, [name]: mutate(value) }, mk.path, mk.body), want[name], `${name} changed`);
    const without = { ...mk.headers } as Record<string, string>;
    delete without[name];
    refused(() => mkitVerifier().verify(without, mk.path, mk.body), "ErrMissingHeader", `${name} missing`);
    refused(() => mkitVerifier().verify({ ...mk.headers, [name]: "" }, mk.path, mk.body), "ErrMissingHeader", `${name} empty`);
    refused(() => mkitVerifier().verify({ ...mk.headers, [name]: [value, value] }, mk.path, mk.body), "ErrMalformed", `${name} repeated`);
    refused(() => mkitVerifier().verify({ ...mk.headers, [name.toLowerCase()]: value }, mk.path, mk.body), "ErrMalformed", `${name} in another spelling`);
  }
  refused(() => mkitVerifier().verify(mk.headers, mk.path + "x", mk.body), "ErrBadSignature", "path");
  refused(() => mkitVerifier().verify(mk.headers, "/", mk.body), "ErrBadSignature", "root path");
  refused(() => mkitVerifier().verify(mk.headers, mk.path, mk.body.replace("r-7f3a", "r-7f3b")), "ErrDigest", "body");
  refused(() => mkitVerifier().verify(mk.headers, mk.path, mk.body + " "), "ErrDigest", "body with a space");
  refused(() => mkitVerifier().verify({ ...mk.headers, "X-Mkit-Hook-Version": "1" }, mk.path, mk.body), "ErrVersion", "v1");
  refused(() => mkitVerifier().verify({ ...mk.headers, "X-Mkit-Hook-Created-At": "01764460800000" }, mk.path, mk.body), "ErrMalformed", "leading zero");
  refused(() => mkitVerifier().verify({ ...mk.headers, "X-Mkit-Hook-Nonce": mk.nonceHex.toUpperCase() }, mk.path, mk.body), "ErrMalformed", "upper-case nonce");
});

test("mkit-hook v2: the receiver's clock, the audience and the namespaces", () => {
  const expires = mk.createdMs + mk.validityMs;
  refused(() => mkitVerifier({ now: () => expires }).verify(mk.headers, mk.path, mk.body), "ErrExpired", "at expiry");
  mkitVerifier({ now: () => expires - 1 }).verify(mk.headers, mk.path, mk.body);
  mkitVerifier({ now: () => mk.createdMs - 30_000 }).verify(mk.headers, mk.path, mk.body);
  refused(() => mkitVerifier({ now: () => mk.createdMs - 30_001 }).verify(mk.headers, mk.path, mk.body), "ErrNotYetValid", "clock lead");
  refused(() => mkitVerifier({ audience: "https://hooks.example.com:8443" }).verify(mk.headers, mk.path, mk.body), "ErrAudience", "other audience");
  mkitVerifier({ audience: "HTTPS://Hooks.Example.com:443/any/path" }).verify(mk.headers, mk.path, mk.body);
  refused(() => mkitVerifier({ namespaces: ["other"] }).verify(mk.headers, mk.path, mk.body), "ErrNamespace", "not taken");
  mkitVerifier({ namespaces: undefined, acceptAnyNamespace: true }).verify(mk.headers, mk.path, mk.body);
  refused(() => new MkitVerifier({ keys: parseKeyList(JSON.stringify(mk.keyList)), audience: mk.audience, now: () => mk.verifyAtMs }).verify(mk.headers, mk.path, mk.body), "ErrConfig", "no namespace");
  refused(() => mkitVerifier({ audience: "https://hooks.example.com." }), "ErrConfig", "trailing dot");
  refused(() => mkitVerifier({ audience: "https://hooks.example.com:0443" }), "ErrConfig", "port 0443");
  refused(() => mkitVerifier({ audience: "http://[2001:db8:0::1]" }), "ErrConfig", "long IPv6");
  assert.equal(origin("http://[2001:DB8::1]:80/x"), "http://[2001:db8::1]");
  refused(() => mkitVerifier({ namespaces: ["Acme"] }), "ErrConfig", "bad namespace");
  refused(() => mkitVerifier({ acceptAnyNamespace: true }), "ErrConfig", "both");
});

test("mkit-hook v2: key rotation, key validity and the key list's rules", () => {
  const seed2 = "2122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40";
  const pub2 = bytesToHex(ed25519.getPublicKey(Buffer.from(seed2, "hex")));
  const list: KeyList = parseKeyList(JSON.stringify({ version: 1, keys: [...(mk.keyList as KeyList).keys, { keyId: "relay-2026-01", alg: "ed25519", publicKey: pub2, notBeforeMs: mk.createdMs, extra: true }] }));
  const expiresMs = mk.createdMs + mk.validityMs;
  const next = signMkit({ ...mk, seedHex: seed2, keyId: "relay-2026-01", expiresMs, nonceHex: "b".repeat(64) });
  const v = mkitVerifier({ keys: list });
  v.verify(mk.headers, mk.path, mk.body); // the old key still verifies
  v.verify(next, mk.path, mk.body);
  // A verifier that has not fetched the new list yet does not know its key; setKeys brings it.
  const old = mkitVerifier();
  refused(() => old.verify(next, mk.path, mk.body), "ErrUnknownKey", "before setKeys");
  old.setKeys(list);
  old.verify(next, mk.path, mk.body);
  // A key outside its bounds: now, or the request's created-at.
  const bounded = (b: { notBeforeMs?: number; notAfterMs?: number }, now = mk.verifyAtMs) =>
    mkitVerifier({ now: () => now, keys: { version: 1, keys: [{ keyId: mk.keyId, alg: "ed25519", publicKey: mk.publicKeyHex, ...b }] } });
  refused(() => bounded({ notBeforeMs: mk.verifyAtMs + 1 }).verify(mk.headers, mk.path, mk.body), "ErrKeyInactive", "not yet");
  refused(() => bounded({ notAfterMs: mk.verifyAtMs - 1 }).verify(mk.headers, mk.path, mk.body), "ErrKeyInactive", "retired");
  refused(() => bounded({ notAfterMs: mk.createdMs - 1 }, mk.createdMs - 2).verify(mk.headers, mk.path, mk.body), "ErrKeyInactive", "created after retirement");
  refused(() => bounded({ notBeforeMs: mk.createdMs + 1 }).verify(mk.headers, mk.path, mk.body), "ErrKeyInactive", "created before validity");
  bounded({ notBeforeMs: mk.createdMs, notAfterMs: mk.verifyAtMs }).verify(mk.headers, mk.path, mk.body);
  for (const bad of [
    "", "[]", "{}", '{"version":2,"keys":[]}', '{"version":1,"keys":[]}',
    `{"version":1,"keys":[{"keyId":"a b","alg":"ed25519","publicKey":"${mk.publicKeyHex}"}]}`,
    `{"version":1,"keys":[{"keyId":"a","alg":"rsa","publicKey":"${mk.publicKeyHex}"}]}`,
    `{"version":1,"keys":[{"keyId":"a","alg":"ed25519","publicKey":"${mk.publicKeyHex.toUpperCase()}"}]}`,
    `{"version":1,"keys":[{"keyId":"a","alg":"ed25519","publicKey":"${mk.publicKeyHex}","notBeforeMs":2,"notAfterMs":1}]}`,
    `{"version":1,"keys":[{"keyId":"a","alg":"ed25519","publicKey":"${mk.publicKeyHex}"},{"keyId":"a","alg":"ed25519","publicKey":"${pub2}"}]}`,
  ]) {
    refused(() => parseKeyList(bad), "ErrKeyList", bad);
  }
});

test("mkit-hook v2: the body's data.namespace is the signed one, spelled once", () => {
  const expiresMs = mk.createdMs + mk.validityMs;
  const signed = (body: string) => [signMkit({ ...mk, body, expiresMs }), body] as const;
  for (const body of [
    mk.body.replace('"namespace":"acme"', '"namespace":"other"'),
    mk.body.replace('"namespace":"acme"', '"namespace":"acme","namespace":"acme"'),
    mk.body.replace('"namespace":"acme"', '"Namespace":"acme"'),
    mk.body.replace('"namespace":"acme"', '"namespace":"acme","nameſpace":"other"'),
    mk.body.replace('"data":{', '"Data":{"namespace":"acme"},"data":{'),
    mk.body.replace('"namespace":"acme",', ""),
    '{"data":{"namespace":7}}',
    '["acme"]',
    "not json",
  ]) {
    const [h, b] = signed(body);
    refused(() => mkitVerifier().verify(h, mk.path, b), "ErrNamespace", body.slice(0, 60));
  }
  const [h, b] = signed('{"x":[{"namespace":"other"}],"data":{"n":{"namespace":"other"},"namespace":"acme"}}');
  mkitVerifier().verify(h, mk.path, b);
});

test("Standard Webhooks v1: the vector verifies, with rotation; any single change is refused", () => {
  const at = () => sw.verifyAt * 1000;
  const sv = (secrets: string[], now = at) => {
    const v = new StandardVerifier({ secrets, now });
    v.check();
    return v;
  };
  sv([sw.secret]).verify(sw.headers, sw.body);
  sv(["whsec_" + Buffer.alloc(32, 7).toString("base64"), sw.secret]).verify(sw.headers, sw.body);
  // The Standard Webhooks library agrees on the signature.
  assert.equal(new Webhook(sw.secret).sign(sw.msgId, new Date(sw.timestamp * 1000), sw.body), sw.headers["webhook-signature"]);
  const other = new Webhook(Buffer.alloc(32, 7).toString("base64")).sign(sw.msgId, new Date(sw.timestamp * 1000), sw.body);
  sv([sw.secret]).verify({ ...sw.headers, "webhook-signature": `${other} v2,abc ${sw.headers["webhook-signature"]}` }, sw.body);
  refused(() => sv([sw.secret]).verify({ ...sw.headers, "webhook-signature": other }, sw.body), "ErrBadSignature", "other secret");
  for (const [name, value] of Object.entries(sw.headers)) {
    refused(() => sv([sw.secret]).verify({ ...sw.headers, [name]: mutate(value) }, sw.body), undefined, `${name} changed`);
    const without = { ...sw.headers } as Record<string, string>;
    delete without[name];
    refused(() => sv([sw.secret]).verify(without, sw.body), "ErrMissingHeader", `${name} missing`);
    refused(() => sv([sw.secret]).verify({ ...sw.headers, [name]: [value, value] }, sw.body), "ErrMalformed", `${name} repeated`);
  }
  refused(() => sv([sw.secret]).verify(sw.headers, sw.body + " "), "ErrBadSignature", "body");
  refused(() => sv([sw.secret], () => (sw.timestamp + 301) * 1000).verify(sw.headers, sw.body), "ErrExpired", "late");
  sv([sw.secret], () => (sw.timestamp + 300) * 1000).verify(sw.headers, sw.body);
  refused(() => sv([sw.secret], () => (sw.timestamp - 301) * 1000).verify(sw.headers, sw.body), "ErrNotYetValid", "early");
  refused(() => sv([sw.secret]).verify({ ...sw.headers, "webhook-id": "a.b" }, sw.body), "ErrMalformed", "id with a dot");
  refused(() => sv([sw.secret]).verify({ ...sw.headers, "webhook-timestamp": "+1764460800" }, sw.body), "ErrMalformed", "signed timestamp");
  // A secret whose signature is cut short (no padding) is not the signature.
  refused(() => sv([sw.secret]).verify({ ...sw.headers, "webhook-signature": sw.headers["webhook-signature"]!.replace(/=$/, "") }, sw.body), "ErrBadSignature", "no padding");
  for (const bad of [[], ["whsec_"], ["QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8="], ["whsec_" + Buffer.alloc(23).toString("base64")], ["whsec_" + Buffer.alloc(65).toString("base64")], ["whsec_!!!!"]]) {
    refused(() => new StandardVerifier({ secrets: bad }).check(), "ErrConfig", JSON.stringify(bad));
  }
});

test("Standard Webhooks v1a: the vector verifies, with rotation; any single change is refused", () => {
  const at = () => v1a.verifyAt * 1000;
  const sv = (publicKeys: string[], secrets: string[] = []) => {
    const v = new StandardVerifier({ publicKeys, secrets, now: at });
    v.check();
    return v;
  };
  sv([v1a.publicKey]).verify(v1a.headers, v1a.body);
  const priv = Buffer.from(v1a.privateKey.slice(5), "base64");
  assert.equal("whpk_" + Buffer.from(ed25519.getPublicKey(priv.subarray(0, 32))).toString("base64"), v1a.publicKey);
  assert.equal("v1a," + Buffer.from(ed25519.sign(Buffer.from(v1a.signedContent), priv.subarray(0, 32))).toString("base64"), v1a.headers["webhook-signature"]);
  // Rotation: the new key signs first, the old one beside it.
  const seed2 = Buffer.alloc(32, 9);
  const pub2 = "whpk_" + Buffer.from(ed25519.getPublicKey(seed2)).toString("base64");
  const sig2 = "v1a," + Buffer.from(ed25519.sign(Buffer.from(v1a.signedContent), seed2)).toString("base64");
  const both = { ...v1a.headers, "webhook-signature": `${sig2} ${v1a.headers["webhook-signature"]}` };
  sv([v1a.publicKey]).verify(both, v1a.body);
  sv([pub2]).verify(both, v1a.body);
  refused(() => sv([pub2]).verify(v1a.headers, v1a.body), "ErrBadSignature", "another key");
  assert.equal(requestScheme(v1a.headers), "standard-webhooks-v1a");
  for (const [name, value] of Object.entries(v1a.headers)) {
    refused(() => sv([v1a.publicKey]).verify({ ...v1a.headers, [name]: mutate(value) }, v1a.body), undefined, `${name} changed`);
  }
  refused(() => sv([v1a.publicKey]).verify(v1a.headers, v1a.body.replace("acme", "acmf")), "ErrBadSignature", "body");
  // Public keys only: a v1 signature, which a holder of a secret could make, is refused.
  refused(() => sv([v1a.publicKey]).verify(sw.headers, sw.body), "ErrBadSignature", "v1 with public keys only");
  sv([v1a.publicKey], [sw.secret]).verify(sw.headers, sw.body);
  for (const bad of [["whpk_"], [v1a.publicKey.slice(5)], ["whpk_" + Buffer.alloc(31).toString("base64")], [v1a.publicKey.replace(/U=$/, "V=")]]) {
    refused(() => new StandardVerifier({ publicKeys: bad }).check(), "ErrConfig", JSON.stringify(bad));
  }
});

test("EitherVerifier routes by the scheme the headers claim", () => {
  const either = new EitherVerifier({ mkit: mkitVerifier(), standard: new StandardVerifier({ secrets: [sw.secret], publicKeys: [v1a.publicKey], now: () => sw.verifyAt * 1000 }) });
  either.check();
  either.verifyRequest({ headers: mk.headers, path: mk.path, body: mk.body });
  either.verifyRequest({ headers: sw.headers, path: "/", body: sw.body });
  either.verifyRequest({ headers: v1a.headers, path: "/", body: v1a.body });
  // An mkit-hook version wins over a webhook-signature.
  refused(() => either.verifyRequest({ headers: { ...sw.headers, "X-Mkit-Hook-Version": "2" }, path: "/", body: sw.body }), "ErrMissingHeader");
  refused(() => either.verifyRequest({ headers: {}, path: "/", body: "" }), "ErrNoScheme");
  refused(() => new EitherVerifier({ standard: new StandardVerifier({ secrets: [sw.secret] }) }).verifyRequest({ headers: mk.headers, path: mk.path, body: mk.body }), "ErrNoScheme");
  refused(() => new EitherVerifier({}).check(), "ErrConfig");
});
