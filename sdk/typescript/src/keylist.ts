import { HookVerifyError } from "./errors.js";
import { isLowerHex, validKeyID } from "./util.js";

/**
 * relay's public key list, as served at /.well-known/mkit-hook-keys.json.
 * Fetch it over HTTPS from the relay you trust (fetchKeyList) or parse it
 * with parseKeyList.
 */
export interface KeyList {
  version: 1;
  keys: PublicKey[];
}

/**
 * One Ed25519 key of a KeyList. notBeforeMs and notAfterMs (Unix ms,
 * inclusive) bound both when a request signed with it is accepted (the
 * receiver's clock) and when it may have been signed (its created-at).
 */
export interface PublicKey {
  keyId: string;
  alg: "ed25519";
  /** 64 lowercase hex digits. */
  publicKey: string;
  notBeforeMs?: number;
  notAfterMs?: number;
}

/** The largest key list accepted; real lists hold a few keys. */
export const MAX_KEY_LIST_BYTES = 1 << 20;
/** How long one fetchKeyList may take, connection to last byte, by default. */
export const DEFAULT_FETCH_TIMEOUT_MS = 10_000;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * parseKeyList decodes and checks a key list: version 1, at least one key,
 * each with a valid key id (1–64 of [A-Za-z0-9._-]), alg "ed25519", a
 * publicKey of 64 lowercase hex digits, notBeforeMs ≤ notAfterMs, and no
 * key id twice. Unknown fields are ignored. Errors have code ErrKeyList.
 */
export function parseKeyList(data: string | Uint8Array): KeyList {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  if (bytes.length > MAX_KEY_LIST_BYTES) throw new HookVerifyError("ErrKeyList", `larger than ${MAX_KEY_LIST_BYTES} bytes`);
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw new HookVerifyError("ErrKeyList", "not JSON");
  }
  if (!isObject(raw)) throw new HookVerifyError("ErrKeyList", "not a JSON object");
  if (raw.version !== 1) throw new HookVerifyError("ErrKeyList", "version must be 1");
  if (!Array.isArray(raw.keys) || raw.keys.length === 0) throw new HookVerifyError("ErrKeyList", "no keys");
  const seen = new Set<string>();
  const keys = raw.keys.map((k: unknown, i: number): PublicKey => {
    if (!isObject(k)) throw new HookVerifyError("ErrKeyList", `key ${i + 1}: not a JSON object`);
    if (typeof k.keyId !== "string" || typeof k.alg !== "string" || typeof k.publicKey !== "string") {
      throw new HookVerifyError("ErrKeyList", `key ${i + 1}: keyId, alg and publicKey are required`);
    }
    const pk: PublicKey = { keyId: k.keyId, alg: k.alg as "ed25519", publicKey: k.publicKey };
    for (const f of ["notBeforeMs", "notAfterMs"] as const) {
      const v = k[f];
      if (v === undefined || v === null) continue;
      if (typeof v !== "number" || !Number.isSafeInteger(v)) throw new HookVerifyError("ErrKeyList", `key ${i + 1}: ${f} must be an integer`);
      pk[f] = v;
    }
    const reason = checkPublicKey(pk);
    if (reason) throw new HookVerifyError("ErrKeyList", `key ${i + 1}: ${reason}`);
    if (seen.has(pk.keyId)) throw new HookVerifyError("ErrKeyList", `key id ${pk.keyId} appears twice`);
    seen.add(pk.keyId);
    return pk;
  });
  return { version: 1, keys };
}

/** checkPublicKey applies parseKeyList's rules to one entry: the reason it breaks one, or "". */
export function checkPublicKey(k: PublicKey): string {
  if (!validKeyID(k.keyId)) return "keyId must be 1 to 64 of A-Z a-z 0-9 . _ -";
  if (k.alg !== "ed25519") return 'alg must be "ed25519"';
  if (!isLowerHex(k.publicKey, 64)) return "publicKey must be 64 lowercase hex digits";
  if (k.notBeforeMs !== undefined && k.notAfterMs !== undefined && k.notBeforeMs > k.notAfterMs) return "notBeforeMs is after notAfterMs";
  return "";
}

