import { HookVerifyError } from "./errors.js";

/**
 * The capacity of a NonceCache made without a size: enough for a sustained
 * 330 requests/s at relay's default 300 s validity.
 */
export const DEFAULT_NONCE_CACHE_SIZE = 100_000;

/**
 * NonceCache remembers accepted nonces until their signatures expire, so a
 * request cannot be accepted twice. It holds at most its size of unexpired
 * nonces: when full, record refuses with ErrNonceCacheFull instead of
 * forgetting a live nonce (forgetting would reopen a replay window;
 * refusing only delays a delivery, which the sender retries). Expired
 * entries are dropped, earliest expiry first, on every record.
 *
 * It lives in one process: replicas behind one origin each keep their own,
 * so such receivers also deduplicate by message.
 */
export class NonceCache {
  readonly #max: number;
  readonly #now: () => number;
  readonly #exp = new Map<string, number>(); // nonce -> expiry, Unix ms
  readonly #heap: { exp: number; nonce: string }[] = []; // min-heap by exp

  /**
   * @param size at most this many unexpired nonces (DEFAULT_NONCE_CACHE_SIZE when ≤ 0)
   * @param now the clock in Unix ms (Date.now when not set); give it the verifier's
   */
  constructor(size = 0, now?: () => number) {
    this.#max = size > 0 ? size : DEFAULT_NONCE_CACHE_SIZE;
    this.#now = now ?? Date.now;
  }

  /**
   * record accepts nonce, valid until expiresAtMs, once: a second record
   * before then throws ErrReplay. A nonce already expired is not stored (its
   * signature is refused anyway).
   */
  record(nonce: string, expiresAtMs: number): void {
    const now = this.#now();
    while (this.#heap.length > 0 && this.#heap[0]!.exp <= now) {
      const e = this.#pop();
      this.#exp.delete(e.nonce);
    }
    if (this.#exp.has(nonce)) throw new HookVerifyError("ErrReplay", "nonce was accepted before");
    if (expiresAtMs <= now) return;
    if (this.#exp.size >= this.#max) throw new HookVerifyError("ErrNonceCacheFull", `${this.#exp.size} unexpired nonces`);
    this.#exp.set(nonce, expiresAtMs);
    this.#push({ exp: expiresAtMs, nonce });
  }

  /** The number of nonces held, expired ones not yet dropped included. */
  get size(): number {
    return this.#exp.size;
  }

  #push(e: { exp: number; nonce: string }): void {
    const h = this.#heap;
    h.push(e);
    for (let i = h.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (h[p]!.exp <= h[i]!.exp) break;
      [h[p], h[i]] = [h[i]!, h[p]!];
      i = p;
    }
  }

  #pop(): { exp: number; nonce: string } {
    const h = this.#heap;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < h.length && h[l]!.exp < h[m]!.exp) m = l;
        if (r < h.length && h[r]!.exp < h[m]!.exp) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i]!, h[m]!];
        i = m;
      }
    }
    return top;
  }
}
