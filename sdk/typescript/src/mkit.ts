import { ed25519 } from "@noble/curves/ed25519.js";
import { blake3 } from "@noble/hashes/blake3.js";
import { hexToBytes } from "@noble/hashes/utils.js";
import { HookVerifyError } from "./errors.js";
import { checkPublicKey, type KeyList, type PublicKey } from "./keylist.js";
import { checkBodyNamespace } from "./namespace.js";
import { NonceCache } from "./nonce.js";
import { type Bytes, equalBytes, type HeaderInput, type ReceivedRequest, type Verifier, isLowerHex, parseDecimal, singleHeaders, toBytes, validKeyID, validNamespace } from "./util.js";

/** The mkit-hook v2 request headers. */
export const HeaderMkitVersion = "X-Mkit-Hook-Version";
export const HeaderMkitKeyID = "X-Mkit-Hook-Key-Id";
export const HeaderMkitNamespace = "X-Mkit-Hook-Namespace";
export const HeaderMkitAudience = "X-Mkit-Hook-Audience";
export const HeaderMkitCreatedAt = "X-Mkit-Hook-Created-At";
export const HeaderMkitExpiresAt = "X-Mkit-Hook-Expires-At";
export const HeaderMkitNonce = "X-Mkit-Hook-Nonce";
export const HeaderMkitDigest = "X-Mkit-Hook-Digest";
export const HeaderMkitSignature = "X-Mkit-Hook-Signature";

/**
 * The one X-Mkit-Hook-Version accepted. Version 1 signed no namespace, so a
 * receiver could not tell one tenant's webhooks from another's; it is
 * refused.
 */
export const MkitVersion = "2";
/** The longest validity window (expires-at minus created-at) accepted, in ms. */
export const MAX_WINDOW_MS = 300_000;
/** How far the sender's clock may run ahead of the receiver's, in ms. */
export const MAX_CLOCK_LEAD_MS = 30_000;

export interface MkitVerifierOptions {
  /** relay's public key list (parseKeyList, fetchKeyList); setKeys replaces it later. */
  keys: KeyList;
  /**
   * This receiver's own origin, e.g. "https://hooks.example.com" (scheme,
   * host and a non-default port; any path is ignored). Requests signed for
   * another origin are refused.
   */
  audience: string;
  /**
   * The relay namespaces whose webhooks this receiver takes; a request
   * signed for any other is refused with ErrNamespace before its nonce is
   * recorded. A verifier that names none (and does not set
   * acceptAnyNamespace) refuses every request.
   */
  namespaces?: readonly string[];
  /**
   * Take every namespace instead, for a receiver shared by tenants on
   * purpose; it then looks at the namespace and deduplicates by namespace
   * and reservation id.
   */
  acceptAnyNamespace?: boolean;
  /** The clock in Unix ms; Date.now when not set. */
  now?: () => number;
  /** Accepted nonces; a cache of DEFAULT_NONCE_CACHE_SIZE on this clock when not set. Share one to keep nonces across verifiers. */
  nonces?: NonceCache;
}

/**
 * MkitVerifier checks mkit-hook v2 requests.
 *
 * One relay key signs the webhooks of every namespace (tenant) of a relay,
 * and any tenant may register any URL, so a valid signature alone does not
 * say the webhook is meant for this receiver: name the namespaces it takes.
 */
export class MkitVerifier implements Verifier {
  #keys: KeyList;
  readonly audience: string;
  readonly namespaces: readonly string[];
  readonly acceptAnyNamespace: boolean;
  readonly #now: () => number;
  readonly nonces: NonceCache;

