import assert from "node:assert/strict";
import { test } from "node:test";
import { isHookVerifyError, NonceCache } from "@hookrelay/relay";

const t0 = 1_764_460_800_000;

test("a nonce is refused until its expiry", () => {
  let now = t0;
  const c = new NonceCache(10, () => now);
  c.record("n1", t0 + 60_000);
  now += 59_999;
  assert.throws(() => c.record("n1", t0 + 60_000), (e) => isHookVerifyError(e, "ErrReplay"));
  now += 1;
  c.record("n1", t0 + 120_000);
  c.record("n2", now); // already expired: not stored
  assert.equal(c.size, 1);
});

test("a full cache refuses rather than forgets", () => {
  let now = t0;
  const c = new NonceCache(3, () => now);
  [3000, 1000, 2000].forEach((d, i) => c.record(`n${i}`, t0 + d));
  assert.throws(() => c.record("n3", t0 + 60_000), (e) => isHookVerifyError(e, "ErrNonceCacheFull"));
  for (let i = 0; i < 3; i++) assert.throws(() => c.record(`n${i}`, t0 + 3_600_000), (e) => isHookVerifyError(e, "ErrReplay"));
  now += 1000; // n1 expires first and makes room
  c.record("n3", t0 + 60_000);
  for (const n of ["n0", "n2", "n3"]) assert.throws(() => c.record(n, t0 + 3_600_000), (e) => isHookVerifyError(e, "ErrReplay"));
  assert.throws(() => c.record("n1", t0 + 60_000), (e) => isHookVerifyError(e, "ErrNonceCacheFull"));
});
