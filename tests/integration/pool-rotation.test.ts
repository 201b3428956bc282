/**
 * ProxyPool rotation (issue 31) on the real servers: this file's worker and
 * bridge (a `local` provider of its own name, real forward proxies), the
 * real CLI `api` process (lease API, demand and ban reports), the shared
 * apiserver and Temporal dev server.
 *
 * - Three `banned` reports from three targets on one member replace it (a
 *   new member, a new address); two on another change nothing.
 * - `maxAgeSeconds` replaces every member again and again, never with more
 *   than replicas + maxSurge members live nor fewer than replicas -
 *   maxUnavailable available.
 * - A provider outage (its state directory gone, its ProviderHealth Ready
 *   False from the real provider-checks round) pauses rotation with a
 *   condition saying so; rotation resumes once the provider is back.
 */
import { randomBytes } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds } from '../../cli/schedules.js';
import type { Proxy, ProxyPool } from '../../resources/proxy-schema.js';
import { poolWorkflowId } from '../../workflows/pool/ids.js';
import { poolStateQuery } from '../../workflows/pool/messages.js';
import { kubectl, proxyCondition, providerHealthClient } from '../helpers/kube.js';
import { startPoolHarness, type PoolHarness } from '../helpers/pools.js';
import { eventually, maybeRecord } from '../helpers/temporal.js';

const suffix = randomBytes(3).toString('hex');
const PROVIDER = `rot-${suffix}`;
const SCHEDULES = `rot-${suffix}`;

