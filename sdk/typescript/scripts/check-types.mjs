// Regenerates the API types from api/openapi.yaml into a temporary file and
// fails when they differ from the committed src/openapi.ts: the contract
// changed and the package's types did not follow (npm run generate:types).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = mkdtempSync(join(tmpdir(), "relay-openapi-"));
try {
  const out = join(dir, "openapi.ts");
  execFileSync(process.execPath, [join(pkg, "node_modules/openapi-typescript/bin/cli.js"), join(pkg, "../../api/openapi.yaml"), "-o", out], { stdio: ["ignore", "ignore", "inherit"] });
  const want = readFileSync(out, "utf8");
  const have = readFileSync(join(pkg, "src/openapi.ts"), "utf8");
  if (want !== have) {
    const a = want.split("\n"), b = have.split("\n");
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    console.error(`src/openapi.ts differs from what api/openapi.yaml generates (first at line ${i + 1}):`);
    console.error(`  generated: ${a[i] ?? "<end>"}\n  committed: ${b[i] ?? "<end>"}`);
    console.error("run npm run generate:types and commit src/openapi.ts");
    process.exit(1);
  }
  console.log("src/openapi.ts matches api/openapi.yaml");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
