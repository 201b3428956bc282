import { describe, expect, it } from 'vitest';
import { applyPoolDesired, memberName, planPool, poolConditions } from '../../workflows/pool/state.js';
import type { PoolDesired, PoolMember, PoolObservation, PoolState } from '../../workflows/pool/types.js';

function desired(over: Partial<PoolDesired> = {}): PoolDesired {
  return {
    generation: 1,
    replicas: 3,
    templateHash: 'new',
    strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 },
    deletionRequested: false,
    membersVersion: 'm1',
    ...over,
  };
}

let n = 0;
function member(over: Partial<PoolMember> = {}): PoolMember {
  n++;
  return {
    name: `p-${String(n).padStart(3, '0')}`,
    uid: `u${n}`,
    templateHash: 'new',
    ready: true,
    deleting: false,
    draining: false,
    createdAt: `2026-12-03T10:00:${String(n % 60).padStart(2, '0')}Z`,
    matchesTemplate: true,
    ...over,
  };
}

const seen = (members: PoolMember[]): PoolObservation => ({ poolExists: true, templateHash: 'new', members });

describe('planPool', () => {
  it('scales up an empty pool to replicas at once (no surge limit when nothing is old)', () => {
    const plan = planPool(desired({ replicas: 5 }), seen([]), 'pool');
    expect(plan.create).toBe(5);
    expect(plan.remove).toEqual([]);
    expect(plan.status).toMatchObject({ replicas: 0, selector: 'crawl.example.com/pool=pool' });
  });

  it('is quiet when every member is current and ready', () => {
    const plan = planPool(desired(), seen([member(), member(), member()]), 'pool');
    expect(plan).toMatchObject({ create: 0, remove: [], restore: [], progressing: false });
    expect(plan.status).toMatchObject({
      replicas: 3,
      readyReplicas: 3,
      updatedReplicas: 3,
      availableReplicas: 3,
    });
  });

  it('rolls out: surges first, removes old ones only while enough stay available', () => {
    const old = [
      member({ templateHash: 'old' }),
      member({ templateHash: 'old' }),
      member({ templateHash: 'old' }),
    ];
    // Step 1: one new (surge 1), no old removed (all 3 needed available).
    let plan = planPool(desired(), seen(old), 'pool');
    expect(plan.create).toBe(1);
    expect(plan.remove).toEqual([]);
    // Step 2: the new one is not Ready yet: nothing more.
    const fresh = member({ ready: false });
    plan = planPool(desired(), seen([...old, fresh]), 'pool');
    expect(plan).toMatchObject({ create: 0, remove: [] });
    // Step 3: it is Ready: one old goes (the oldest), and its place is refilled next round.
    fresh.ready = true;
    plan = planPool(desired(), seen([...old, fresh]), 'pool');
    expect(plan.remove).toEqual([{ name: old[0]!.name, uid: old[0]!.uid, why: 'rollout' }]);
    expect(plan.create).toBe(1);
    expect(plan.progressing).toBe(true);
  });

  it('with maxUnavailable and no surge, removes first then refills', () => {
    const old = [
      member({ templateHash: 'old' }),
      member({ templateHash: 'old' }),
      member({ templateHash: 'old' }),
    ];
    const plan = planPool(
      desired({ strategy: { maxSurge: 0, maxUnavailable: 1, drainTimeoutSeconds: 60 } }),
      seen(old),
      'pool',
    );
    expect(plan.remove).toHaveLength(1);
    expect(plan.create).toBe(1);
  });

  it('removes not-Ready old members at any time', () => {
    const plan = planPool(
      desired(),
      seen([member(), member(), member(), member({ templateHash: 'old', ready: false })]),
      'pool',
    );
    expect(plan.remove.map((r) => r.why)).toEqual(['rollout']);
  });

  it('scales down not-Ready first, then the oldest; draining members count for nothing', () => {
    const a = member();
    const b = member({ ready: false });
    const c = member();
    const d = member();
    const going = member({ deleting: true, draining: true });
    const plan = planPool(desired({ replicas: 2 }), seen([a, b, c, d, going]), 'pool');
    expect(plan.remove.map((r) => r.name)).toEqual([b.name, a.name]);
    expect(plan.status).toMatchObject({ replicas: 4, drainingReplicas: 1 });
    expect(plan.create).toBe(0);
  });

  it('replaces a member deleted by hand and restores one edited by hand', () => {
    const edited = member({ matchesTemplate: false });
    const plan = planPool(desired(), seen([member(), edited]), 'pool');
    expect(plan.create).toBe(1);
    expect(plan.restore).toEqual([{ name: edited.name, uid: edited.uid }]);
  });

  it('conditions: Available and Progressing, lastTransitionTime kept while unchanged', () => {
    const state: PoolState = {
      ref: { namespace: 'ns', name: 'pool', uid: 'pu' },
      desired: desired(),
      conditions: [],
      created: 0,
      removed: 0,
      restored: 0,
    };
    const plan = planPool(state.desired, seen([member(), member(), member()]), 'pool');
    const first = poolConditions(state, plan, seen([]), new Date('2026-12-03T10:00:00Z'));
    expect(first.find((c) => c.type === 'Available')).toMatchObject({ status: 'True' });
    expect(first.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'Complete',
    });
    state.conditions = first;
    const again = poolConditions(state, plan, seen([]), new Date('2026-12-03T11:00:00Z'));
    expect(again[0]!.lastTransitionTime).toBe('2026-12-03T10:00:00Z');
  });
});

