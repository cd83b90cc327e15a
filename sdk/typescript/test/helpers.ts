import { ed25519 } from "@noble/curves/ed25519.js";
import { blake3 } from "@noble/hashes/blake3.js";
import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { canonical } from "@hookrelay/relay";

/** The package's directory and the repository's root. */
export const pkgDir = join(dirname(fileURLToPath(import.meta.url)), "..");
export const repoRoot = join(pkgDir, "..", "..");

export interface Vectors {
  mkitHookV2: {
    seedHex: string; publicKeyHex: string; keyId: string; namespace: string; endpoint: string; body: string;
    createdMs: number; validityMs: number; nonceHex: string; verifyAtMs: number; audience: string; path: string;
    canonical: string; canonicalBlake3Hex: string; keyList: unknown; headers: Record<string, string>;
  };
  standardWebhooks: { secret: string; msgId: string; timestamp: number; body: string; verifyAt: number; signedContent: string; headers: Record<string, string> };
  standardWebhooksV1a: { privateKey: string; publicKey: string; msgId: string; timestamp: number; body: string; verifyAt: number; signedContent: string; headers: Record<string, string> };
}

export const vectors: Vectors = JSON.parse(readFileSync(join(repoRoot, "api/testdata/webhook-signatures.json"), "utf8"));

/** signMkit signs as relay does, for requests the vectors do not hold. */
export function signMkit(o: { seedHex: string; keyId: string; namespace: string; audience: string; path: string; body: string; createdMs: number; expiresMs: number; nonceHex: string }): Record<string, string> {
  const digest = "body:" + bytesToHex(blake3(new TextEncoder().encode(o.body)));
  const msg = blake3(new TextEncoder().encode(canonical(o.keyId, o.namespace, o.audience, o.path, digest, String(o.createdMs), String(o.expiresMs), o.nonceHex)));
  return {
    "X-Mkit-Hook-Version": "2",
    "X-Mkit-Hook-Key-Id": o.keyId,
    "X-Mkit-Hook-Namespace": o.namespace,
    "X-Mkit-Hook-Audience": o.audience,
    "X-Mkit-Hook-Created-At": String(o.createdMs),
    "X-Mkit-Hook-Expires-At": String(o.expiresMs),
    "X-Mkit-Hook-Nonce": o.nonceHex,
    "X-Mkit-Hook-Digest": digest,
    "X-Mkit-Hook-Signature": bytesToHex(ed25519.sign(msg, hexToBytes(o.seedHex))),
  };
}

/** mutate changes one character of s, keeping its character class where it can. */
export function mutate(s: string): string {
  const i = s.length - 1;
  const c = s[i]!;
  let r: string;
  if (/[0-8]/.test(c)) r = String(Number(c) + 1);
  else if (c === "9") r = "8";
  else if (/[a-e]/.test(c)) r = String.fromCharCode(c.charCodeAt(0) + 1);
  else if (c === "f") r = "e";
  else if (c === "=") return s.slice(0, i - 1) + (s[i - 1] === "A" ? "B" : "A") + c;
  else r = c === "x" ? "y" : "x";
  return s.slice(0, i) + r;
}

/** until resolves with p's value, or rejects after ms naming what was awaited. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: ReturnType<typeof setTimeout>;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]);
}
