import { HookVerifyError } from "./errors.js";
import { HeaderMkitVersion, MkitVersion, type MkitVerifier } from "./mkit.js";
import { HeaderStandardSignature, type StandardVerifier } from "./standard.js";
import { type HeaderInput, headerValue, type ReceivedRequest, type Verifier } from "./util.js";

/** The signing scheme a request's headers claim, as requestScheme names it. */
export type Scheme = "mkit-hook-v2" | "mkit-hook" | "standard-webhooks" | "standard-webhooks-v1a" | "unsigned";

/**
 * requestScheme names the scheme h claims, for routing and for logs; the
 * claim is not verified. An mkit-hook version header wins over a
 * webhook-signature, so a request cannot pick the weaker check by carrying
 * both.
 */
export function requestScheme(h: HeaderInput): Scheme {
  const version = headerValue(h, HeaderMkitVersion);
  const sig = headerValue(h, HeaderStandardSignature);
  if (version === MkitVersion) return "mkit-hook-v2";
  if (version !== "") return "mkit-hook";
  if (sig.startsWith("v1a,")) return "standard-webhooks-v1a";
  if (sig !== "") return "standard-webhooks";
  return "unsigned";
}

/**
 * EitherVerifier verifies each request with the scheme its headers name
 * (requestScheme): mkit-hook with mkit, Standard Webhooks with standard. A
 * receiver whose relay endpoints use both schemes serves them at one URL
 * with it. A request of a scheme whose verifier is not set, or unsigned, is
 * refused with ErrNoScheme.
 */
export class EitherVerifier implements Verifier {
  constructor(readonly opts: { mkit?: MkitVerifier; standard?: StandardVerifier }) {}

  verifyRequest(r: ReceivedRequest): void {
    const scheme = requestScheme(r.headers);
    switch (scheme) {
      case "mkit-hook-v2":
      case "mkit-hook":
        if (this.opts.mkit) return this.opts.mkit.verify(r.headers, r.path, r.body);
        break;
      case "standard-webhooks":
      case "standard-webhooks-v1a":
        if (this.opts.standard) return this.opts.standard.verify(r.headers, r.body);
        break;
    }
    throw new HookVerifyError("ErrNoScheme", scheme);
  }

  /** check: at least one verifier, and each one set passes its own check. Errors have code ErrConfig. */
  check(): void {
    if (!this.opts.mkit && !this.opts.standard) throw new HookVerifyError("ErrConfig", "no verifier: set mkit, standard or both");
    this.opts.mkit?.check();
    this.opts.standard?.check();
  }
}
