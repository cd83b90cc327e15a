import { HookVerifyError } from "./errors.js";

/**
 * Request headers as a verifier takes them: a Fetch API Headers, or a plain
 * object such as Node's `req.headersDistinct` (arrays keep repeated headers
 * apart, so a repeated signed header is refused) or `req.headers`. Names
 * are matched without regard to case; the same name under two spellings
 * counts as repeated.
 */
export type HeaderInput = Headers | Record<string, string | readonly string[] | undefined>;

/** headerValues returns every value of name in h. */
export function headerValues(h: HeaderInput, name: string): string[] {
  const lower = name.toLowerCase();
  if (typeof (h as Headers).get === "function" && typeof (h as Headers).forEach === "function") {
    const v = (h as Headers).get(lower);
    return v === null ? [] : [v];
  }
  const out: string[] = [];
  for (const [k, v] of Object.entries(h as Record<string, string | readonly string[] | undefined>)) {
    if (k.toLowerCase() !== lower || v === undefined) continue;
    if (typeof v === "string") out.push(v);
    else out.push(...v);
  }
  return out;
}

/** headerValue is the first value of name, or "". */
export function headerValue(h: HeaderInput, name: string): string {
  return headerValues(h, name)[0] ?? "";
}

/**
 * singleHeaders returns the value of each named header, each present,
 * non-empty and not repeated: a repeated signed header would leave it to
 * chance which of the values was checked.
 */
export function singleHeaders(h: HeaderInput, ...names: string[]): string[] {
  return names.map((name) => {
    const vals = headerValues(h, name);
    if (vals.length === 0 || vals[0] === "") throw new HookVerifyError("ErrMissingHeader", name);
    if (vals.length > 1) throw new HookVerifyError("ErrMalformed", `${name} is repeated`);
    return vals[0]!;
  });
}

const maxInt64 = 9223372036854775807n;

/**
 * parseDecimal accepts only the canonical form of a non-negative int64:
 * digits, no sign, no leading zero (but "0"), no overflow.
 */
export function parseDecimal(s: string): bigint | undefined {
  if (!/^(0|[1-9][0-9]{0,18})$/.test(s)) return undefined;
  const n = BigInt(s);
  return n > maxInt64 ? undefined : n;
}

export function isLowerHex(s: string, n: number): boolean {
  return s.length === n && /^[0-9a-f]*$/.test(s);
}

/** validKeyID: 1 to 64 of [A-Za-z0-9._-]. */
export function validKeyID(id: string): boolean {
  return /^[A-Za-z0-9._-]{1,64}$/.test(id);
}

/**
 * validNamespace is relay's namespace syntax, [a-z0-9][a-z0-9_-]{0,62}: one
 * spelling per namespace, so comparing names is comparing strings.
 */
export function validNamespace(ns: string): boolean {
  return /^[a-z0-9][a-z0-9_-]{0,62}$/.test(ns);
}

const b64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * decodeBase64 decodes standard, padded base64; with strict, the unused
 * bits of the last character must be zero, so each value has one spelling.
 * undefined when s is not such base64.
 */
export function decodeBase64(s: string, strict = false): Uint8Array | undefined {
  if (!b64.test(s)) return undefined;
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  if (strict && encodeBase64(out) !== s) return undefined;
  return out;
}

export function encodeBase64(b: Uint8Array): string {
  let bin = "";
  for (const c of b) bin += String.fromCharCode(c);
  return btoa(bin);
}

/** equalBytes compares in time that depends on the lengths only. */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

export type Bytes = Uint8Array | string;

const encoder = new TextEncoder();

/** toBytes is body as bytes: a string is taken as UTF-8. */
export function toBytes(body: Bytes): Uint8Array {
  return typeof body === "string" ? encoder.encode(body) : body;
}

/** A received request, as the verifiers and the middleware see it. */
export interface ReceivedRequest {
  headers: HeaderInput;
  /** The escaped request path, without the query. */
  path: string;
  body: Bytes;
}

/** Verifier is what the middleware takes: MkitVerifier, StandardVerifier or EitherVerifier, each through verifyRequest. */
export interface Verifier {
  verifyRequest(r: ReceivedRequest): void;
}


/** printable is s cut to at most n characters, control characters dropped, so a hostile server cannot forge lines in a log. */
export function printable(s: string, n: number): string {
  // eslint-disable-next-line no-control-regex
  const clean = s.replace(/[\u0000-\u001f\u007f-\u009f\ufffd]/g, "");
  return clean.length > n ? clean.slice(0, n) + "…" : clean;
}
