/**
 * Guessing costs: a client address that failed authentication more than
 * `maxFailures` times in the last `windowMs` is answered 429 without its
 * credentials being checked, until its oldest failure leaves the window.
 * Per process; memory is bounded by `maxAddresses` (the oldest address is
 * forgotten first).
 */
export const DEFAULT_MAX_AUTH_FAILURES = 20;
export const AUTH_FAILURE_WINDOW_MS = 60_000;

/** The address a limit counts a client under: as its connection shows it, an IPv4-mapped IPv6 address as the IPv4 one. */
export function clientKey(remoteAddress: string | undefined): string {
  const address = remoteAddress ?? '';
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice('::ffff:'.length) : address;
}

export interface GuessLimiter {
  /** Whether this address must wait; `retryAfterSeconds` says how long. */
  blocked(address: string): { retryAfterSeconds: number } | undefined;
  /** Records a failed authentication from this address. */
  failed(address: string): void;
}

export function createGuessLimiter(
  opts: { maxFailures?: number; windowMs?: number; maxAddresses?: number; now?: () => number } = {},
): GuessLimiter {
  const max = opts.maxFailures ?? DEFAULT_MAX_AUTH_FAILURES;
  const windowMs = opts.windowMs ?? AUTH_FAILURE_WINDOW_MS;
  const maxAddresses = opts.maxAddresses ?? 100_000;
  const now = opts.now ?? Date.now;
  /** Per address, its failure times in the window, oldest first (at most `max`). */
  const failures = new Map<string, number[]>();

  const recent = (address: string, t: number): number[] | undefined => {
    const times = failures.get(address);
    if (!times) return undefined;
    while (times.length > 0 && times[0]! <= t - windowMs) times.shift();
    if (times.length === 0) {
      failures.delete(address);
      return undefined;
    }
    return times;
  };

  return {
    blocked(address) {
      if (max <= 0) return undefined;
      const t = now();
      const times = recent(address, t);
      if (!times || times.length < max) return undefined;
      return { retryAfterSeconds: Math.max(1, Math.ceil((times[0]! + windowMs - t) / 1000)) };
    },
    failed(address) {
      if (max <= 0) return;
      const t = now();
      let times = recent(address, t);
      if (!times) {
        if (failures.size >= maxAddresses) failures.delete(failures.keys().next().value!);
        failures.set(address, (times = []));
      }
      times.push(t);
      if (times.length > max) times.shift();
    },
  };
}
