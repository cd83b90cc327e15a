// Every operation of api/openapi.yaml that a client calls is a method of
// RelayClient: a new operation in the contract fails here until it is.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { RelayClient } from "@hookrelay/relay";
import { repoRoot } from "./helpers.js";

/** The operations that are no client call. */
const notClientCalls = new Set([
  "metrics", // scraped by Prometheus, in its own format
  "outcomeWebhook", // sent by relay to receivers, who verify it
]);

/** The methods whose names are not their operation's. */
const methodOf: Record<string, string[]> = {
  ingestOutcomes: ["ingest", "ingestAll"],
};

test("RelayClient has a method for every client operation of api/openapi.yaml", () => {
  const yaml = readFileSync(join(repoRoot, "api/openapi.yaml"), "utf8");
  // A line scan: the package depends on no YAML parser, and operationId is a plain scalar.
  const ids = [...yaml.matchAll(/^\s+operationId:\s*['"]?([A-Za-z0-9_]+)['"]?\s*$/gm)].map((m) => m[1]!);
  assert.ok(ids.length >= 19, `found only ${ids.length} operations: ${ids.join(", ")}`);
  for (const id of notClientCalls) assert.ok(ids.includes(id), `${id} is listed as no client call but is not in the contract`);
  const proto = RelayClient.prototype as unknown as Record<string, unknown>;
  const missing = ids
    .filter((id) => !notClientCalls.has(id))
    .flatMap((id) => (methodOf[id] ?? [id]).filter((m) => typeof proto[m] !== "function").map((m) => `${id} (RelayClient.${m})`));
  assert.deepEqual(missing, [], "operations without a client method");
});
