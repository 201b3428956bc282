import { describe, expect, it } from 'vitest';
import {
  aggregateDemand,
  applyDemandReport,
  decideReplicas,
  initialAutoscale,
  recommendReplicas,
  REPORT_EXPIRY_MS,
} from '../../workflows/pool/autoscale.js';
import type { PoolAutoscaling, PoolDemandReport } from '../../workflows/pool/types.js';

const spec: PoolAutoscaling = {
  minReplicas: 2,
  maxReplicas: 40,
  targetUtilization: 0.8,
  scaleUpStabilizationMs: 10_000,
  scaleDownStabilizationMs: 60_000,
};

function report(over: Partial<PoolDemandReport> = {}): PoolDemandReport {
  return {
    reporter: 'api-1',
    sharedStore: false,
    activeLeases: 0,
    leasesByMember: {},
    denials: 0,
    bans: [],
    ...over,
  };
}

describe('recommendReplicas', () => {
  it('covers the held leases at the target utilization, within min and max', () => {
    // 20 leases, 5 per member at 80%: 4 per member → 5 members.
    expect(recommendReplicas({ activeLeases: 20, denials: 0 }, 5, 5, spec)).toBe(5);
    expect(recommendReplicas({ activeLeases: 21, denials: 0 }, 6, 5, spec)).toBe(6);
    expect(recommendReplicas({ activeLeases: 0, denials: 0 }, 5, 5, spec)).toBe(2);
    expect(recommendReplicas({ activeLeases: 10_000, denials: 0 }, 2, 5, spec)).toBe(40);
  });

  it('asks for as many as allowed while requests are refused, even at full utilization', () => {
    expect(recommendReplicas({ activeLeases: 50, denials: 3 }, 10, 5, spec)).toBe(40);
    // One refusal where the arithmetic says "enough": still more.
    expect(recommendReplicas({ activeLeases: 4, denials: 1 }, 2, 5, spec)).toBe(40);
  });

  it('keeps the size when members take no leases (maxLeases 0): no capacity to size by', () => {
    expect(recommendReplicas({ activeLeases: 9, denials: 9 }, 7, 0, spec)).toBe(7);
  });
});

describe('aggregateDemand', () => {
  it('adds private stores, takes the largest view of a shared one, and forgets stale reporters', () => {
    const state = initialAutoscale(spec, 3);
    applyDemandReport(state, report({ reporter: 'a', activeLeases: 5, denials: 1 }), 1_000, 5, spec);
    applyDemandReport(state, report({ reporter: 'b', activeLeases: 7, denials: 2 }), 2_000, 5, spec);
    expect(aggregateDemand(state, 2_000)).toEqual({ activeLeases: 12, denials: 3 });
    const shared = initialAutoscale(spec, 3);
    applyDemandReport(shared, report({ reporter: 'a', sharedStore: true, activeLeases: 30 }), 1_000, 5, spec);
    applyDemandReport(shared, report({ reporter: 'b', sharedStore: true, activeLeases: 31 }), 2_000, 5, spec);
    expect(aggregateDemand(shared, 2_000)).toEqual({ activeLeases: 31, denials: 0 });
    expect(aggregateDemand(shared, 1_000 + REPORT_EXPIRY_MS + 1)).toEqual({ activeLeases: 31, denials: 0 });
    expect(aggregateDemand(shared, 2_000 + REPORT_EXPIRY_MS + 1)).toBeUndefined();
  });
});

describe('decideReplicas (stabilization windows)', () => {
  it('scales up once every recommendation of the scale-up window agrees, a doubling (or +4) a step, and says when to look again', () => {
    const state = initialAutoscale(spec, 2);
    applyDemandReport(state, report({ activeLeases: 8 }), 0, 5, spec); // 2
    applyDemandReport(state, report({ activeLeases: 40 }), 1_000, 5, spec); // 10
    // At 5 s the window (10 s) still holds the 2 in force at its start.
    expect(decideReplicas(state, 5_000, spec, { scaleUpAllowed: true })).toEqual({
      replicas: 2,
      recheckAtMs: 11_000,
    });
    // Then 10 is wanted, 6 (2 + 4) is the step.
    expect(decideReplicas(state, 11_000, spec, { scaleUpAllowed: true }).replicas).toBe(6);
    // Paused (provider not ready), or the last step's members not up yet: no scale-up.
    expect(decideReplicas(state, 11_000, spec, { scaleUpAllowed: false }).replicas).toBe(2);
    expect(decideReplicas(state, 11_000, spec, { scaleUpAllowed: true, lastStepReady: false }).replicas).toBe(
      2,
    );
    state.replicas = 6;
    expect(decideReplicas(state, 12_000, spec, { scaleUpAllowed: true, lastStepReady: true }).replicas).toBe(
      10,
    );
  });

  it('steps up at once, step after step, while refusals last and each step is up', () => {
    const state = initialAutoscale(spec, 3);
    applyDemandReport(state, report({ activeLeases: 15, denials: 9 }), 0, 5, spec);
    applyDemandReport(state, report({ activeLeases: 15, denials: 20 }), 10_000, 5, spec);
    const sizes: number[] = [];
    for (let t = 10_000; t <= 13_000; t += 1_000) {
      state.replicas = decideReplicas(state, t, spec, { scaleUpAllowed: true, lastStepReady: true }).replicas;
      sizes.push(state.replicas);
    }
    expect(sizes).toEqual([7, 14, 28, 40]);
  });

  it('scales down only after the scale-down window saw nothing higher: no flapping on a dip', () => {
    const state = initialAutoscale(spec, 10);
    state.replicas = 10;
    applyDemandReport(state, report({ activeLeases: 40 }), 0, 5, spec); // 10
    applyDemandReport(state, report({ activeLeases: 8 }), 5_000, 5, spec); // 2: a dip
    applyDemandReport(state, report({ activeLeases: 40 }), 20_000, 5, spec); // back
    for (const t of [5_000, 20_000, 50_000, 64_999]) {
      expect(decideReplicas(state, t, spec, { scaleUpAllowed: true }).replicas).toBe(10);
    }
    applyDemandReport(state, report({ activeLeases: 12 }), 70_000, 5, spec); // 3
    expect(decideReplicas(state, 100_000, spec, { scaleUpAllowed: true }).replicas).toBe(10);
    expect(decideReplicas(state, 130_000, spec, { scaleUpAllowed: true }).replicas).toBe(3);
  });

  it('holds the size with no report yet, and clamps a size outside [min, max]', () => {
    const state = initialAutoscale(spec, 100);
    expect(state.replicas).toBe(40);
    expect(decideReplicas(state, 0, spec, { scaleUpAllowed: true })).toEqual({ replicas: 40 });
  });
});
