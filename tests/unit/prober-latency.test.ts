import { describe, expect, it } from 'vitest';
import {
  LATENCY_SAMPLES,
  latencyWorthReporting,
  medianLatency,
  withLatencySample,
} from '../../prober/latency.js';

const MIN = 10 * 60_000;

describe('latency suppression: max(20 ms, 50 %), at most once per ten minutes, only while healthy', () => {
  const at = 1_000_000;
  const worth = (
    lastMillis: number,
    latencyMillis: number,
    elapsedMs = MIN,
    verdict: 'Healthy' | 'Unhealthy' | 'Unknown' = 'Healthy',
  ) =>
    latencyWorthReporting({ verdict, last: { millis: lastMillis, at }, latencyMillis, now: at + elapsedMs });

  it.each([
    // [last, new, reported?]
    [0, 20, false], // the floor makes the rule defined at 0
    [0, 21, true],
    [40, 60, false], // +20 ms = 50 %: not more than the threshold
    [40, 61, true],
    [40, 19, true],
    [40, 20, false],
    [100, 150, false], // 50 % of 100 = 50: equal is not more
    [100, 151, true],
    [100, 49, true],
    [1000, 1400, false],
    [1000, 1600, true],
  ])('last %i ms, now %i ms → %s', (last, now, expected) => {
    expect(worth(last, now)).toBe(expected);
  });

  it('a proxy jittering 40↔61 ms reports at most once per ten minutes', () => {
    expect(worth(40, 61, MIN - 1)).toBe(false);
    expect(worth(40, 61, MIN)).toBe(true);
  });

  it('never while the verdict is not Healthy', () => {
    expect(worth(10, 500, MIN, 'Unhealthy')).toBe(false);
    expect(worth(10, 500, MIN, 'Unknown')).toBe(false);
  });

  it('a healthy proxy with nothing reported yet reports', () => {
    expect(latencyWorthReporting({ verdict: 'Healthy', last: undefined, latencyMillis: 5, now: at })).toBe(
      true,
    );
  });
});

describe('the latency compared is the median of the last few probes', () => {
  it.each([
    [[], undefined],
    [[7], 7],
    [[10, 500], 255],
    [[10, 10, 500], 10],
    [[10, 500, 10, 10, 900], 10],
    [[100, 10, 100, 10, 100], 100],
    [[1.4, 1.6, 1.2], 1],
  ])('median of %j is %s', (samples, expected) => {
    expect(medianLatency(samples)).toBe(expected);
  });

  it(`keeps the last ${LATENCY_SAMPLES} samples, oldest dropped, without changing its input`, () => {
    let samples: number[] = [];
    for (let i = 1; i <= 8; i++) {
      const before = [...samples];
      const next = withLatencySample(samples, i);
      expect(samples).toEqual(before);
      samples = next;
    }
    expect(samples).toEqual([4, 5, 6, 7, 8]);
  });
});
