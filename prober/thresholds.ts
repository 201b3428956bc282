/**
 * The per-proxy threshold state machine (pure). Consecutive successes and
 * failures are counted against the Proxy's successThreshold and
 * failureThreshold; the verdict changes only when a threshold is crossed, so
 * one failed probe never flips a healthy proxy and one success never
 * rescues an unhealthy one.
 */
import type { HealthVerdict } from '../workflows/proxy/types.js';

export interface Thresholds {
  successThreshold: number;
  failureThreshold: number;
}

export interface ThresholdState {
  readonly verdict: HealthVerdict;
  readonly successes: number;
  readonly failures: number;
}

/**
 * The state a proxy starts from. `seed` is the verdict already recorded in
 * its Healthy condition (kept across a prober restart so a healthy fleet
 * does not flap to Unknown); the counters always start at zero, so a real
 * transition still needs a full threshold run.
 */
export function initialThresholdState(seed: HealthVerdict = 'Unknown'): ThresholdState {
  return { verdict: seed, successes: 0, failures: 0 };
}

/** Folds one probe result in. `changed` is true exactly when the verdict flipped. */
export function recordProbe(
  state: ThresholdState,
  ok: boolean,
  thresholds: Thresholds,
): { state: ThresholdState; changed: boolean } {
  if (ok) {
    const successes = state.successes + 1;
    const flips = state.verdict !== 'Healthy' && successes >= Math.max(1, thresholds.successThreshold);
    return { state: { verdict: flips ? 'Healthy' : state.verdict, successes, failures: 0 }, changed: flips };
  }
  const failures = state.failures + 1;
  const flips = state.verdict !== 'Unhealthy' && failures >= Math.max(1, thresholds.failureThreshold);
  return { state: { verdict: flips ? 'Unhealthy' : state.verdict, successes: 0, failures }, changed: flips };
}
