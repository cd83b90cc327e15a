// Checks relay's Standard Webhooks v1a (Ed25519) signatures with Node's own
// crypto, written from the specification rather than from relay's code; run
// by hookverify's Go tests. It needs no package.
//
//   node verify_v1a.js < {"publicKeys":["whpk_..."],"headers":{...},"bodyBase64","now"}
//     exits 0 when a v1a entry of webhook-signature verifies under one of
//     the public keys and webhook-timestamp is within 5 minutes of now (Unix
//     seconds), 1 otherwise.
"use strict";
const crypto = require("node:crypto");

function reject(why) {
  process.stderr.write(`rejected: ${why}\n`);
  process.exit(1);
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const req = JSON.parse(input);
  const id = req.headers["webhook-id"];
  const ts = req.headers["webhook-timestamp"];
  const sigs = req.headers["webhook-signature"];
  if (!id || !ts || !sigs) reject("missing header");
  if (!/^[1-9][0-9]*$/.test(ts)) reject("bad timestamp");
  if (Math.abs(req.now - Number(ts)) > 300) reject("timestamp out of tolerance");
  // The signed content: id, timestamp and the raw body, joined by '.'.
  const data = Buffer.concat([Buffer.from(`${id}.${ts}.`, "utf8"), Buffer.from(req.bodyBase64, "base64")]);
  const keys = req.publicKeys.map((k) => {
    if (!k.startsWith("whpk_")) throw new Error("public key without whpk_");
    const raw = Buffer.from(k.slice("whpk_".length), "base64");
    if (raw.length !== 32) throw new Error("public key is not 32 bytes");
    return crypto.createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
  });
  for (const entry of sigs.split(" ")) {
    const comma = entry.indexOf(",");
    if (comma < 0 || entry.slice(0, comma) !== "v1a") continue;
    const sig = Buffer.from(entry.slice(comma + 1), "base64");
    if (sig.length !== 64) continue;
    for (const key of keys) {
      if (crypto.verify(null, data, key, sig)) process.exit(0);
    }
  }
  reject("no v1a signature verifies");
});
