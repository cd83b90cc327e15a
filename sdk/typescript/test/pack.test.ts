// The published package holds the built code, its types, the README,
// the LICENSE and package.json: no sources, tests or source maps.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";
import { pkgDir } from "./helpers.js";

test("npm pack lists only dist, its types, README, LICENSE and package.json", async () => {
  const { stdout } = await promisify(execFile)("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: pkgDir });
  const [pack] = JSON.parse(stdout) as { files: { path: string }[] }[];
  const files = pack!.files.map((f) => f.path).sort();
  const stray = files.filter((f) => !/^(package\.json|README\.md|LICENSE|dist\/[a-z]+\.(js|d\.ts))$/.test(f));
  assert.deepEqual(stray, [], "files that do not belong in the package");
  for (const f of ["package.json", "README.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/node.js", "dist/node.d.ts", "dist/openapi.d.ts"]) {
    assert.ok(files.includes(f), `${f} is missing from ${files.join(", ")}`);
  }
});
