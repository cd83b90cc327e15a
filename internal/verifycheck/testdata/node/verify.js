// Cross-check for relay's Standard Webhooks signatures, run by hookverify's Go
// tests with the Standard Webhooks library for Node (npm standardwebhooks).
//
//   node verify.js verify  < {"secret","headers":{...},"bodyBase64"}
//     exits 0 when the library accepts the request, 1 when it rejects it.
//   node verify.js sign    < {"secret","msgId","timestamp","bodyBase64"}
//     prints {"webhook-signature": "v1,..."} as signed by the library.
"use strict";
const { Webhook } = require("standardwebhooks");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const req = JSON.parse(input);
  const body = Buffer.from(req.bodyBase64, "base64");
  const wh = new Webhook(req.secret);
  switch (process.argv[2]) {
    case "verify":
      try {
        wh.verify(body, req.headers, { jsonParse: false });
      } catch (err) {
        process.stderr.write(`rejected: ${err.message}\n`);
        process.exit(1);
      }
      process.exit(0);
      break;
    case "sign": {
      const sig = wh.sign(req.msgId, new Date(req.timestamp * 1000), body);
      process.stdout.write(JSON.stringify({ "webhook-signature": sig }) + "\n");
      break;
    }
    default:
      process.stderr.write("usage: node verify.js verify|sign < request.json\n");
      process.exit(2);
  }
});