describe('applyPoolDesired', () => {
  it('takes a newer generation, never undoes a deletion, and takes members news from an older one', () => {
    const state: PoolState = {
      ref: { namespace: 'ns', name: 'pool', uid: 'pu' },
      desired: desired({ generation: 2 }),
      conditions: [],
      created: 0,
      removed: 0,
      restored: 0,
    };
    expect(applyPoolDesired(state, desired({ generation: 2 }))).toBe(false);
    expect(applyPoolDesired(state, desired({ generation: 1, replicas: 9, membersVersion: 'm2' }))).toBe(true);
    expect(state.desired).toMatchObject({ replicas: 3, membersVersion: 'm2' });
    expect(applyPoolDesired(state, desired({ generation: 3, deletionRequested: true }))).toBe(true);
    expect(applyPoolDesired(state, desired({ generation: 4 }))).toBe(true);
    expect(state.desired.deletionRequested).toBe(true);
  });
});

describe('memberName', () => {
  it('is the pool name and five characters, deterministic for a seeded random', () => {
    let i = 0;
    const seq = () => [0.1, 0.5, 0.9, 0.3, 0.7][i++ % 5]!;
    expect(memberName('web', seq)).toMatch(/^web-[a-z0-9]{5}$/);
    expect(memberName('x'.repeat(253), seq).length).toBeLessThanOrEqual(253);
  });
});

describe('planPool with rotation and autoscaling', () => {
  it('replaces a member marked for rotation as a rollout does: a new one first, then the marked one', () => {
    const members = [member(), member(), member()];
    const marked = { [members[1]!.uid]: 'MaxAge' as const };
    const first = planPool(desired({ replicas: 3 }), seen(members), 'pool', { marked });
    expect(first.create).toBe(1);
    expect(first.remove).toEqual([]);
    expect(first.rotating).toBe(1);
    expect(first.status.updatedReplicas).toBe(3);
    const fresh = member();
    const second = planPool(desired({ replicas: 3 }), seen([...members, fresh]), 'pool', { marked });
    expect(second.create).toBe(0);
    expect(second.remove).toEqual([{ name: members[1]!.name, uid: members[1]!.uid, why: 'max-age' }]);
  });

  it('never goes above replicas + maxSurge live members nor below replicas - maxUnavailable available; banned first', () => {
    const members = [member(), member(), member(), member()];
    const marked = Object.fromEntries(members.map((m, i) => [m.uid, i === 3 ? 'Banned' : 'MaxAge'] as const));
    const plan = planPool(
      desired({ replicas: 4, strategy: { maxSurge: 1, maxUnavailable: 1, drainTimeoutSeconds: 60 } }),
      seen(members),
      'pool',
      { marked },
    );
    // One goes (4 - 1 available stay), so two may come (3 live + 2 = replicas + maxSurge).
    expect(plan.remove).toEqual([{ name: members[3]!.name, uid: members[3]!.uid, why: 'banned' }]);
    expect(plan.create).toBe(2);
  });

  it('keeps the size it is given and scales down the idlest members first, never below the floor', () => {
    const members = [member(), member(), member(), member(), member()];
    const leases = { [members[0]!.uid]: 3, [members[1]!.uid]: 1, [members[3]!.uid]: 2 };
    const plan = planPool(desired({ replicas: 5 }), seen(members), 'pool', {
      replicas: 2,
      leasesByMember: leases,
    });
    expect(plan.remove.map((r) => r.name)).toEqual([members[2]!.name, members[4]!.name, members[1]!.name]);
    expect(plan.status.desiredReplicas).toBe(2);
    const floored = planPool(desired({ replicas: 5 }), seen(members), 'pool', {
      replicas: 2,
      minAvailableFloor: 4,
    });
    expect(floored.remove).toHaveLength(1);
  });
});
