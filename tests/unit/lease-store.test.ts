import { describe, expect, it } from 'vitest';
import {
  MemoryLeaseStore,
  newLeaseId,
  type AcquireRequest,
  type Candidate,
  type Clock,
  type Lease,
} from '../../api/lease-store.js';

const MINUTE = 60_000;
const COOLDOWN = 15 * MINUTE;

class ManualClock implements Clock {
  constructor(private t = Date.UTC(2026, 7, 9, 12, 0, 0)) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

function setup() {
  const clock = new ManualClock();
  const store = new MemoryLeaseStore({ clock, cooldownMs: COOLDOWN });
  return { clock, store };
}

const cand = (id: string, maxLeases = 5, latencyMillis = 0): Candidate => ({ id, maxLeases, latencyMillis });

function grant(store: MemoryLeaseStore, req: AcquireRequest): Lease {
  const out = store.acquireNow(req);
  if (!out.granted) throw new Error(`expected a grant, got ${JSON.stringify(out.stats)}`);
  return out.granted;
}

const req = (candidates: Candidate[], target = '', ttlMs = MINUTE): AcquireRequest => ({
  candidates,
  target,
  ttlMs,
});

describe('capacity', () => {
  it('grants up to maxLeases, then reports the proxy at capacity; release frees a slot', () => {
    const { store } = setup();
    const r = req([cand('ns/p1', 2)]);
    const a = grant(store, r);
    const b = grant(store, r);
    expect(a.id).not.toBe(b.id);
    expect(store.activeCountsNow().get('ns/p1')).toBe(2);

    const third = store.acquireNow(r);
    expect(third.granted).toBeNull();
    expect(third.stats).toEqual({ considered: 1, inCooldown: 0, atCapacity: 1, outranked: 0 });

    store.releaseNow(a.id);
    expect(store.acquireNow(r).granted?.proxy).toBe('ns/p1');
  });

  it('treats maxLeases 0 as unleasable', () => {
    const { store } = setup();
    const out = store.acquireNow(req([cand('ns/p1', 0)]));
    expect(out.granted).toBeNull();
    expect(out.stats.atCapacity).toBe(1);
  });

  it('returns the active count including the new lease', () => {
    const { store } = setup();
    grant(store, req([cand('ns/p1')]));
    const out = store.acquireNow(req([cand('ns/p1')]));
    expect(out.granted && out.activeLeases).toBe(2);
  });

  it('rejects a non-positive TTL instead of granting a dead lease', () => {
    const { store } = setup();
    expect(() => store.acquireNow(req([cand('ns/p1')], '', 0))).toThrow(RangeError);
    expect(() => store.acquireNow(req([cand('ns/p1')], '', -5))).toThrow(RangeError);
    expect(store.activeCountsNow().size).toBe(0);
  });
});

describe('selection order', () => {
  it('prefers the least-loaded proxy over a faster busier one', () => {
    const { store } = setup();
    grant(store, req([cand('ns/a', 5, 10)]));
    const l = grant(store, req([cand('ns/a', 5, 10), cand('ns/b', 5, 90)]));
    expect(l.proxy).toBe('ns/b');
  });

  it('breaks a load tie by lower latency', () => {
    const { store } = setup();
    expect(grant(store, req([cand('ns/a', 5, 90), cand('ns/b', 5, 10)])).proxy).toBe('ns/b');
  });

  it('breaks a full tie by id, whatever the input order', () => {
    for (const order of [
      ['ns/b', 'ns/a', 'ns/c'],
      ['ns/c', 'ns/b', 'ns/a'],
    ]) {
      const { store } = setup();
      expect(grant(store, req(order.map((p) => cand(p, 5, 10)))).proxy).toBe('ns/a');
    }
  });

  it('spreads consecutive leases round the pool by load', () => {
    const { store } = setup();
    const pool = [cand('ns/a', 2, 1), cand('ns/b', 2, 2), cand('ns/c', 2, 3)];
    const picks = Array.from({ length: 6 }, () => grant(store, req(pool)).proxy);
    expect(picks).toEqual(['ns/a', 'ns/b', 'ns/c', 'ns/a', 'ns/b', 'ns/c']);
    expect(store.acquireNow(req(pool)).stats).toEqual({
      considered: 3,
      inCooldown: 0,
      atCapacity: 3,
      outranked: 0,
    });
  });
});

describe('cooldowns', () => {
  it('scopes a targeted report to that target only', async () => {
    const { store } = setup();
    const pool = [cand('ns/p1')];
    const l = grant(store, req(pool, 'example.com'));
    expect(await store.report(l.id, 'rate_limited', 'example.com')).toBe('cooldown');

    const same = store.acquireNow(req(pool, 'example.com'));
    expect(same.granted).toBeNull();
    expect(same.stats).toEqual({ considered: 1, inCooldown: 1, atCapacity: 0, outranked: 0 });
    expect(grant(store, req(pool, 'other.org')).proxy).toBe('ns/p1');
    expect(grant(store, req(pool)).proxy).toBe('ns/p1');
  });

  it('puts the proxy in a global cooldown when neither report nor lease names a target', () => {
    const { store } = setup();
    const pool = [cand('ns/p1')];
    const l = grant(store, req(pool));
    expect(store.reportNow(l.id, 'banned', '')).toBe('cooldown');
    for (const target of ['', 'example.com', 'other.org']) {
      const out = store.acquireNow(req(pool, target));
      expect(out.granted, `target ${target}`).toBeNull();
      expect(out.stats.inCooldown).toBe(1);
    }
  });

  it("falls back from the report's target to the lease's target", () => {
    const { store } = setup();
    const pool = [cand('ns/p1')];
    const l = grant(store, req(pool, 'example.com'));
    store.reportNow(l.id, 'rate_limited', '');
    expect(store.acquireNow(req(pool, 'example.com')).granted).toBeNull();
    expect(store.acquireNow(req(pool, '')).granted).not.toBeNull();
  });

  it("lets the report's target override the lease's", () => {
    const { store } = setup();
    const pool = [cand('ns/p1')];
    const l = grant(store, req(pool, 'example.com'));
    store.reportNow(l.id, 'rate_limited', 'other.org');
    expect(store.acquireNow(req(pool, 'other.org')).granted).toBeNull();
    expect(store.acquireNow(req(pool, 'example.com')).granted).not.toBeNull();
  });

  it('gives rate_limited and banned the same window, ending exactly at the cooldown', () => {
    for (const result of ['rate_limited', 'banned'] as const) {
      const { store, clock } = setup();
      const pool = [cand('ns/p1')];
      const l = grant(store, req(pool, 't'));
      store.reportNow(l.id, result, '');
      clock.advance(COOLDOWN - 1);
      expect(store.acquireNow(req(pool, 't')).granted, `${result} just before the end`).toBeNull();
      clock.advance(1);
      expect(store.acquireNow(req(pool, 't')).granted, `${result} at the end`).not.toBeNull();
    }
  });

  it('records nothing for ok', () => {
    const { store } = setup();
    const pool = [cand('ns/p1')];
    const l = grant(store, req(pool, 'example.com'));
    expect(store.reportNow(l.id, 'ok', 'example.com')).toBe('acknowledged');
    expect(store.acquireNow(req(pool, 'example.com')).granted).not.toBeNull();
  });

  it('counts a proxy that is both full and cooling down once, as in cooldown', () => {
    const { store } = setup();
    const pool = [cand('ns/p1', 1)];
    const l = grant(store, req(pool, 't'));
    store.reportNow(l.id, 'banned', 't');
    expect(store.acquireNow(req(pool, 't')).stats).toEqual({
      considered: 1,
      inCooldown: 1,
      atCapacity: 0,
      outranked: 0,
    });
  });
});

describe('expiry without a sweep', () => {
  it('frees capacity when the TTL passes', () => {
    const { store, clock } = setup();
    const r = req([cand('ns/p1', 1)]);
    grant(store, r);
    expect(store.acquireNow(r).granted).toBeNull();
    clock.advance(MINUTE - 1);
    expect(store.acquireNow(r).granted).toBeNull();
    clock.advance(1);
    expect(store.activeCountsNow().size).toBe(0);
    expect(store.acquireNow(r).granted).not.toBeNull();
  });

  it('keeps an expired lease reportable for exactly one cooldown window', () => {
    const { store, clock } = setup();
    const pool = [cand('ns/p1')];
    const l = grant(store, req(pool, 'example.com'));
    clock.advance(MINUTE + COOLDOWN);
    expect(store.reportNow(l.id, 'rate_limited', '')).toBe('cooldown');
    expect(store.acquireNow(req(pool, 'example.com')).granted).toBeNull();
    clock.advance(1);
    expect(store.reportNow(l.id, 'ok', '')).toBe('unknown_lease');
  });

  it('forgets a released lease at once, as the seed did: a later report is unknown_lease', () => {
    const { store, clock } = setup();
    const pool = [cand('ns/p1', 1)];
    const l = grant(store, req(pool, 'example.com', 60 * MINUTE));
    clock.advance(MINUTE);
    store.releaseNow(l.id);
    store.releaseNow(l.id);
    store.releaseNow('never-issued');
    expect(store.activeCountsNow().size).toBe(0);
    expect(store.retainedLeases).toBe(0);
    expect(store.reportNow(l.id, 'rate_limited', '')).toBe('unknown_lease');
    // No cooldown was recorded: the proxy is leasable for the same target.
    expect(store.acquireNow(req(pool, 'example.com')).granted).not.toBeNull();
  });

  it('forgets an expired lease on release too, ending its reporting window early', () => {
    const { store, clock } = setup();
    const l = grant(store, req([cand('ns/p1')], 'example.com'));
    clock.advance(MINUTE + 1);
    expect(store.reportNow(l.id, 'ok', '')).toBe('acknowledged');
    store.releaseNow(l.id);
    expect(store.reportNow(l.id, 'ok', '')).toBe('unknown_lease');
  });

  it('answers unknown_lease for an id never issued', () => {
    const { store } = setup();
    expect(store.reportNow('never-issued', 'banned', '')).toBe('unknown_lease');
  });
});

describe('renew', () => {
  it('extends a lease that still holds its slot, from now, keeping the slot', () => {
    const { store, clock } = setup();
    const pool = [cand('ns/p1', 1)];
    const l = grant(store, req(pool, 'example.com'));
    clock.advance(MINUTE - 1);
    const renewed = store.renewNow(l.id, 2 * MINUTE);
    expect(renewed).toEqual({ ...l, expiresAt: clock.now() + 2 * MINUTE });
    clock.advance(MINUTE);
    // Past the original end: still held, so the only slot is taken.
    expect(store.acquireNow(req(pool)).granted).toBeNull();
    expect(store.activeCountsNow().get('ns/p1')).toBe(1);
    clock.advance(MINUTE + 1);
    expect(store.acquireNow(req(pool)).granted).not.toBeNull();
  });

  it("never revives an ended, released or unknown lease (its slot may be someone else's)", () => {
    const { store, clock } = setup();
    const a = grant(store, req([cand('ns/p1', 1)]));
    clock.advance(MINUTE);
    expect(store.renewNow(a.id, MINUTE)).toBeNull();
    const b = grant(store, req([cand('ns/p1', 1)]));
    store.releaseNow(b.id);
    expect(store.renewNow(b.id, MINUTE)).toBeNull();
    expect(store.renewNow('never-issued', MINUTE)).toBeNull();
    expect(store.activeCountsNow().size).toBe(0);
  });

  it('a renewed lease is released and reported like any other', () => {
    const { store } = setup();
    const l = grant(store, req([cand('ns/p1')], 'example.com'));
    store.renewNow(l.id, MINUTE);
    expect(store.reportNow(l.id, 'rate_limited', '')).toBe('cooldown');
    store.releaseNow(l.id);
    expect(store.retainedLeases).toBe(0);
    expect(store.activeCountsNow().size).toBe(0);
  });
});

describe('sweep', () => {
  it('only forgets what is past its reporting window', () => {
    const { store, clock } = setup();
    const old = grant(store, req([cand('ns/p1')], '', MINUTE));
    const young = grant(store, req([cand('ns/p1')], '', 30 * MINUTE));
    clock.advance(MINUTE + COOLDOWN + 1);
    store.sweep();
    expect(store.retainedLeases).toBe(1);
    expect(store.reportNow(old.id, 'ok', '')).toBe('unknown_lease');
    expect(store.reportNow(young.id, 'ok', '')).toBe('acknowledged');
    expect(store.activeCountsNow().get('ns/p1')).toBe(1);
  });
});

describe('accounting', () => {
  it('always adds up: considered = inCooldown + atCapacity + outranked + granted', () => {
    // Deterministic pseudo-random workload over a small pool, so the
    // invariant is checked across many mixes of load and cooldown.
    let seed = 42;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const { store, clock } = setup();
    const pool = Array.from({ length: 12 }, (_, i) => cand(`ns/p${i}`, i % 4, i * 7));
    const targets = ['', 'a.com', 'b.com'];
    const leases: Lease[] = [];
    let grants = 0;
    let refusals = 0;
    for (let step = 0; step < 2000; step++) {
      const roll = rand();
      if (roll < 0.6) {
        const subset = pool.filter(() => rand() < 0.7);
        const out = store.acquireNow(
          req(subset, targets[Math.floor(rand() * 3)], (1 + Math.floor(rand() * 10)) * MINUTE),
        );
        const { considered, inCooldown, atCapacity, outranked } = out.stats;
        // A refusal examined every candidate; a grant may have stopped at an unbeatable one.
        if (out.granted) expect(considered).toBeLessThanOrEqual(subset.length);
        else expect(considered).toBe(subset.length);
        expect(inCooldown + atCapacity + outranked + (out.granted ? 1 : 0)).toBe(considered);
        if (out.granted) {
          grants++;
          leases.push(out.granted);
        } else {
          refusals++;
          expect(outranked).toBe(0);
        }
      } else if (roll < 0.75 && leases.length > 0) {
        const l = leases[Math.floor(rand() * leases.length)]!;
        store.reportNow(l.id, rand() < 0.5 ? 'rate_limited' : 'ok', rand() < 0.5 ? '' : targets[1]!);
      } else if (roll < 0.9 && leases.length > 0) {
        store.releaseNow(leases[Math.floor(rand() * leases.length)]!.id);
      } else {
        clock.advance(Math.floor(rand() * 3 * MINUTE));
      }
      for (const [proxy, n] of store.activeCountsNow()) {
        expect(n).toBeLessThanOrEqual(pool.find((p) => p.id === proxy)!.maxLeases);
      }
    }
    // The workload must exercise both branches, or the invariant was not tested.
    expect(grants).toBeGreaterThan(50);
    expect(refusals).toBeGreaterThan(50);
  });
});

describe('the search that stops early', () => {
  /** What a scan of every candidate picks: fewest active leases, then latency, then id. */
  function fullScan(
    candidates: readonly Candidate[],
    active: ReadonlyMap<string, number>,
  ): string | undefined {
    let best: Candidate | undefined;
    for (const c of candidates) {
      const n = active.get(c.id) ?? 0;
      if (n >= c.maxLeases) continue;
      const b = best ? (active.get(best.id) ?? 0) : Infinity;
      if (
        n < b ||
        (n === b &&
          (c.latencyMillis < best!.latencyMillis ||
            (c.latencyMillis === best!.latencyMillis && c.id < best!.id)))
      )
        best = c;
    }
    return best?.id;
  }

  it('grants what a scan of every candidate would, and reads fewer when a proxy is free', () => {
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const { store, clock } = setup();
    // Shuffled ids and repeated latencies, so the order the caller passes is not selection order.
    const pool = Array.from({ length: 40 }, (_, i) =>
      cand(`ns/p${(i * 17) % 40}`, 1 + (i % 3), (i * 13) % 5),
    );
    const leases: Lease[] = [];
    let stoppedEarly = 0;
    for (let step = 0; step < 3000; step++) {
      const roll = rand();
      if (roll < 0.6) {
        const subset = pool.filter(() => rand() < 0.8);
        const expected = fullScan(subset, store.activeCountsNow());
        const out = store.acquireNow(req(subset, '', (1 + Math.floor(rand() * 10)) * MINUTE));
        expect(out.granted ? out.candidate.id : undefined).toBe(expected);
        if (out.granted) {
          leases.push(out.granted);
          if (out.stats.considered < subset.length) stoppedEarly++;
        }
      } else if (roll < 0.9 && leases.length > 0) {
        store.releaseNow(leases.splice(Math.floor(rand() * leases.length), 1)[0]!.id);
      } else {
        clock.advance(Math.floor(rand() * 3 * MINUTE));
      }
    }
    expect(stoppedEarly).toBeGreaterThan(100);
  });

  it('a caller array that changes is sorted again', () => {
    const { store } = setup();
    const first = [cand('ns/b', 5, 10), cand('ns/a', 5, 20)];
    const lease = grant(store, req(first));
    expect(lease.proxy).toBe('ns/b');
    store.releaseNow(lease.id);
    // A new array (the catalog changed), both free again: ns/a is now the faster one.
    const second = [cand('ns/b', 5, 30), cand('ns/a', 5, 20)];
    expect(grant(store, req(second)).proxy).toBe('ns/a');
  });
});

describe('concurrency through the async interface', () => {
  it('grants exactly maxLeases out of 40 simultaneous acquires', async () => {
    const { store } = setup();
    const r = req([cand('ns/p1', 5)]);
    const outcomes = await Promise.all(Array.from({ length: 40 }, () => store.acquire(r)));
    expect(outcomes.filter((o) => o.granted).length).toBe(5);
    expect((await store.activeCounts()).get('ns/p1')).toBe(5);
  });
});

describe('lease ids', () => {
  it('are 26 base32 characters and do not repeat', () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => newLeaseId()));
    expect(ids.size).toBe(10_000);
    for (const id of [...ids].slice(0, 100)) expect(id).toMatch(/^[A-Z2-7]{26}$/);
  });
});

describe('report receipts', () => {
  it('say which proxy and target a cooldown was recorded for, and nothing for ok or unknown leases', async () => {
    const { store } = setup();
    const l = grant(store, req([cand('a')], 'own.example'));
    expect(await store.reportWithReceipt(l.id, 'banned', 'site.example')).toEqual({
      outcome: 'cooldown',
      proxy: 'a',
      target: 'site.example',
    });
    expect(await store.reportWithReceipt(l.id, 'rate_limited', '')).toEqual({
      outcome: 'cooldown',
      proxy: 'a',
      target: 'own.example',
    });
    expect(await store.reportWithReceipt(l.id, 'ok', '')).toEqual({ outcome: 'acknowledged' });
    expect(await store.reportWithReceipt('NEVERISSUED', 'banned', 'x')).toEqual({ outcome: 'unknown_lease' });
  });
});
