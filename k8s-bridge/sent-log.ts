/**
 * What a reconciler last sent per key (the object's UID and its desired
 * state, as one fingerprint), and when: a reconcile that would send the same
 * thing again sends nothing. Forgotten per key when its run is found missing,
 * wholly after a watch outage (everything is sent again; the workflows
 * dedupe), and dropped when the object is gone.
 */
export interface SentLog {
  /** Whether `fingerprint` is what was last sent for `key`. */
  unchanged(key: string, fingerprint: string): boolean;
  /** Whether anything is remembered as sent for `key`. */
  has(key: string): boolean;
  record(key: string, fingerprint: string): void;
  /** Whether `key` was last sent at or after `since` (ms since the epoch), forgotten or not. */
  sentSince(key: string, since: number): boolean;
  /** Forgets what was sent for `key` (its next reconcile sends again), not when. */
  forget(key: string): void;
  /** Forgets what was sent for every key, not when. */
  forgetAll(): void;
  /** Drops `key` altogether: its object is gone. */
  drop(key: string): void;
}

export function createSentLog(): SentLog {
  const fingerprints = new Map<string, string>();
  const sentAt = new Map<string, number>();
  return {
    unchanged: (key, fingerprint) => fingerprints.get(key) === fingerprint,
    has: (key) => fingerprints.has(key),
    record(key, fingerprint) {
      fingerprints.set(key, fingerprint);
      sentAt.set(key, Date.now());
    },
    sentSince: (key, since) => (sentAt.get(key) ?? 0) >= since,
    forget: (key) => fingerprints.delete(key),
    forgetAll: () => fingerprints.clear(),
    drop(key) {
      fingerprints.delete(key);
      sentAt.delete(key);
    },
  };
}
