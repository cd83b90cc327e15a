import { ed25519 } from "@noble/curves/ed25519.js";
import { Webhook } from "standardwebhooks";
import { HookVerifyError } from "./errors.js";
import { type Bytes, decodeBase64, equalBytes, type HeaderInput, type ReceivedRequest, type Verifier, parseDecimal, singleHeaders, toBytes } from "./util.js";

/** The Standard Webhooks request headers. */
export const HeaderStandardID = "webhook-id";
export const HeaderStandardTimestamp = "webhook-timestamp";
export const HeaderStandardSignature = "webhook-signature";

/**
 * How far webhook-timestamp may be from the receiver's clock, either way,
 * in ms, as the Standard Webhooks libraries allow.
 */
export const DEFAULT_TOLERANCE_MS = 5 * 60_000;

export interface StandardVerifierOptions {
  /** The endpoint's whsec_ secrets (v1, HMAC-SHA256); any of them verifies, so a rotation can hold the old and the new one. */
  secrets?: readonly string[];
  /**
   * The endpoint's whpk_ public keys (v1a, Ed25519). A verifier with public
   * keys and no secrets refuses v1 signatures: whoever holds a whsec_
   * secret could make those.
   */
  publicKeys?: readonly string[];
  /** Bounds |now - webhook-timestamp|, in ms; DEFAULT_TOLERANCE_MS when not set. */
  toleranceMs?: number;
  /** The clock in Unix ms; Date.now when not set. */
  now?: () => number;
}

/**
 * StandardVerifier checks Standard Webhooks requests, v1 (HMAC) and v1a
 * (Ed25519). The scheme has no nonce: a request replayed within the
 * tolerance verifies again, so receivers deduplicate by webhook-id (stable
 * across relay's retries of one message).
 */
export class StandardVerifier implements Verifier {
  readonly secrets: readonly string[];
  readonly publicKeys: readonly string[];
  readonly toleranceMs: number;
  readonly #now: () => number;

  constructor(opts: StandardVerifierOptions) {
    this.secrets = [...(opts.secrets ?? [])];
    this.publicKeys = [...(opts.publicKeys ?? [])];
    this.toleranceMs = opts.toleranceMs ?? DEFAULT_TOLERANCE_MS;
    this.#now = opts.now ?? Date.now;
  }

  /**
   * check validates the configuration without a request: at least one
   * secret or public key, each secret whsec_ and the base64 of 24 to 64
   * bytes, each public key whpk_ and the base64 of 32 bytes, and a
   * tolerance that is not negative. Errors have code ErrConfig.
   */
  check(): void {
    this.#config();
  }