describe('ProxyPool rotation', () => {
  let h: PoolHarness;
  let stateDir: string;

  beforeAll(async () => {
    h = await startPoolHarness('pool-rotation', {
      apiArgs: ['--pool-demand-interval', '500ms'],
      poolTiming: { progressPollMs: 1_000 },
      installation: `rot-${suffix}`,
      provider: PROVIDER,
      providersYaml: (stateRoot, range) => {
        stateDir = join(stateRoot, 'rot');
        return `providers:\n  - name: ${PROVIDER}\n    type: local\n    local:\n      stateDir: ${stateDir}\n      addressRange: ${range}\n`;
      },
    });
  });
  afterAll(async () => {
    for (const id of Object.values(scheduleIds(SCHEDULES))) {
      await h?.cp.client.schedule
        .getHandle(id)
        .delete()
        .catch(() => undefined);
    }
    await providerHealthClient(h.cp.kc)
      .get(PROVIDER)
      .then((ph) => (ph ? providerHealthClient(h.cp.kc).delete(ph) : undefined))
      .catch(() => undefined);
    await h?.close();
  });

  const template = () => ({
    spec: {
      mode: 'Managed' as const,
      provider: PROVIDER,
      maxLeases: 5,
      healthCheck: { probeURL: h.target.url, intervalSeconds: 1, timeoutSeconds: 2 },
    },
  });

  const pool = async (name: string): Promise<ProxyPool | undefined> => h.pools.get(h.cp.namespace, name);
  const live = async (name: string): Promise<Proxy[]> =>
    (await h.members(name)).filter((m) => !m.metadata.deletionTimestamp);
  const isAvailable = (m: Proxy) =>
    !m.metadata.deletionTimestamp &&
    proxyCondition(m, 'Ready')?.status === 'True' &&
    proxyCondition(m, 'Draining')?.status !== 'True';
  const available = async (name: string, n: number): Promise<Proxy[]> =>
    eventually(
      `pool ${name}: ${n} available`,
      async () => {
        const s = (await pool(name))?.status;
        const members = await live(name);
        return s?.availableReplicas === n && members.length === n && members.every(isAvailable)
          ? members
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  /** Deletes the pool, waits for its workflow to end, and returns its history (for the replay guard). */
  const deleteAndFetchHistory = async (name: string) => {
    const uid = (await pool(name))!.metadata.uid!;
    await h.deletePoolAndWait(name, 60_000);
    const handle = h.cp.client.workflow.getHandle(poolWorkflowId({ namespace: h.cp.namespace, name, uid }));
    await handle.result();
    return handle.fetchHistory();
  };
  const rotatedEvents = async (name: string): Promise<string> =>
    kubectl([
      '-n',
      h.cp.namespace,
      'get',
      'events',
      '--field-selector',
      `involvedObject.kind=ProxyPool,involvedObject.name=${name},reason=Rotated`,
      '-o',
      'jsonpath={range .items[*]}{.message}{"\\n"}{end}',
    ]);

  it('replaces a member after three ban reports from three targets, with a new address; two reports change nothing', async () => {
    const name = 'banned';
    await h.pools.create(h.cp.namespace, name, {
      replicas: 2,
      template: template(),
      rotation: { afterBans: { reports: 3, distinctTargets: 3, windowSeconds: 600 } },
    });
    const before = await available(name, 2);
    const api = `${h.apiUrl}/v1/leases`;
    const lease = async () => {
      const res = await fetch(api, { method: 'POST', body: JSON.stringify({ pool: name, ttlSeconds: 60 }) });
      expect(res.status).toBe(201);
      return (await res.json()) as { leaseID: string; proxy: { id: string; ip: string } };
    };
    const report = async (leaseID: string, target: string) => {
      const res = await fetch(`${api}/${leaseID}/report`, {
        method: 'POST',
        body: JSON.stringify({ result: 'banned', target }),
      });
      expect(res.status).toBe(204);
    };
    // The least-loaded rule puts two leases on two members.
    const first = await lease();
    const second = await lease();
    expect(second.proxy.id).not.toBe(first.proxy.id);
    const [burnt, spared] = [first, second];
    // Below the threshold first (two reports), then three targets on the other.
    await report(spared.leaseID, 'a.example');
    await report(spared.leaseID, 'b.example');
    for (const t of ['a.example', 'b.example', 'c.example']) await report(burnt.leaseID, t);
    for (const l of [burnt, spared]) await fetch(`${api}/${l.leaseID}`, { method: 'DELETE' });

    const burntName = burnt.proxy.id.split('/')[1]!;
    const burntUid = before.find((m) => m.metadata.name === burntName)!.metadata.uid!;
    const after = await eventually(
      'the banned member replaced',
      async () => {
        const members = await live(name);
        const s = (await pool(name))?.status;
        return s?.rotation?.rotatedTotal === 1 &&
          members.length === 2 &&
          members.every(isAvailable) &&
          !members.some((m) => m.metadata.uid === burntUid)
          ? { members, status: s }
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(after.status.rotation).toMatchObject({ lastRotated: burntName, lastRotationReason: 'Banned' });
    // The other member, with its two reports (sent before the three), is still there.
    const sparedName = spared.proxy.id.split('/')[1]!;
    const sparedUid = before.find((m) => m.metadata.name === sparedName)!.metadata.uid;
    expect(after.members.map((m) => m.metadata.uid)).toContain(sparedUid);
    const replacement = after.members.find((m) => m.metadata.uid !== sparedUid)!;
    expect(replacement.status?.ip).toBeTruthy();
    expect(replacement.status?.ip).not.toBe(burnt.proxy.ip);
    const notes = await eventually('a Rotated Event', async () => {
      const out = await rotatedEvents(name);
      return out.includes(burntName) ? out : undefined;
    });
    expect(notes).toContain('(Banned)');
    expect(notes).not.toContain(sparedName);
    maybeRecord('pool-rotate-banned', await deleteAndFetchHistory(name));
  });

  it('replaces every member past maxAgeSeconds, within maxSurge and never below replicas available', async () => {
    const name = 'aging';
    await h.pools.create(h.cp.namespace, name, {
      replicas: 3,
      template: template(),
      strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 },
      rotation: { maxAgeSeconds: 10 },
    });
    const first = await available(name, 3);
    const seen = new Set(first.map((m) => m.metadata.uid));
    let maxLive = 0;
    let minAvailable = Number.POSITIVE_INFINITY;
    const until = Date.now() + 32_000;
    while (Date.now() < until) {
      const members = await h.members(name);
      const alive = members.filter((m) => !m.metadata.deletionTimestamp);
      maxLive = Math.max(maxLive, alive.length);
      minAvailable = Math.min(minAvailable, alive.filter(isAvailable).length);
      for (const m of alive) seen.add(m.metadata.uid);
      await new Promise((r) => setTimeout(r, 200));
    }
    const status = (await pool(name))?.status;
    console.log(
      `maxAge 10 s on 3 members for 32 s: ${status?.rotation?.rotatedTotal} rotations, ${seen.size} members seen, at most ${maxLive} live, at least ${minAvailable} available`,
    );
    // Three lineages over ~3 ages each: at least two replacements per original member.
    expect(status?.rotation?.rotatedTotal).toBeGreaterThanOrEqual(6);
    expect(status?.rotation?.lastRotationReason).toBe('MaxAge');
    expect(status?.rotation?.nextRotationTime).toBeTruthy();
    expect(seen.size).toBeGreaterThanOrEqual(9);
    expect(maxLive).toBeLessThanOrEqual(4);
    expect(minAvailable).toBeGreaterThanOrEqual(3);
    await h.deletePoolAndWait(name, 60_000);
  });

  it('pauses rotation while the provider is not ready, with a condition saying so, and resumes after', async () => {
    const name = 'paused';
    const checks = await ensureSchedules(h.cp.client, {
      taskQueue: h.cp.taskQueue,
      idPrefix: SCHEDULES,
      gc: { intervalMs: 0 },
      // An hour: rounds are triggered by hand.
      providerChecks: { intervalMs: 3_600_000, timeoutMs: 5_000 },
    });
    expect(checks.providerChecks).toBe('created');
    const health = providerHealthClient(h.cp.kc);
    /**
     * Rounds, triggered by hand, until ProviderHealth says `ready`: one round
     * may still see the provider as it was (its calls paused by the circuit
     * after the outage's failures), the next ones see it as it is.
     */
    const checkRound = async (ready: 'True' | 'False') => {
      const schedule = h.cp.client.schedule.getHandle(scheduleIds(SCHEDULES).providerChecks);
      let triggeredAt = 0;
      await eventually(
        `ProviderHealth ${PROVIDER} Ready ${ready}`,
        async () => {
          const ph = await health.get(PROVIDER);
          if (ph?.status?.conditions?.find((c) => c.type === 'Ready')?.status === ready) return true;
          if (Date.now() - triggeredAt >= 2_000) {
            triggeredAt = Date.now();
            await schedule.trigger();
          }
          return undefined;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      );
    };
    await checkRound('True');
    await h.pools.create(h.cp.namespace, name, {
      replicas: 2,
      template: template(),
      rotation: { maxAgeSeconds: 15 },
    });
    const originals = await available(name, 2);
    const dueBy = Math.max(...originals.map((m) => Date.parse(m.metadata.creationTimestamp!))) + 15_000;

    // The outage: the provider's state directory is gone (a file stands in its way).
    renameSync(stateDir, `${stateDir}.away`);
    writeFileSync(stateDir, 'not a directory\n');
    try {
      await checkRound('False');
      const condition = await eventually(
        'ProviderReady False on the pool',
        async () => {
          const c = (await pool(name))?.status?.conditions?.find((x) => x.type === 'ProviderReady');
          return c?.status === 'False' ? c : undefined;
        },
        { timeoutMs: 40_000, intervalMs: 250 },
      );
      expect(condition.reason).toBe('ProviderNotReady');
      expect(condition.message).toContain('rotation and scale-up paused');
      expect(condition.message).toContain(PROVIDER);
      // Every member is past due, and the pool has looked twice since: still nothing rotated.
      const handle = h.cp.client.workflow.getHandle(
        poolWorkflowId({
          namespace: h.cp.namespace,
          name,
          uid: (await pool(name))!.metadata.uid!,
        }),
      );
      // The pool has looked at its members after every one of them fell due (and again since).
      const looked = await eventually(
        'a look after the members fell due',
        async () => {
          const view = await handle.query(poolStateQuery);
          return (view.lastLookMs ?? 0) > dueBy ? view.looks : undefined;
        },
        { timeoutMs: 40_000, intervalMs: 250 },
      );
      await eventually(
        'one more look while paused',
        async () => ((await handle.query(poolStateQuery)).looks > looked ? true : undefined),
        { timeoutMs: 20_000, intervalMs: 250 },
      );
      expect((await pool(name))?.status?.rotation?.rotatedTotal ?? 0).toBe(0);
      expect((await live(name)).map((m) => m.metadata.uid).sort()).toEqual(
        originals.map((m) => m.metadata.uid).sort(),
      );
    } finally {
      rmSync(stateDir, { force: true });
      renameSync(`${stateDir}.away`, stateDir);
    }
    await checkRound('True');
    const resumed = await eventually(
      'rotation resumed: both originals replaced',
      async () => {
        const s = (await pool(name))?.status;
        const members = await live(name);
        const ready = s?.conditions?.find((c) => c.type === 'ProviderReady')?.status === 'True';
        return ready &&
          (s?.rotation?.rotatedTotal ?? 0) >= 2 &&
          members.length === 2 &&
          members.every(isAvailable) &&
          !members.some((m) => originals.some((o) => o.metadata.uid === m.metadata.uid))
          ? s
          : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    expect(resumed?.rotation?.lastRotationReason).toBe('MaxAge');
    maybeRecord('pool-rotation-paused-resumed', await deleteAndFetchHistory(name));
  });
});
