/**
 * The Redis store's registered candidate lists: each replica writes its
 * candidate list to Redis once per catalog change and sends only its digest
 * with an acquire. Two replicas whose catalogs differ for a moment share
 * capacity correctly; a list Redis lost (flush, restart, expiry) is
 * registered again by the next acquire; a replica's previous list is
 * dropped when its catalog changes.
 */
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Candidate } from '../../api/lease-store.js';
import { DEFAULT_REDIS_PREFIX, RedisLeaseStore } from '../../api/redis-lease-store.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';

function cand(name: string, latencyMillis: number, maxLeases = 1): Candidate {
  return { id: `ns/${name}`, uid: `uid-${name}`, maxLeases, latencyMillis };
}

describe('Redis lease store: registered candidate lists', () => {
  let redis: RunningRedis;
  let admin: Redis;
  const open: RedisLeaseStore[] = [];
  beforeAll(async () => {
    redis = await startRedis();
    admin = new Redis(redis.url, { lazyConnect: true });
    await admin.connect();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((s) => s.close()));
    await admin.flushall();
  });
  afterAll(async () => {
    admin?.disconnect();
    await redis?.stop();
  });

  async function store(): Promise<RedisLeaseStore> {
    const s = new RedisLeaseStore({ url: redis.url, logger: pino({ level: 'silent' }) });
    await s.connect();
    open.push(s);
    return s;
  }

  const lists = () => admin.keys(`${DEFAULT_REDIS_PREFIX}cands:*`);

  it('two replicas with different catalogs at the same moment share every slot', async () => {
    const a = await store();
    const b = await store();
    // A knows p1 and p2; B knows p2 (as the fastest) and p3, and thinks p2 takes 2 leases.
    const listA = [cand('p1', 5), cand('p2', 9)];
    const listB = [cand('p3', 20), cand('p2', 1, 2)];

    const first = await a.acquire({ candidates: listA, target: 't', ttlMs: 60_000 });
    expect(first.granted?.proxy).toBe('uid-p1');
    const second = await a.acquire({ candidates: listA, target: 't', ttlMs: 60_000 });
    expect(second.granted?.proxy).toBe('uid-p2');
    // p2 holds one lease from A: B sees it, and p3 (no lease) wins.
    const third = await b.acquire({ candidates: listB, target: 't', ttlMs: 60_000 });
    expect(third.granted?.proxy).toBe('uid-p3');
    // With B's view of p2's capacity, p2 takes a second lease.
    const fourth = await b.acquire({ candidates: listB, target: 't', ttlMs: 60_000 });
    expect(fourth.granted?.proxy).toBe('uid-p2');
    expect(fourth.granted ? fourth.activeLeases : 0).toBe(2);
    // B is full; so is A (its view of p2 is maxLeases 1).
    const full = await b.acquire({ candidates: listB, target: 't', ttlMs: 60_000 });
    expect(full).toEqual({
      granted: null,
      stats: { considered: 2, inCooldown: 0, atCapacity: 2, outranked: 0 },
    });
    const fullA = await a.acquire({ candidates: listA, target: 't', ttlMs: 60_000 });
    expect(fullA.granted).toBeNull();
    expect(Object.fromEntries(await a.activeCounts())).toEqual({ 'uid-p1': 1, 'uid-p2': 2, 'uid-p3': 1 });
    expect(await lists()).toHaveLength(2);
  });

  it('registers a list again when Redis has lost it, and grants as before', async () => {
    const a = await store();
    const list = [cand('p1', 5), cand('p2', 9)];
    expect((await a.acquire({ candidates: list, target: 't', ttlMs: 60_000 })).granted?.proxy).toBe('uid-p1');
    expect(await lists()).toHaveLength(1);

    await admin.flushall();
    expect(await lists()).toHaveLength(0);
    // The flush also forgot the lease: p1 is free again, and the list is back.
    expect((await a.acquire({ candidates: list, target: 't', ttlMs: 60_000 })).granted?.proxy).toBe('uid-p1');
    expect(await lists()).toHaveLength(1);

    // Only the list gone (expired, evicted): the lease on p1 still counts.
    await admin.del(...(await lists()));
    expect((await a.acquire({ candidates: list, target: 't', ttlMs: 60_000 })).granted?.proxy).toBe('uid-p2');
    expect(Object.fromEntries(await a.activeCounts())).toEqual({ 'uid-p1': 1, 'uid-p2': 1 });
  });

  it("drops the replica's previous list when its catalog changes, and the new one decides", async () => {
    const a = await store();
    const v1 = [cand('p1', 5), cand('p2', 9)];
    expect((await a.acquire({ candidates: v1, target: 't', ttlMs: 60_000 })).granted?.proxy).toBe('uid-p1');
    const [before] = await lists();

    // New probe figures: p2 is now the faster one.
    const v2 = [cand('p1', 50), cand('p2', 9)];
    expect((await a.acquire({ candidates: v2, target: 't', ttlMs: 60_000 })).granted?.proxy).toBe('uid-p2');
    const after = await lists();
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before);
    // The registered list holds (uid, maxLeases) pairs, fastest first, and a lifetime.
    expect(await admin.lrange(after[0]!, 0, -1)).toEqual(['uid-p2', '1', 'uid-p1', '1']);
    expect(await admin.pttl(after[0]!)).toBeGreaterThan(0);

    // The same catalog in a new array (a relist) sends the same digest: nothing new is written.
    const v2again = v2.map((c) => ({ ...c }));
    expect((await a.acquire({ candidates: v2again, target: 't', ttlMs: 60_000 })).granted).toBeNull();
    expect(await lists()).toEqual(after);
  });

  it('concurrent callers with different lists in one replica are all served; a sequential change still drops the old list', async () => {
    // The gateway's selectors and sessions make different candidate lists at
    // once (aad8c71: a list stays while an acquire of this replica uses it).
    const a = await store();
    const catalogs = [
      [cand('p1', 5, 1000), cand('p2', 9, 1000)],
      [cand('p3', 5, 1000), cand('p4', 9, 1000)],
      [cand('p5', 5, 1000)],
    ];
    // Each caller acquires again as soon as its last acquire answered.
    const failed: string[] = [];
    let granted = 0;
    const caller = async (candidates: Candidate[]) => {
      for (let i = 0; i < 60; i++) {
        try {
          if ((await a.acquire({ candidates, target: 't', ttlMs: 60_000 })).granted) granted++;
        } catch (err) {
          failed.push(String(err));
        }
      }
    };
    await Promise.all(catalogs.map(caller));
    expect(failed, failed.slice(0, 3).join('; ')).toEqual([]);
    expect(granted).toBe(60 * catalogs.length);
    // Sequential use still drops the list used before: p7's replaces p6's.
    await a.acquire({ candidates: [cand('p6', 1)], target: 't', ttlMs: 60_000 });
    const withP6 = (await lists()).length;
    await a.acquire({ candidates: [cand('p7', 1)], target: 't', ttlMs: 60_000 });
    expect((await lists()).length).toBe(withP6);
  });

  it('an empty candidate list answers no match without registering anything', async () => {
    const a = await store();
    expect(await a.acquire({ candidates: [], target: 't', ttlMs: 60_000 })).toEqual({
      granted: null,
      stats: { considered: 0, inCooldown: 0, atCapacity: 0, outranked: 0 },
    });
    expect(await lists()).toHaveLength(0);
  });
});
