import { describe, expect, it } from 'vitest';
import {
  ageDueAtMs,
  bannedOut,
  expiryDueAtMs,
  initialRotation,
  markBanned,
  markDue,
  recordBans,
  ROTATION_JITTER,
} from '../../workflows/pool/rotation.js';
import type { PoolMember } from '../../workflows/pool/types.js';

const T0 = Date.parse('2026-12-03T10:00:00Z');

function member(uid: string, createdMs: number, over: Partial<PoolMember> = {}): PoolMember {
  return {
    name: `m-${uid}`,
    uid,
    templateHash: 'h',
    ready: true,
    deleting: false,
    draining: false,
    createdAt: new Date(createdMs).toISOString(),
    matchesTemplate: true,
    ...over,
  };
}

describe('rotation by age', () => {
  it('falls due within maxAge less at most 10% jitter, stable per member and spread across members', () => {
    const dues = Array.from({ length: 50 }, (_, i) => ageDueAtMs(member(`uid-${i}`, T0), 300_000)!);
    for (const due of dues) {
      expect(due).toBeLessThanOrEqual(T0 + 300_000);
      expect(due).toBeGreaterThanOrEqual(T0 + 300_000 * (1 - ROTATION_JITTER));
    }
    expect(new Set(dues).size).toBeGreaterThan(40);
    expect(ageDueAtMs(member('uid-7', T0), 300_000)).toBe(dues[7]);
    expect(ageDueAtMs({ uid: 'x', createdAt: '' }, 300_000)).toBeUndefined();
  });

  it('marks the members due, says when the next one is, and forgets marks of members gone', () => {
    const state = initialRotation();
    const old = member('a', T0);
    const young = member('b', T0 + 200_000);
    const { nextDueAtMs } = markDue(state, [old, young], { maxAgeMs: 300_000 }, T0 + 301_000, 60_000);
    expect(state.marked).toEqual({ a: 'MaxAge' });
    expect(nextDueAtMs).toBe(ageDueAtMs(young, 300_000));
    markDue(state, [young, { ...old, deleting: true }], { maxAgeMs: 300_000 }, T0 + 302_000, 60_000);
    expect(state.marked).toEqual({});
  });
});

describe('rotation before the provider ends a member (status.expiresAt)', () => {
  const ending = (uid: string, createdMs: number, lifeMs: number) =>
    member(uid, createdMs, { expiresAt: new Date(createdMs + lifeMs).toISOString() });

  it("falls due a drain's length before the end, at most half the life; never without an end", () => {
    expect(expiryDueAtMs(ending('a', T0, 600_000), 120_000)).toBe(T0 + 480_000);
    // A drain longer than half the life: half the life.
    expect(expiryDueAtMs(ending('b', T0, 60_000), 3_600_000)).toBe(T0 + 30_000);
    expect(expiryDueAtMs(member('c', T0), 120_000)).toBeUndefined();
    expect(expiryDueAtMs({ createdAt: '', expiresAt: 'not a time' }, 120_000)).toBeUndefined();
    // No readable creation time: the whole drain before the end.
    expect(expiryDueAtMs({ createdAt: '', expiresAt: new Date(T0).toISOString() }, 120_000)).toBe(T0);
  });

  it('marks an ending member Expiring without a rotation spec, and keeps that mark while other marks go', () => {
    const state = initialRotation();
    state.marked['stale'] = 'MaxAge';
    const soon = ending('a', T0, 600_000);
    const later = ending('b', T0 + 100_000, 600_000);
    const plain = member('c', T0);
    const { nextDueAtMs } = markDue(
      state,
      [soon, later, plain, member('stale', T0)],
      undefined,
      T0 + 500_000,
      120_000,
    );
    expect(state.marked).toEqual({ a: 'Expiring' });
    expect(nextDueAtMs).toBe(T0 + 580_000);
    markDue(state, [soon, later, plain], undefined, T0 + 501_000, 120_000);
    expect(state.marked).toEqual({ a: 'Expiring' });
  });

  it('takes the earlier of age and end, and names that reason', () => {
    const state = initialRotation();
    const ends = ending('a', T0, 200_000); // by its end: T0 + 100 s (half its life); by age: after T0 + 270 s
    const aged = ending('b', T0, 3_600_000); // by age: by T0 + 300 s; by its end: T0 + 3,480 s
    const { nextDueAtMs } = markDue(state, [ends, aged], { maxAgeMs: 300_000 }, T0 + 150_000, 120_000);
    expect(state.marked).toEqual({ a: 'Expiring' });
    expect(nextDueAtMs).toBe(ageDueAtMs(aged, 300_000));
    markDue(state, [ends, aged], { maxAgeMs: 300_000 }, T0 + 300_000, 120_000);
    expect(state.marked).toEqual({ a: 'Expiring', b: 'MaxAge' });
  });
});

describe('rotation on bans', () => {
  const rule = { reports: 3, distinctTargets: 3, windowMs: 60_000 };

  it('marks a member once K reports from D distinct targets fall within the window; below it, nothing', () => {
    const state = initialRotation();
    recordBans(
      state,
      [
        { uid: 'a', target: 'one.example', atMs: T0 },
        { uid: 'a', target: 'two.example', atMs: T0 + 1 },
        { uid: 'b', target: 'one.example', atMs: T0 },
        { uid: 'b', target: 'one.example', atMs: T0 + 1 },
        { uid: 'b', target: 'one.example', atMs: T0 + 2 },
      ],
      T0 + 10,
      rule.windowMs,
    );
    // b has three reports but one target; a has two targets but two reports.
    expect(bannedOut(state, rule)).toEqual([]);
    recordBans(state, [{ uid: 'a', target: 'three.example', atMs: T0 + 20 }], T0 + 20, rule.windowMs);
    expect(bannedOut(state, rule)).toEqual(['a']);
    markBanned(state, ['a']);
    expect(state.marked).toEqual({ a: 'Banned' });
    expect(bannedOut(state, rule)).toEqual([]);
  });

  it('forgets reports older than the window', () => {
    const state = initialRotation();
    recordBans(
      state,
      [
        { uid: 'a', target: 'one', atMs: T0 },
        { uid: 'a', target: 'two', atMs: T0 + 1 },
      ],
      T0 + 1,
      rule.windowMs,
    );
    recordBans(state, [{ uid: 'a', target: 'three', atMs: T0 + 70_000 }], T0 + 70_000, rule.windowMs);
    expect(state.bans.a).toEqual([['three', T0 + 70_000]]);
    expect(bannedOut(state, rule)).toEqual([]);
  });
});