  #config(): { hmacs: Webhook[]; pubs: Uint8Array[]; tolS: bigint } {
    if (this.secrets.length === 0 && this.publicKeys.length === 0) throw new HookVerifyError("ErrConfig", "no secrets and no public keys");
    const hmacs = this.secrets.map((s, i) => {
      const key = s.startsWith("whsec_") ? decodeBase64(s.slice(6)) : undefined;
      if (!s.startsWith("whsec_")) throw new HookVerifyError("ErrConfig", `secret ${i + 1} does not start with whsec_`);
      if (!key || key.length < 24 || key.length > 64) throw new HookVerifyError("ErrConfig", `secret ${i + 1} is not the base64 of 24 to 64 bytes`);
      return new Webhook(key, { format: "raw" });
    });
    const pubs = this.publicKeys.map((s, i) => {
      if (!s.startsWith("whpk_")) throw new HookVerifyError("ErrConfig", `public key ${i + 1} does not start with whpk_`);
      const key = decodeBase64(s.slice(5), true);
      if (!key || key.length !== 32) throw new HookVerifyError("ErrConfig", `public key ${i + 1} is not the base64 of 32 bytes`);
      return key;
    });
    if (!(this.toleranceMs >= 0)) throw new HookVerifyError("ErrConfig", "negative tolerance");
    return { hmacs, pubs, tolS: BigInt(Math.floor((this.toleranceMs || DEFAULT_TOLERANCE_MS) / 1000)) };
  }

  /** verifyRequest lets StandardVerifier serve the middleware. */
  verifyRequest(r: ReceivedRequest): void {
    this.verify(r.headers, r.body);
  }

  /**
   * verify checks a Standard Webhooks request: headers present, webhook-id
   * printable ASCII without '.', webhook-timestamp a canonical decimal
   * within the tolerance both ways, and an entry of webhook-signature that
   * is either "v1,<base64>", the HMAC-SHA256 of id.timestamp.body under one
   * of the secrets, or "v1a,<base64>", the Ed25519 signature of
   * id.timestamp.body under one of the public keys. Entries of other
   * versions, and of a version the verifier holds no key for, are skipped.
   * Throws a HookVerifyError.
   */
  verify(h: HeaderInput, body: Bytes): void {
    const { hmacs, pubs, tolS } = this.#config();
    const [id, tsS, sigs] = singleHeaders(h, HeaderStandardID, HeaderStandardTimestamp, HeaderStandardSignature) as [string, string, string];
    if (!/^[\x21-\x2d\x2f-\x7e]+$/.test(id)) throw new HookVerifyError("ErrMalformed", `${HeaderStandardID} must be printable ASCII without spaces or '.'`);
    const ts = parseDecimal(tsS);
    if (ts === undefined) throw new HookVerifyError("ErrMalformed", `${HeaderStandardTimestamp} must be a decimal without sign or leading zeros`);
    const now = BigInt(Math.floor(this.#now() / 1000));
    const tol = goDuration(Number(tolS));
    if (now - ts > tolS) throw new HookVerifyError("ErrExpired", `${HeaderStandardTimestamp} is more than ${tol} old`);
    if (ts - now > tolS) throw new HookVerifyError("ErrNotYetValid", `${HeaderStandardTimestamp} is more than ${tol} ahead`);
    const bytes = toBytes(body);
    // standardwebhooks signs id.timestamp.body with the HMAC; its own verify
    // reads the wall clock, so the comparison is made here.
    const expected = hmacs.map((wh) => decodeBase64(wh.sign(id, new Date(Number(ts) * 1000), bytes).slice(3))!);
    let signed: Uint8Array | undefined;
    if (pubs.length > 0) {
      const prefix = new TextEncoder().encode(`${id}.${tsS}.`);
      signed = new Uint8Array(prefix.length + bytes.length);
      signed.set(prefix);
      signed.set(bytes, prefix.length);
    }
    for (const entry of sigs.split(" ")) {
      if (entry.startsWith("v1a,")) {
        const got = decodeBase64(entry.slice(4));
        if (!got || got.length !== 64 || !signed) continue;
        for (const pub of pubs) {
          try {
            if (ed25519.verify(got, signed, pub, { zip215: false })) return;
          } catch {
            // a key that is not a curve point verifies nothing
          }
        }
        continue;
      }
      if (!entry.startsWith("v1,")) continue;
      const got = decodeBase64(entry.slice(3));
      if (!got || got.length !== 32) continue;
      for (const want of expected) if (equalBytes(got, want)) return;
    }
    throw new HookVerifyError("ErrBadSignature", `no ${this.#versions()} signature of ${HeaderStandardSignature} matches`);
  }

  #versions(): string {
    if (this.secrets.length > 0 && this.publicKeys.length > 0) return "v1 or v1a";
    return this.publicKeys.length > 0 ? "v1a" : "v1";
  }
}

/** goDuration spells whole seconds as Go's time.Duration does ("5m0s"), so messages match hookverify's. */
function goDuration(s: number): string {
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h > 0) return `${h}h${m}m${sec}s`;
  if (m > 0) return `${m}m${sec}s`;
  return `${sec}s`;
}
