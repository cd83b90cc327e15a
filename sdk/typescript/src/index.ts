/**
 * relay for TypeScript: verifiers of relay's webhooks (mkit-hook v2,
 * Standard Webhooks v1 and v1a), as the Go package hookverify makes them,
 * and a client of relay's REST API. It runs in Node.js 20 and in browsers;
 * the middleware for Node's http server is in "./node".
 */
export * from "./errors.js";
export { type HeaderInput, type ReceivedRequest, type Verifier, type Bytes } from "./util.js";
export * from "./keylist.js";
export * from "./nonce.js";
export * from "./mkit.js";
export * from "./standard.js";
export * from "./either.js";
export * from "./refresh.js";
export * from "./client.js";
export type { components, paths, operations } from "./openapi.js";
