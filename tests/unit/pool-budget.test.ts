/**
 * A pool's cost and budget (issue 53), as the pure functions the pool
 * workflow runs: what the budget pays for, the cost over the last hour from
 * the rates seen, the BudgetLimited condition and rotation's day budget.
 */
import { describe, expect, it } from 'vitest';
import {
  budgetCondition,
  costStatus,
  HOUR_MS,
  membersAllowed,
  observeCost,
  rotationOverDayBudget,
  spentOver,
  withinBudget,
} from '../../workflows/pool/budget.js';
import type { PoolBudget, PoolState } from '../../workflows/pool/types.js';

function pool(budget?: PoolBudget, autoscaling = true): PoolState {
  return {
    ref: { namespace: 'ns', name: 'p', uid: 'u' },
    desired: {
      generation: 1,
      replicas: 1,
      templateHash: 'h',
      strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 },
      ...(autoscaling
        ? {
            autoscaling: {
              minReplicas: 1,
              maxReplicas: 10,
              targetUtilization: 1,
              scaleUpStabilizationMs: 0,
              scaleDownStabilizationMs: 0,
            },
          }
        : {}),
      ...(budget ? { budget } : {}),
      deletionRequested: false,
      membersVersion: 'v',
    },
    conditions: [],
    created: 0,
    removed: 0,
    restored: 0,
  };
}

describe('membersAllowed', () => {
  it('is what maxPerHour pays for at the price, rounded down, or the day budget spread over 24 hours when lower', () => {
    expect(membersAllowed({ maxPerHour: 0.2 }, 0.05)).toBe(4);
    expect(membersAllowed({ maxPerHour: 0.21 }, 0.05)).toBe(4);
    expect(membersAllowed({ maxPerHour: 0.19 }, 0.05)).toBe(3);
    expect(membersAllowed({ maxPerHour: 1, maxPerDay: 2.4 }, 0.05)).toBe(2);
    expect(membersAllowed({ maxPerHour: 0 }, 0.05)).toBe(0);
  });

  it('caps nothing without a budget, at an unknown price or for free instances', () => {
    expect(membersAllowed(undefined, 0.05)).toBeUndefined();
    expect(membersAllowed({ maxPerHour: 1 }, undefined)).toBeUndefined();
    expect(membersAllowed({ maxPerHour: 1 }, 0)).toBeUndefined();
  });
});

describe('observeCost and spentOver', () => {
  it('integrates the run rate seen at each look over the last hour', () => {
    const state = pool();
    observeCost(state, { currency: 'USD', perInstanceHour: 0.1, running: 2 }, 0);
    // Half an hour at 0.2 an hour, then 4 members for half an hour.
    observeCost(state, { currency: 'USD', perInstanceHour: 0.1, running: 4 }, HOUR_MS / 2);
    expect(spentOver(state.cost!, HOUR_MS, HOUR_MS)).toBeCloseTo(0.1 + 0.2, 9);
    // An hour later only the 4-member rate is in the window.
    observeCost(state, { currency: 'USD', perInstanceHour: 0.1, running: 4 }, 2 * HOUR_MS);
    expect(spentOver(state.cost!, 2 * HOUR_MS, HOUR_MS)).toBeCloseTo(0.4, 9);
    expect(costStatus(state.cost!, 2 * HOUR_MS)).toEqual({
      costPerHour: '0.4000 USD',
      costLastHour: '0.4000 USD',
    });
    // The rates before the window are dropped, all but the one in force at its start.
    expect(state.cost!.rates.length).toBeLessThanOrEqual(2);
  });

  it('an unknown price makes the rate and any window that holds it unknown, never zero', () => {
    const state = pool();
    observeCost(state, { currency: 'USD', running: 3 }, 0);
    expect(costStatus(state.cost!, HOUR_MS / 2)).toEqual({ costPerHour: 'unknown', costLastHour: 'unknown' });
  });
});

describe('the budget caps the size and says so', () => {
  it('caps the autoscaler at what maxPerHour pays for, and names the budget when demand asks for more', () => {
    const state = pool({ maxPerHour: 0.2 });
    observeCost(state, { currency: 'USD', perInstanceHour: 0.05, running: 4 }, 0);
    expect(withinBudget(state, 10)).toBe(4);
    expect(withinBudget(state, 3)).toBe(3);
    const c = budgetCondition(state, 'local', 10, true);
    expect(c).toMatchObject({ type: 'BudgetLimited', status: 'True', reason: 'BudgetLimited' });
    expect(c!.message).toBe(
      'budget.maxPerHour 0.2000 USD allows 4 proxies at 0.0500 USD each per hour; demand asks for up to 10',
    );
    expect(budgetCondition(state, 'local', 3, true)).toMatchObject({
      status: 'False',
      reason: 'WithinBudget',
    });
  });

  it('flags spec.replicas over the budget without capping it', () => {
    const state = pool({ maxPerHour: 0.2 }, false);
    observeCost(state, { currency: 'USD', perInstanceHour: 0.05, running: 6 }, 0);
    const c = budgetCondition(state, 'local', 6, false);
    expect(c).toMatchObject({ status: 'True', reason: 'ReplicasOverBudget' });
    expect(c!.message).toContain(
      'spec.replicas 6 is over what budget.maxPerHour 0.2000 USD allows (4 proxies',
    );
  });

  it('is Unknown when the price is, and absent without a budget', () => {
    const state = pool({ maxPerHour: 0.2 });
    observeCost(state, { currency: 'USD', running: 1 }, 0);
    expect(withinBudget(state, 10)).toBe(10);
    expect(budgetCondition(state, 'local', 10, true)).toMatchObject({
      status: 'Unknown',
      reason: 'PriceUnknown',
    });
    const none = pool();
    observeCost(none, { currency: 'USD', perInstanceHour: 0.05, running: 1 }, 0);
    expect(budgetCondition(none, 'local', 10, true)).toBeUndefined();
  });

  it('holds rotation while a replacement would take the last 24 hours over maxPerDay', () => {
    // maxPerDay 2.5 pays for one member at 0.1; two were kept by hand (flagged, not capped).
    const state = pool({ maxPerHour: 10, maxPerDay: 2.5 }, false);
    observeCost(state, { currency: 'USD', perInstanceHour: 0.1, running: 2 }, 0);
    // 5 hours at 0.2: 1.0 spent; a replacement's hour more stays within 2.5.
    expect(rotationOverDayBudget(state, 5 * HOUR_MS)).toBeUndefined();
    // 12.25 hours: 2.45 spent; one more instance-hour would pass 2.5.
    const held = rotationOverDayBudget(state, 12.25 * HOUR_MS);
    expect(held?.spent).toBeCloseTo(2.45, 9);
    expect(budgetCondition(state, 'local', 1, false, held)).toMatchObject({
      status: 'True',
      reason: 'RotationWaits',
    });
    expect(rotationOverDayBudget(pool({ maxPerHour: 10 }), 12 * HOUR_MS)).toBeUndefined();
  });
});