  constructor(opts: MkitVerifierOptions) {
    this.#keys = cloneKeys(opts.keys);
    this.audience = opts.audience;
    this.namespaces = [...(opts.namespaces ?? [])];
    this.acceptAnyNamespace = opts.acceptAnyNamespace ?? false;
    this.#now = opts.now ?? Date.now;
    this.nonces = opts.nonces ?? new NonceCache(0, this.#now);
  }

  /** setKeys replaces the key list, as a KeyListRefresher does; nonces are kept. */
  setKeys(list: KeyList): void {
    this.#keys = cloneKeys(list);
  }

  /** The key list in effect. */
  get keys(): KeyList {
    return cloneKeys(this.#keys);
  }

  /**
   * check validates the configuration without a request: the audience is an
   * origin, the namespaces are named (well-formed) or any is accepted
   * explicitly, and the key list holds at least one well-formed key, no key
   * id twice. Call it at start so that a misconfigured receiver refuses to
   * start. Errors have code ErrConfig.
   */
  check(): void {
    configOrigin(this.audience);
    this.#checkNamespaces();
    if (this.#keys.keys.length === 0) throw new HookVerifyError("ErrConfig", "key list has no keys");
    const seen = new Set<string>();
    this.#keys.keys.forEach((k, i) => {
      const reason = checkPublicKey(k);
      if (reason) throw new HookVerifyError("ErrConfig", `key list entry ${i + 1}: ${reason}`);
      if (seen.has(k.keyId)) throw new HookVerifyError("ErrConfig", `key id ${k.keyId} appears twice in the key list`);
      seen.add(k.keyId);
    });
  }

  #checkNamespaces(): void {
    if (this.acceptAnyNamespace && this.namespaces.length > 0) throw new HookVerifyError("ErrConfig", "set namespaces or acceptAnyNamespace, not both");
    if (this.acceptAnyNamespace) return;
    if (this.namespaces.length === 0) {
      throw new HookVerifyError("ErrConfig", "no namespace accepted: name the namespaces this receiver takes in namespaces (or set acceptAnyNamespace)");
    }
    for (const ns of this.namespaces) {
      if (!validNamespace(ns)) throw new HookVerifyError("ErrConfig", `namespace ${JSON.stringify(ns)} must be 1 to 63 of a-z 0-9 _ -, starting with a letter or digit`);
    }
  }

  /** verifyRequest verifies r with the path it was received on; it lets MkitVerifier serve the middleware. */
  verifyRequest(r: ReceivedRequest): void {
    this.verify(r.headers, r.path, r.body);
  }