/**
 * checkKeyListURL applies fetchKeyList's rule for where a key list may come
 * from without fetching it, so a receiver can refuse to start on a bad
 * setting: https, or plain http only from a loopback relay (localhost or a
 * loopback address), where no one sits in between. Errors have code
 * ErrKeyListSource.
 */
export function checkKeyListURL(rawURL: string): URL {
  let u: URL;
  try {
    u = new URL(rawURL);
  } catch {
    throw new HookVerifyError("ErrKeyListSource", "not a URL"); // the URL itself may carry a token
  }
  if (u.host === "") throw new HookVerifyError("ErrKeyListSource", `${shown(u)}: no host`);
  if (u.protocol === "https:") return u;
  if (u.protocol === "http:" && isLoopback(u.hostname)) return u;
  throw new HookVerifyError("ErrKeyListSource", `${shown(u)}: https required (plain http only from a loopback relay)`);
}

function isLoopback(host: string): boolean {
  if (host === "localhost" || host === "[::1]") return true;
  // WHATWG URL parsing has already made any IPv4 spelling dotted-decimal.
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** shown is u for an error message: no credentials, query or fragment, which may carry a token. */
export function shown(u: URL): string {
  return `${u.protocol}//${u.host}${u.pathname}`;
}

export interface FetchKeyListOptions {
  /** Bounds the fetch; DEFAULT_FETCH_TIMEOUT_MS when not set. */
  timeoutMs?: number;
  /** Ends the fetch early. */
  signal?: AbortSignal;
  /** The fetch to use; globalThis.fetch when not set. */
  fetch?: typeof fetch;
}

/**
 * fetchKeyList fetches relay's key list from rawURL and parses it with
 * parseKeyList. The list is the receiver's trust anchor, so the fetch is
 * strict: the URL must pass checkKeyListURL, no redirect is followed (a
 * 3xx is an error), and only a 200 is read, at most MAX_KEY_LIST_BYTES,
 * within the timeout.
 */
export async function fetchKeyList(rawURL: string, opts: FetchKeyListOptions = {}): Promise<KeyList> {
  const u = checkKeyListURL(rawURL);
  const signals = [AbortSignal.timeout(opts.timeoutMs ?? DEFAULT_FETCH_TIMEOUT_MS)];
  if (opts.signal) signals.push(opts.signal);
  const doFetch = opts.fetch ?? globalThis.fetch;
  let resp: Response;
  try {
    resp = await doFetch(u.href, { headers: { Accept: "application/json" }, redirect: "manual", signal: AbortSignal.any(signals) });
  } catch (err) {
    throw new Error(`fetch key list ${shown(u)}: ${(err as Error)?.name ?? "failed"}`);
  }
  if (resp.status !== 200) {
    await resp.body?.cancel();
    throw new Error(`fetch key list: ${shown(u)} answered ${resp.status}`);
  }
  const data = await readLimited(resp, MAX_KEY_LIST_BYTES + 1); // one over, so parseKeyList says "too large"
  try {
    return parseKeyList(data);
  } catch (err) {
    if (err instanceof HookVerifyError) throw new HookVerifyError("ErrKeyList", `${shown(u)}: ${err.message.replace(/^hookverify: invalid key list: /, "")}`);
    throw err;
  }
}

/** readLimited reads at most max bytes of resp's body, cancelling the rest. */
export async function readLimited(resp: Response, max: number): Promise<Uint8Array> {
  if (!resp.body) return new Uint8Array();
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    n += value.length;
    if (n >= max) {
      await reader.cancel();
      break;
    }
  }
  const out = new Uint8Array(Math.min(n, max));
  let off = 0;
  for (const c of chunks) {
    const take = Math.min(c.length, out.length - off);
    out.set(c.subarray(0, take), off);
    off += take;
    if (off === out.length) break;
  }
  return out;
}
