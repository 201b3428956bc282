import { describe, expect, it } from 'vitest';
import {
  DueHeap,
  Scheduler,
  jitteredPeriod,
  nextDue,
  seededFirstDelay,
  type ScheduledRun,
} from '../../prober/schedule.js';
import { ManualClock, seeded } from '../helpers/prober-fixtures.js';

/** Resolves pending promise callbacks (run completions) without moving the clock. */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('DueHeap', () => {
  it('pops in due order for any insertion order, first scheduled first among equal dues', () => {
    const random = seeded(7);
    const heap = new DueHeap<number>();
    const dues = Array.from({ length: 2_000 }, () => Math.floor(random() * 1_000));
    dues.forEach((due, key) => heap.push({ due, key, token: key }));
    const popped: number[] = [];
    for (let e = heap.pop(); e; e = heap.pop()) popped.push(e.due);
    expect(popped).toEqual([...dues].sort((a, b) => a - b));
    for (let key = 0; key < 50; key++) heap.push({ due: 5, key, token: key });
    const keys: number[] = [];
    for (let e = heap.pop(); e; e = heap.pop()) keys.push(e.key);
    expect(keys).toEqual(Array.from({ length: 50 }, (_, i) => i));
  });
});

describe('jitter', () => {
  it('periods stay within ±10 % and first delays within one interval', () => {
    const random = seeded(1);
    for (let i = 0; i < 1_000; i++) {
      const p = jitteredPeriod(30_000, random);
      expect(p).toBeGreaterThanOrEqual(27_000);
      expect(p).toBeLessThan(33_000);
      const d = seededFirstDelay(30_000, random);
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(30_000);
    }
    expect(jitteredPeriod(30_000, () => 0)).toBe(27_000);
    expect(jitteredPeriod(30_000, () => 0.5)).toBe(30_000);
  });

  it('counts periods from the due time, and a proxy behind by a whole period is not made to catch up', () => {
    expect(nextDue(1_000, 1_500, 10_000, () => 0.5)).toEqual({ due: 11_000, skipped: false });
    expect(nextDue(1_000, 50_000, 10_000, () => 0.5)).toEqual({ due: 55_000, skipped: true });
  });

  it('a fleet that starts together drifts apart instead of probing in lockstep', () => {
    const random = seeded(3);
    let dues = Array.from({ length: 100 }, () => 0);
    for (let round = 0; round < 20; round++) dues = dues.map((d) => nextDue(d, d, 10_000, random).due);
    const distinctSeconds = new Set(dues.map((d) => Math.floor(d / 1_000)));
    expect(distinctSeconds.size).toBeGreaterThan(10);
  });
});

describe('Scheduler', () => {
  function setup(maxConcurrent: number) {
    const clock = new ManualClock();
    const runs: ScheduledRun<string>[] = [];
    const finishers = new Map<string, () => void>();
    const scheduler = new Scheduler<string>({
      clock,
      maxConcurrent,
      run: (run) => {
        runs.push(run);
        return new Promise<void>((resolve) => finishers.set(run.key, resolve));
      },
    });
    const finish = async (key: string) => {
      finishers.get(key)!();
      finishers.delete(key);
      await settle();
    };
    return { clock, runs, scheduler, finish };
  }

  it('runs each key at its due time on one timer', () => {
    const { clock, runs, scheduler } = setup(100);
    for (let i = 0; i < 1_000; i++) scheduler.schedule(`p${i}`, 1_000 + i);
    expect(clock.pendingTimers()).toBe(1);
    clock.advanceTo(1_499);
    expect(runs).toHaveLength(100); // the cap
    expect(runs.every((r) => r.lagMs === 0)).toBe(true);
    expect(runs.map((r) => r.key).slice(0, 3)).toEqual(['p0', 'p1', 'p2']);
    expect(clock.maxPending).toBe(1);
  });

  it('holds due runs at the concurrency cap and reports how late they start', async () => {
    const { clock, runs, scheduler, finish } = setup(2);
    scheduler.schedule('a', 100);
    scheduler.schedule('b', 100);
    scheduler.schedule('c', 100);
    clock.advanceTo(100);
    expect(runs.map((r) => r.key)).toEqual(['a', 'b']);
    expect(scheduler.running).toBe(2);
    clock.advanceTo(350);
    expect(runs).toHaveLength(2);
    await finish('a');
    expect(runs.map((r) => r.key)).toEqual(['a', 'b', 'c']);
    expect(runs[2]).toEqual({ key: 'c', due: 100, lagMs: 250 });
  });

  it('rescheduling replaces the due time, unscheduling forgets the key', () => {
    const { clock, runs, scheduler } = setup(10);
    scheduler.schedule('a', 100);
    scheduler.schedule('a', 500);
    scheduler.schedule('b', 200);
    scheduler.unschedule('b');
    clock.advanceTo(400);
    expect(runs).toHaveLength(0);
    clock.advanceTo(500);
    expect(runs.map((r) => [r.key, r.due])).toEqual([['a', 500]]);
    expect(scheduler.scheduled).toBe(0);
  });

  it('an earlier due time re-arms the timer earlier', () => {
    const { clock, runs, scheduler } = setup(10);
    scheduler.schedule('late', 10_000);
    scheduler.schedule('soon', 10);
    clock.advanceTo(10);
    expect(runs.map((r) => r.key)).toEqual(['soon']);
  });

  it('stale entries from many unschedules are compacted away', () => {
    const { scheduler } = setup(10);
    for (let i = 0; i < 1_000; i++) scheduler.schedule(`p${i}`, 1_000);
    for (let i = 0; i < 990; i++) scheduler.unschedule(`p${i}`);
    expect(scheduler.scheduled).toBe(10);
    expect((scheduler as unknown as { heap: DueHeap<string> }).heap.size).toBeLessThan(100);
  });

  it('a run that throws synchronously frees its slot', async () => {
    const clock = new ManualClock();
    let calls = 0;
    const scheduler = new Scheduler<string>({
      clock,
      maxConcurrent: 1,
      run: () => {
        calls++;
        throw new Error('boom');
      },
    });
    scheduler.schedule('a', 0);
    scheduler.schedule('b', 0);
    clock.advanceTo(0);
    await settle();
    clock.advanceTo(1);
    expect(calls).toBe(2);
    expect(scheduler.running).toBe(0);
  });

  it('stop cancels the timer and ignores later schedules', () => {
    const { clock, runs, scheduler } = setup(10);
    scheduler.schedule('a', 100);
    scheduler.stop();
    scheduler.schedule('b', 100);
    clock.advanceTo(1_000);
    expect(runs).toHaveLength(0);
    expect(clock.pendingTimers()).toBe(0);
  });
});
