/**
 * Probe scheduling: each proxy on its own interval, spread by jitter, all of
 * them held in one binary min-heap ordered by due time and driven by a
 * single timer (thousands of setIntervals would each cost a timer and would
 * fire in lockstep after a restart). A cap on concurrent probes keeps a
 * slow fleet from opening thousands of sockets at once; when the cap is
 * reached, due probes wait in the heap and their start lag (start − due)
 * is reported, so falling behind is measurable rather than silent.
 */
import type { Clock, Random, TimerHandle } from './clock.js';

/** Relative jitter applied to every period: ±10 %. */
export const PERIOD_JITTER = 0.1;

/** A period of `intervalMs` ± `spread`, so proxies that start together drift apart. */
export function jitteredPeriod(intervalMs: number, random: Random, spread = PERIOD_JITTER): number {
  return intervalMs * (1 - spread + 2 * spread * random());
}

/** The first probe of a proxy whose verdict was seeded: anywhere within one interval. */
export function seededFirstDelay(intervalMs: number, random: Random): number {
  return intervalMs * random();
}

/**
 * The due time after a probe that was due at `due`. Periods count from the
 * due time, not from completion, so probe duration does not stretch the
 * interval. A proxy that missed a whole period (an overloaded prober) is not
 * made to catch up in a burst: it is placed a random part of a period
 * ahead, which keeps the fleet spread; `skipped` says that happened.
 */
export function nextDue(
  due: number,
  now: number,
  intervalMs: number,
  random: Random,
): { due: number; skipped: boolean } {
  const next = due + jitteredPeriod(intervalMs, random);
  if (next > now) return { due: next, skipped: false };
  return { due: now + intervalMs * random(), skipped: true };
}

interface HeapEntry<K> {
  due: number;
  key: K;
  /** Entries whose token no longer matches the key's current token are stale and skipped. */
  token: number;
}

/** Earlier due first; among equal due times, first scheduled first (tokens only grow). */
function before<K>(a: HeapEntry<K>, b: HeapEntry<K>): boolean {
  return a.due < b.due || (a.due === b.due && a.token < b.token);
}

/** A binary min-heap on (due, token). */
export class DueHeap<K> {
  private readonly items: HeapEntry<K>[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): HeapEntry<K> | undefined {
    return this.items[0];
  }

  push(entry: HeapEntry<K>): void {
    const items = this.items;
    items.push(entry);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(entry, items[parent]!)) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = entry;
  }

  pop(): HeapEntry<K> | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let i = 0;
    const n = items.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const child = r < n && before(items[r]!, items[l]!) ? r : l;
      if (!before(items[child]!, last)) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = last;
    return top;
  }

  clear(): void {
    this.items.length = 0;
  }
}

export interface ScheduledRun<K> {
  key: K;
  due: number;
  /** now − due when the run started, ≥ 0. */
  lagMs: number;
}

export interface SchedulerOptions<K> {
  clock: Clock;
  maxConcurrent: number;
  /** Starts one run; the scheduler counts it in flight until the promise settles. */
  run: (run: ScheduledRun<K>) => Promise<void>;
}

/**
 * Holds one due time per key. `schedule` replaces a key's due time;
 * `unschedule` forgets it. A key is never run twice concurrently: a key
 * whose run is in flight is scheduled again by the caller when it is done.
 */
export class Scheduler<K> {
  private readonly heap = new DueHeap<K>();
  private readonly tokens = new Map<K, number>();
  private nextToken = 1;
  private timer: TimerHandle | undefined;
  private timerDue = Infinity;
  private inFlight = 0;
  private stopped = false;

  constructor(private readonly opts: SchedulerOptions<K>) {}

  get running(): number {
    return this.inFlight;
  }

  /** Keys with a pending due time. */
  get scheduled(): number {
    return this.tokens.size;
  }

  schedule(key: K, due: number): void {
    if (this.stopped) return;
    const token = this.nextToken++;
    this.tokens.set(key, token);
    this.heap.push({ due, key, token });
    this.pump();
  }

  unschedule(key: K): void {
    this.tokens.delete(key);
    // The heap entry stays until it surfaces and is skipped as stale; drop
    // stale entries wholesale when they outnumber live ones.
    if (this.heap.size > 64 && this.heap.size > 2 * this.tokens.size) this.compact();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.heap.clear();
    this.tokens.clear();
  }

  private compact(): void {
    const live: HeapEntry<K>[] = [];
    for (let e = this.heap.pop(); e !== undefined; e = this.heap.pop()) {
      if (this.tokens.get(e.key) === e.token) live.push(e);
    }
    for (const e of live) this.heap.push(e);
  }

  /** Starts every due run the concurrency cap allows, then arms the timer for the next due time. */
  private pump(): void {
    if (this.stopped) return;
    const now = this.opts.clock.now();
    while (this.inFlight < this.opts.maxConcurrent) {
      const top = this.heap.peek();
      if (top === undefined || top.due > now) break;
      this.heap.pop();
      if (this.tokens.get(top.key) !== top.token) continue;
      this.tokens.delete(top.key);
      this.inFlight++;
      let settled: Promise<void>;
      try {
        settled = this.opts.run({ key: top.key, due: top.due, lagMs: Math.max(0, now - top.due) });
      } catch (error) {
        settled = Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
      settled
        .catch(() => undefined)
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
    this.arm();
  }

  private arm(): void {
    // Skip stale entries at the top so the timer is armed for a live one.
    for (
      let top = this.heap.peek();
      top !== undefined && this.tokens.get(top.key) !== top.token;
      top = this.heap.peek()
    ) {
      this.heap.pop();
    }
    const top = this.heap.peek();
    // At the cap, completions pump; no timer is needed until then.
    if (top === undefined || this.inFlight >= this.opts.maxConcurrent) {
      this.timer?.cancel();
      this.timer = undefined;
      this.timerDue = Infinity;
      return;
    }
    if (this.timer !== undefined && this.timerDue <= top.due) return;
    this.timer?.cancel();
    this.timerDue = top.due;
    this.timer = this.opts.clock.setTimer(() => {
      this.timer = undefined;
      this.timerDue = Infinity;
      this.pump();
    }, top.due - this.opts.clock.now());
  }
}