  /**
   * verify checks an mkit-hook v2 request: h its headers, path the escaped
   * request path (without the query, which is not signed; behind a proxy
   * that rewrites paths, pass the path the sender used), body the exact
   * bytes received. Cheap checks come first, the signature after them, then
   * that the body's data.namespace is the signed namespace; the nonce is
   * recorded only once everything else passed, so neither a forged request
   * nor another namespace's can burn a nonce. Throws a HookVerifyError.
   */
  verify(h: HeaderInput, path: string, body: Bytes): void {
    const [version] = singleHeaders(h, HeaderMkitVersion);
    if (version === "1") throw new HookVerifyError("ErrVersion", "mkit-hook v1 is not accepted: it does not sign the namespace (relay signs v2)");
    if (version !== MkitVersion) throw new HookVerifyError("ErrVersion", `${HeaderMkitVersion} must be ${MkitVersion}`);
    const [keyID, namespace, audience, createdS, expiresS, nonce, digest, signature] = singleHeaders(
      h, HeaderMkitKeyID, HeaderMkitNamespace, HeaderMkitAudience, HeaderMkitCreatedAt, HeaderMkitExpiresAt, HeaderMkitNonce, HeaderMkitDigest, HeaderMkitSignature,
    ) as [string, string, string, string, string, string, string, string];
    if (!validKeyID(keyID)) throw new HookVerifyError("ErrMalformed", `${HeaderMkitKeyID} must be 1 to 64 of A-Z a-z 0-9 . _ -`);
    const [key, pub] = find(this.#keys, keyID);
    const now = BigInt(Math.floor(this.#now()));
    const notBefore = key.notBeforeMs === undefined ? undefined : BigInt(key.notBeforeMs);
    const notAfter = key.notAfterMs === undefined ? undefined : BigInt(key.notAfterMs);
    if (notBefore !== undefined && now < notBefore) throw new HookVerifyError("ErrKeyInactive", `key ${keyID} is not valid before ${notBefore}`);
    if (notAfter !== undefined && now > notAfter) throw new HookVerifyError("ErrKeyInactive", `key ${keyID} is not valid after ${notAfter}`);
    if (audience !== configOrigin(this.audience)) throw new HookVerifyError("ErrAudience", "request was signed for another origin");
    if (!validNamespace(namespace)) throw new HookVerifyError("ErrMalformed", `${HeaderMkitNamespace} must be 1 to 63 of a-z 0-9 _ -, starting with a letter or digit`);
    this.#checkNamespaces();
    if (!this.acceptAnyNamespace && !this.namespaces.includes(namespace)) {
      // Well-formed, so safe to name: the receiver's log says whose it was.
      throw new HookVerifyError("ErrNamespace", `${namespace} is not a namespace this receiver takes`);
    }
    const created = parseDecimal(createdS);
    if (created === undefined) throw new HookVerifyError("ErrMalformed", `${HeaderMkitCreatedAt} must be a decimal without sign or leading zeros`);
    const expires = parseDecimal(expiresS);
    if (expires === undefined) throw new HookVerifyError("ErrMalformed", `${HeaderMkitExpiresAt} must be a decimal without sign or leading zeros`);
    const window = expires - created;
    if (window <= 0n || window > BigInt(MAX_WINDOW_MS)) throw new HookVerifyError("ErrWindow", `expires-at minus created-at must be 1 to ${MAX_WINDOW_MS} ms`);
    // The key's bounds hold for the signing time too: a key retired at T
    // signs nothing after T, even for a receiver whose clock is behind.
    if (notBefore !== undefined && created < notBefore) throw new HookVerifyError("ErrKeyInactive", `request created before key ${keyID} became valid at ${notBefore}`);
    if (notAfter !== undefined && created > notAfter) throw new HookVerifyError("ErrKeyInactive", `request created after key ${keyID} was retired at ${notAfter}`);
    if (created > now + BigInt(MAX_CLOCK_LEAD_MS)) throw new HookVerifyError("ErrNotYetValid", `created-at is more than ${MAX_CLOCK_LEAD_MS} ms ahead of this receiver's clock`);
    if (now >= expires) throw new HookVerifyError("ErrExpired", `expired ${now - expires} ms ago`);
    if (!isLowerHex(nonce, 64)) throw new HookVerifyError("ErrMalformed", `${HeaderMkitNonce} must be 64 lowercase hex digits`);
    const digestHex = digest.startsWith("body:") ? digest.slice(5) : "";
    if (!isLowerHex(digestHex, 64)) throw new HookVerifyError("ErrMalformed", `${HeaderMkitDigest} must be body: and 64 lowercase hex digits`);
    const bytes = toBytes(body);
    if (!equalBytes(blake3(bytes), hexToBytes(digestHex))) throw new HookVerifyError("ErrDigest", `body does not match ${HeaderMkitDigest}`);
    if (!isLowerHex(signature, 128)) throw new HookVerifyError("ErrMalformed", `${HeaderMkitSignature} must be 128 lowercase hex digits`);
    const msg = blake3(new TextEncoder().encode(canonical(keyID, namespace, audience, path || "/", digest, createdS, expiresS, nonce)));
    let ok = false;
    try {
      // zip215: false is RFC 8032's strict rule, as Go's crypto/ed25519 verifies.
      ok = ed25519.verify(hexToBytes(signature), msg, pub, { zip215: false });
    } catch {
      ok = false;
    }
    if (!ok) throw new HookVerifyError("ErrBadSignature", `signature does not verify with key ${keyID}`);
    // Signed, so relay wrote both; a handler reading data.namespace must
    // still read what was checked.
    checkBodyNamespace(bytes, namespace, HeaderMkitNamespace);
    this.nonces.record(nonce, Number(expires));
  }
}

function cloneKeys(list: KeyList): KeyList {
  return { version: list.version, keys: (list.keys ?? []).map((k) => ({ ...k })) };
}

/** find returns the key published as id and its bytes. */
function find(list: KeyList, id: string): [PublicKey, Uint8Array] {
  const k = list.keys.find((k) => k.keyId === id);
  if (!k) throw new HookVerifyError("ErrUnknownKey", id);
  const reason = checkPublicKey(k);
  if (reason) throw new HookVerifyError("ErrConfig", `key list entry ${id}: ${reason}`);
  return [k, hexToBytes(k.publicKey)];
}

/**
 * canonical is the signed string: nine fields joined by "\n", no final
 * newline. relay's signer builds it separately; the vectors in
 * api/testdata check the two against each other.
 */
export function canonical(keyID: string, namespace: string, audience: string, path: string, digest: string, created: string, expires: string, nonce: string): string {
  return ["mkit-hook:v2", keyID, namespace, audience, path, digest, created, expires, nonce].join("\n");
}

function configOrigin(rawURL: string): string {
  try {
    return originOf(rawURL);
  } catch (err) {
    throw new HookVerifyError("ErrConfig", `audience ${JSON.stringify(rawURL)}: ${(err as Error).message}`);
  }
}

/**
 * origin is the canonical origin of rawURL, as mkit-hook signs audiences:
 * lowercase scheme://host[:port], the default port omitted, no user info,
 * path or query. Use it to compare a configured URL with a signed audience.
 * The spellings relay refuses to sign for are refused here too: a host
 * ending with '.', a port with a leading zero, an IPv6 address not in its
 * canonical form or with a zone. Errors have code ErrConfig.
 */
export function origin(rawURL: string): string {
  try {
    return originOf(rawURL);
  } catch (err) {
    throw new HookVerifyError("ErrConfig", `origin ${JSON.stringify(rawURL)}: ${(err as Error).message}`);
  }
}

// originOf reads the authority from the text itself: WHATWG URL parsing
// would quietly turn spellings relay refuses (a port 0443, a long IPv6 form)
// into canonical ones.
function originOf(rawURL: string): string {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/.exec(rawURL);
  if (!m) {
    if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(rawURL) && !/^https?:/i.test(rawURL)) throw new Error("scheme must be http or https");
    throw new Error(/^https?:/i.test(rawURL) ? "no host" : "scheme must be http or https");
  }
  const scheme = m[1]!.toLowerCase();
  if (scheme !== "http" && scheme !== "https") throw new Error("scheme must be http or https");
  let authority = m[2]!;
  const at = authority.lastIndexOf("@");
  if (at >= 0) authority = authority.slice(at + 1);
  let host: string;
  let port = "";
  if (authority.startsWith("[")) {
    const end = authority.indexOf("]");
    if (end < 0) throw new Error("not a URL");
    host = authority.slice(1, end);
    const rest = authority.slice(end + 1);
    if (rest !== "" && !rest.startsWith(":")) throw new Error("not a URL");
    port = rest.slice(1);
  } else {
    const colon = authority.lastIndexOf(":");
    host = colon >= 0 ? authority.slice(0, colon) : authority;
    port = colon >= 0 ? authority.slice(colon + 1) : "";
  }
  if (!/^[0-9]*$/.test(port)) throw new Error("not a URL");
  if (host === "") throw new Error("no host");
  if (/[^\x21-\x7e]/.test(host)) throw new Error("host must be printable ASCII (use the punycode form)");
  host = host.toLowerCase();
  if (host.endsWith(".")) throw new Error("host ends with '.' (relay does not sign for such a host)");
  if (host.includes(":")) {
    let canon = "";
    try {
      canon = new URL(`http://[${host}]/`).hostname;
    } catch {
      // not an IPv6 address
    }
    if (canon !== `[${host}]`) throw new Error("IPv6 address must be in its canonical form (as 2001:db8::1), without a zone");
    host = `[${host}]`;
  }
  if (port !== "" && parseDecimal(port) === undefined) throw new Error("port is not a number without leading zeros");
  if (port === "" || (scheme === "http" && port === "80") || (scheme === "https" && port === "443")) return `${scheme}://${host}`;
  return `${scheme}://${host}:${port}`;
}
