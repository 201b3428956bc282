/**
 * `renew` on the Redis store, with an injected clock so TTLs pass without
 * waiting: it extends a lease that still holds its slot (the slot stays
 * taken past the original end), and never revives one that ended, was
 * released or was never issued. The same cases as the memory store's unit
 * tests (tests/unit/lease-store.test.ts, "renew").
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Candidate, Clock } from '../../api/lease-store.js';
import { RedisLeaseStore } from '../../api/redis-lease-store.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';

const MINUTE = 60_000;

describe('Redis lease store: renew', () => {
  let redis: RunningRedis;
  let store: RedisLeaseStore;
  let now = Date.UTC(2026, 11, 3, 9, 0, 0);
  const clock: Clock = { now: () => now };
  const solo: Candidate[] = [{ id: 'ns/solo', uid: 'uid-solo', maxLeases: 1, latencyMillis: 1 }];

  beforeAll(async () => {
    redis = await startRedis();
    store = new RedisLeaseStore({ url: redis.url, logger: pino({ level: 'silent' }), clock });
    await store.connect();
  });
  afterAll(async () => {
    await store?.close();
    await redis?.stop();
  });

  it('extends a held lease from now, keeping its slot past the original end', async () => {
    const first = await store.acquire({ candidates: solo, target: 'example.com', ttlMs: MINUTE });
    const lease = first.granted!;
    now += MINUTE - 1;
    const renewed = await store.renew(lease.id, 2 * MINUTE);
    expect(renewed).toEqual({
      id: lease.id,
      proxy: 'uid-solo',
      target: 'example.com',
      expiresAt: now + 2 * MINUTE,
    });
    now += MINUTE;
    expect((await store.acquire({ candidates: solo, target: '', ttlMs: MINUTE })).granted).toBeNull();
    expect((await store.activeCounts()).get('uid-solo')).toBe(1);
    // Reported and released like any lease.
    expect(await store.report(lease.id, 'ok', '')).toBe('acknowledged');
    await store.release(lease.id);
    expect((await store.activeCounts()).size).toBe(0);
  });

  it('never revives an ended, released or unknown lease', async () => {
    const ended = (await store.acquire({ candidates: solo, target: '', ttlMs: MINUTE })).granted!;
    now += MINUTE;
    expect(await store.renew(ended.id, MINUTE)).toBeNull();
    const released = (await store.acquire({ candidates: solo, target: '', ttlMs: MINUTE })).granted!;
    await store.release(released.id);
    expect(await store.renew(released.id, MINUTE)).toBeNull();
    expect(await store.renew('NEVERISSUED', MINUTE)).toBeNull();
    expect((await store.activeCounts()).size).toBe(0);
  });
});

describe('Redis lease store: report receipts', () => {
  let redis: RunningRedis;
  let store: RedisLeaseStore;
  const solo: Candidate[] = [{ id: 'ns/solo', uid: 'uid-solo', maxLeases: 2, latencyMillis: 1 }];

  beforeAll(async () => {
    redis = await startRedis();
    store = new RedisLeaseStore({ url: redis.url, logger: pino({ level: 'silent' }) });
    await store.connect();
  });
  afterAll(async () => {
    await store?.close();
    await redis?.stop();
  });

  it('says which proxy and target a cooldown was recorded for (the pools’ ban tally), and nothing else', async () => {
    const lease = (await store.acquire({ candidates: solo, target: 'own.example', ttlMs: MINUTE })).granted!;
    expect(await store.reportWithReceipt(lease.id, 'banned', 'site.example')).toEqual({
      outcome: 'cooldown',
      proxy: 'uid-solo',
      target: 'site.example',
    });
    // An empty target falls back to the lease's own.
    expect(await store.reportWithReceipt(lease.id, 'banned', '')).toEqual({
      outcome: 'cooldown',
      proxy: 'uid-solo',
      target: 'own.example',
    });
    expect(await store.reportWithReceipt(lease.id, 'ok', '')).toEqual({ outcome: 'acknowledged' });
    expect(await store.reportWithReceipt('NEVERISSUED', 'banned', 'x')).toEqual({ outcome: 'unknown_lease' });
  });
});
