// The README's TypeScript examples compile against the package as built.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { pkgDir } from "./helpers.js";

test("the README's examples type-check", async (t) => {
  const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.ok(blocks.length >= 3, "the README has its examples");
  // Inside the package, so that it resolves itself by name as an installed copy would.
  const dir = join(pkgDir, "test-build", "readme");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const imports = blocks.flatMap((b) => b.split("\n").filter((l) => l.startsWith("import ")));
  const body = blocks.map((b) => b.split("\n").filter((l) => !l.startsWith("import ")).join("\n"));
  writeFileSync(join(dir, "example.ts"), [...imports, 'declare const outcomes: import("@hookrelay/relay").Outcome[];', ...body, "export {};"].join("\n"));
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
    compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, types: ["node"], skipLibCheck: true },
    files: ["example.ts"],
  }));
  await promisify(execFile)(process.execPath, [join(pkgDir, "node_modules/typescript/bin/tsc"), "-p", dir]).catch((e: { stdout?: string }) => {
    assert.fail(`the README's examples do not compile:\n${e.stdout}`);
  });
});
