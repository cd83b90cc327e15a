/**
 * The reasons a webhook is refused, named as the Go package hookverify names
 * them (`ErrMissingHeader` there is `code: "ErrMissingHeader"` here). Their
 * messages name the header and the rule, never a signature, a secret or the
 * body.
 */
export const HookVerifyErrors = {
  /** A required header is absent or empty. */
  ErrMissingHeader: "hookverify: missing header",
  /** A header is repeated or breaks its syntax. */
  ErrMalformed: "hookverify: malformed header",
  /** X-Mkit-Hook-Version is not "2"; "1", which signs no namespace, included. */
  ErrVersion: "hookverify: unsupported signature version",
  /** The key id is not in the key list. */
  ErrUnknownKey: "hookverify: unknown key id",
  /** Now, or the request's created-at, is outside the key's notBeforeMs/notAfterMs. */
  ErrKeyInactive: "hookverify: key not valid now",
  /** The request was signed for another origin. */
  ErrAudience: "hookverify: wrong audience",
  /** The signed namespace is not one the receiver takes, or data.namespace is not the signed one. */
  ErrNamespace: "hookverify: namespace not accepted",
  /** expires-at is not after created-at, or the window is longer than 300,000 ms. */
  ErrWindow: "hookverify: invalid validity window",
  /** The request claims a time further ahead of the receiver's clock than allowed. */
  ErrNotYetValid: "hookverify: signed in the future",
  /** The signature's window (or tolerance) has passed. */
  ErrExpired: "hookverify: signature expired",
  /** The body is not the one the digest names. */
  ErrDigest: "hookverify: body digest mismatch",
  /** No signature matches. */
  ErrBadSignature: "hookverify: bad signature",
  /** The nonce was accepted before and its window is still open. */
  ErrReplay: "hookverify: replayed nonce",
  /** The replay cache is full of unexpired nonces; the sender retries. */
  ErrNonceCacheFull: "hookverify: nonce cache full",
  /** EitherVerifier holds no verifier for the scheme the request's headers name, or they name none. */
  ErrNoScheme: "hookverify: no verifier for this request's scheme",
  /** The middleware refused a body over its limit. */
  ErrBodyTooLarge: "hookverify: body too large",
  /** The verifier itself is misconfigured; the sender is not at fault. */
  ErrConfig: "hookverify: verifier misconfigured",
  /** A key list that parseKeyList refuses. */
  ErrKeyList: "hookverify: invalid key list",
  /** A key list URL fetchKeyList refuses to trust. */
  ErrKeyListSource: "hookverify: untrusted key list URL",
} as const;

export type HookVerifyErrorCode = keyof typeof HookVerifyErrors;

/**
 * Every refusal of a verifier is a HookVerifyError; branch on `code`, never
 * on the message.
 */
export class HookVerifyError extends Error {
  readonly code: HookVerifyErrorCode;
  constructor(code: HookVerifyErrorCode, detail?: string) {
    super(detail ? `${HookVerifyErrors[code]}: ${detail}` : HookVerifyErrors[code]);
    this.name = "HookVerifyError";
    this.code = code;
  }
}

/** isHookVerifyError reports whether err is a HookVerifyError, of code when given. */
export function isHookVerifyError(err: unknown, code?: HookVerifyErrorCode): err is HookVerifyError {
  return err instanceof HookVerifyError && (code === undefined || err.code === code);
}
