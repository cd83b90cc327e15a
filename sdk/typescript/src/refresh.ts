import { HookVerifyError } from "./errors.js";
import { checkKeyListURL, fetchKeyList, type FetchKeyListOptions } from "./keylist.js";
import type { MkitVerifier } from "./mkit.js";

/**
 * How often a KeyListRefresher fetches the list by default, in ms. relay
 * publishes a new key at least 5 minutes before it signs with one, so a
 * receiver refreshing this often has the key before the first webhook
 * signed with it arrives.
 */
export const DEFAULT_REFRESH_INTERVAL_MS = 5 * 60_000;

/**
 * KeyListRefresher keeps an MkitVerifier's keys current with relay's
 * published list, so a receiver follows relay's key rotations without a
 * restart. A failed fetch, or a list fetchKeyList refuses, leaves the
 * verifier's keys as they were.
 */
export class KeyListRefresher {
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    readonly verifier: MkitVerifier,
    readonly url: string,
    readonly opts: FetchKeyListOptions & { intervalMs?: number; onError?: (err: unknown) => void } = {},
  ) {
    checkKeyListURL(url);
    if (opts.intervalMs !== undefined && !(opts.intervalMs > 0)) throw new HookVerifyError("ErrConfig", "key list refresh interval must be positive");
  }

  /** refresh fetches the list once and installs it; on error the verifier keeps its keys. */
  async refresh(): Promise<void> {
    this.verifier.setKeys(await fetchKeyList(this.url, this.opts));
  }

  /**
   * start refreshes every interval until stop. It does not refresh at once:
   * fetch the first list before serving, so that a receiver that cannot
   * get one fails at start.
   */
  start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => {
      this.refresh().catch((err) => this.opts.onError?.(err));
    }, this.opts.intervalMs ?? DEFAULT_REFRESH_INTERVAL_MS);
    (this.#timer as { unref?: () => void }).unref?.();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
