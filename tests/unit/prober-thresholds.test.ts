import { describe, expect, it } from 'vitest';
import {
  initialThresholdState,
  recordProbe,
  type ThresholdState,
  type Thresholds,
} from '../../prober/thresholds.js';
import type { HealthVerdict } from '../../workflows/proxy/types.js';

/** Runs a probe sequence ('+' success, '-' failure) and returns the verdict after each probe and where it flipped. */
function run(
  seed: HealthVerdict,
  probes: string,
  thresholds: Thresholds,
): { verdicts: HealthVerdict[]; flips: number[] } {
  let state: ThresholdState = initialThresholdState(seed);
  const verdicts: HealthVerdict[] = [];
  const flips: number[] = [];
  [...probes].forEach((p, i) => {
    const out = recordProbe(state, p === '+', thresholds);
    state = out.state;
    verdicts.push(state.verdict);
    if (out.changed) flips.push(i);
  });
  return { verdicts, flips };
}

describe('threshold state machine', () => {
  const t = { successThreshold: 2, failureThreshold: 3 };

  it('stays Unknown until the first threshold is met, either way', () => {
    expect(run('Unknown', '+', t)).toEqual({ verdicts: ['Unknown'], flips: [] });
    expect(run('Unknown', '++', t)).toEqual({ verdicts: ['Unknown', 'Healthy'], flips: [1] });
    expect(run('Unknown', '--', t)).toEqual({ verdicts: ['Unknown', 'Unknown'], flips: [] });
    expect(run('Unknown', '---', t).flips).toEqual([2]);
    expect(run('Unknown', '---', t).verdicts.at(-1)).toBe('Unhealthy');
  });

  it('flips only on consecutive results: an interruption restarts the count', () => {
    // Healthy; two failures, a success, two failures: never three in a row.
    expect(run('Healthy', '--+--', t).flips).toEqual([]);
    expect(run('Healthy', '--+---', t)).toMatchObject({ flips: [5] });
    // Unhealthy; success, failure, success, success: the second pair flips.
    expect(run('Unhealthy', '+-++', t)).toEqual({
      verdicts: ['Unhealthy', 'Unhealthy', 'Unhealthy', 'Healthy'],
      flips: [3],
    });
  });

  it('reports a flip once, not on every result past the threshold', () => {
    expect(run('Healthy', '------', t).flips).toEqual([2]);
    expect(run('Unhealthy', '++++++', t).flips).toEqual([1]);
  });

  it('a seeded verdict is kept with zeroed counters: a real transition still needs a full threshold run', () => {
    const seeded = initialThresholdState('Healthy');
    expect(seeded).toEqual({ verdict: 'Healthy', successes: 0, failures: 0 });
    expect(run('Healthy', '--', t).flips).toEqual([]);
    expect(run('Healthy', '+++', t).flips).toEqual([]);
  });

  it('thresholds of 1 flip on the first result', () => {
    expect(run('Unknown', '+-+', { successThreshold: 1, failureThreshold: 1 })).toEqual({
      verdicts: ['Healthy', 'Unhealthy', 'Healthy'],
      flips: [0, 1, 2],
    });
  });
});
