/** Serialisable input of the drift sweep workflow (one run per Schedule fire). */
export interface DriftSweepInput {
  /** Each provider's listByTag deadline. */
  listTimeoutMs: number;
}

export const DRIFT_SWEEP_DEFAULTS = {
  intervalMs: 2 * 60_000,
  listTimeoutMs: 60_000,
} as const;
