/**
 * Middleware for Node's http server and Express-style routers: it reads the
 * raw body (up to a limit), verifies the request and hands the verified
 * bytes on. Put it before any body parser: the signature covers the exact
 * bytes received.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { HookVerifyError } from "./errors.js";
import type { Verifier } from "./util.js";

export * from "./index.js";

/** The largest body the middleware reads by default: relay's webhook bodies are a few KiB. */
export const DEFAULT_MAX_BODY = 1 << 20;

export interface MiddlewareOptions {
  /** The largest body read (DEFAULT_MAX_BODY when not set); a larger one is answered 413 without being verified. */
  maxBody?: number;
  /** Called with every refused request and its reason, for logging or metrics; the error carries no secret or body. */
  onError?: (req: IncomingMessage, err: Error) => void;
}

/** A request the middleware verified: rawBody (and body, unless set) hold the bytes received. */
export type VerifiedRequest = IncomingMessage & { rawBody: Buffer; body?: unknown };

/**
 * verifyWebhooks returns Express-style middleware, `(req, res, next)`: each
 * request gets its body read (up to the limit) and verified with v; once
 * verified, req.rawBody holds the bytes (and req.body too, unless a body
 * was already set) and next() is called. A request that fails is answered
 * 401 with a one-line reason (the sender retries; a 401 never
 * acknowledges), 413 when the body is too large, 503 when the nonce cache
 * is full and 500 when v is misconfigured; next never sees it.
 */
export function verifyWebhooks(v: Verifier, opts: MiddlewareOptions = {}) {
  const max = opts.maxBody && opts.maxBody > 0 ? opts.maxBody : DEFAULT_MAX_BODY;
  return (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void => {
    const refuse = (status: number, err: Error) => {
      opts.onError?.(req, err);
      // details of a misconfiguration are for the receiver's log, not the sender
      const reason = status === 500 ? "hookverify: receiver misconfigured" : err.message;
      if (!res.headersSent) {
        res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff", Connection: status === 413 ? "close" : "keep-alive" });
      }
      res.end(reason + "\n");
    };
    if (req.readableEnded) {
      // A body parser ran first: the bytes the signature covers are gone.
      refuse(500, new HookVerifyError("ErrConfig", "the request body was read before the middleware: put it before any body parser"));
      return;
    }
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > max) {
      refuse(413, new HookVerifyError("ErrBodyTooLarge"));
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on("data", (c: Buffer) => {
      if (done) return;
      size += c.length;
      if (size > max) {
        done = true;
        refuse(413, new HookVerifyError("ErrBodyTooLarge"));
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on("error", () => {
      if (done) return;
      done = true;
      refuse(400, new Error("hookverify: reading body failed"));
    });
    req.on("end", () => {
      if (done) return;
      done = true;
      const body = Buffer.concat(chunks);
      const q = (req.url ?? "/").indexOf("?");
      const path = q >= 0 ? req.url!.slice(0, q) : (req.url ?? "/");
      try {
        v.verifyRequest({ headers: req.headersDistinct, path, body });
      } catch (err) {
        const e = err instanceof Error ? err : new Error(String(err));
        let status = 401;
        if (err instanceof HookVerifyError && err.code === "ErrNonceCacheFull") status = 503;
        else if (err instanceof HookVerifyError && err.code === "ErrConfig") status = 500;
        else if (!(err instanceof HookVerifyError)) status = 500;
        refuse(status, e);
        return;
      }
      const r = req as VerifiedRequest;
      r.rawBody = body;
      if (r.body === undefined) r.body = body;
      next();
    });
  };
}

/**
 * withVerification wraps a plain Node http handler, `(req, res)`, as
 * verifyWebhooks(v) does: http.createServer(withVerification(v, handler)).
 */
export function withVerification(
  v: Verifier,
  handler: (req: VerifiedRequest, res: ServerResponse) => void,
  opts: MiddlewareOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const mw = verifyWebhooks(v, opts);
  return (req, res) => mw(req, res, () => handler(req as VerifiedRequest, res));
}
