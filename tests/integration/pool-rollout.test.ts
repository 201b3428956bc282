/**
 * A pool under crawler load (issue 30's first done-when): a 20-proxy pool
 * while 64 clients take and release leases all the time (each holds its
 * lease 1-4 s here, EP_POOL_LOAD_HOLD=5-30 for the issue's figure, then
 * checks its proxy with a CONNECT right before the release), through a template change, a scale 20 → 5 → 20, and the
 * pool's deletion. No lease may ever point at an address that is gone
 * before the lease ended, availability must stay above `replicas -
 * maxUnavailable` through the rollout and the scale-down, and everything
 * must be gone after the deletion. Prints the rollout's duration and the
 * most leases any draining proxy held.
 *
 * Real parts: this file's worker and bridge (local provider, real forward
 * proxies on their own loopback addresses), the real CLI `api` process
 * (lease API, prober, drain notifier), the shared apiserver and Temporal.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Proxy } from '../../resources/proxy-schema.js';
import type { ProxyPoolClient } from '../../kube/proxy-pools.js';
import type { ControlPlane } from '../helpers/control-plane.js';
import type { ProbeTarget } from '../helpers/prober-fixtures.js';
import { eventually } from '../helpers/temporal.js';
import {
  authorizationOf,
  connectThrough,
  leaseApi,
  type LeasedProxy,
  startPoolHarness,
  type PoolHarness,
} from '../helpers/pools.js';

const REPLICAS = 20;
const CLIENTS = 64;
const MAX_SURGE = 5;
const MAX_UNAVAILABLE = 2;
// How long a client holds a lease, in seconds: 1-4 in the suite (fast);
// EP_POOL_LOAD_HOLD=5-30 runs the figure by hand.
const [HOLD_MIN_S, HOLD_MAX_S] = (process.env.EP_POOL_LOAD_HOLD ?? '1-4').split('-').map(Number) as [
  number,
  number,
];

interface Broken {
  proxy: string;
  ip: string;
  heldMs: number;
  code: number;
}

describe('a ProxyPool under crawler load', () => {
  let h: PoolHarness;
  let cp: ControlPlane;
  let target: ProbeTarget;
  let apiUrl: string;
  let pools: ProxyPoolClient;

  beforeAll(async () => {
    h = await startPoolHarness('pool-load');
    ({ cp, target, apiUrl, pools } = h);
  });
  afterAll(async () => {
    await h?.close();
  });

  const members = (pool: string): Promise<Proxy[]> => h.members(pool);

  /** The pool is settled at `replicas`: every member live, current, Ready, and none on its way out. */
  const settled = (name: string, replicas: number, what: string) =>
    eventually(
      `pool ${name}: ${what}`,
      async () => {
        const s = (await pools.get(cp.namespace, name))?.status;
        const all = await members(name);
        return s?.availableReplicas === replicas &&
          s.updatedReplicas === replicas &&
          s.replicas === replicas &&
          s.drainingReplicas === 0 &&
          all.length === replicas
          ? true
          : undefined;
      },
      { timeoutMs: 240_000, intervalMs: 250 },
    );

  it(`keeps every lease working through a rollout, a scale ${REPLICAS} → 5 → ${REPLICAS} and the pool's deletion`, async () => {
    const name = 'crawl';
    const template = (generation: string) => ({
      spec: {
        mode: 'Managed' as const,
        provider: 'local',
        attributes: { generation },
        maxLeases: 4,
        // Lenient: on a loaded 2-core machine a probe can take seconds, and a
        // health flap is not what this test is about.
        healthCheck: { probeURL: target.url, intervalSeconds: 1, timeoutSeconds: 5, failureThreshold: 5 },
      },
    });
    await pools.create(cp.namespace, name, {
      replicas: REPLICAS,
      template: template('1'),
      strategy: { maxSurge: MAX_SURGE, maxUnavailable: MAX_UNAVAILABLE, drainTimeoutSeconds: 120 },
    });
    await settled(name, REPLICAS, `${REPLICAS} ready`);

    // The crawlers.
    const leases = leaseApi(apiUrl);
    const broken: Broken[] = [];
    let granted = 0;
    let denied = 0;
    let checked = 0;
    let running = true;
    const client = async (i: number): Promise<void> => {
      let seed = i + 1;
      const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
      while (running) {
        const answer = await leases.acquire({ pool: name, ttlSeconds: 120, target: `site-${i % 8}.example` });
        if (answer.status !== 201) {
          denied++;
          // A crawler with no proxy backs off a little before asking again.
          await new Promise((r) => setTimeout(r, 100 + rand() * 200));
          continue;
        }
        granted++;
        const held: LeasedProxy = answer.body.proxy;
        const started = Date.now();
        // The crawl: the lease is held for a while.
        await new Promise((r) => setTimeout(r, (HOLD_MIN_S + rand() * (HOLD_MAX_S - HOLD_MIN_S)) * 1_000));
        const code = await connectThrough(
          held.ip,
          held.port,
          target.port,
          5_000,
          authorizationOf(answer.body.proxyURL),
        );
        checked++;
        if (code !== 200) broken.push({ proxy: held.id, ip: held.ip, heldMs: Date.now() - started, code });
        await leases.release(answer.body.leaseID);
      }
    };

    // What the crawlers can get: available (leasable) proxies, and what draining ones hold.
    type Phase = 'steady' | 'rollout' | 'scale-down' | 'scale-up' | 'delete';
    let phase: Phase = 'steady';
    const minAvailable: Partial<Record<Phase, number>> = {};
    let maxDrainingLeases = 0;
    const timeline: Array<{ atMs: number; line: string }> = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const list = (await (await fetch(`${apiUrl}/v1/proxies?pool=${name}`)).json()) as {
          proxies: LeasedProxy[];
        };
        const available = list.proxies.filter((p) => p.healthy && !p.draining && p.ip !== '').length;
        minAvailable[phase] = Math.min(minAvailable[phase] ?? Infinity, available);
        const unhealthy = list.proxies.filter((p) => !p.healthy).length;
        const line = `${phase} listed ${list.proxies.length} available ${available} draining ${list.proxies.filter((p) => p.draining).length} unhealthy ${unhealthy}`;
        if (timeline.at(-1)?.line !== line) timeline.push({ atMs: Date.now(), line });
        for (const p of list.proxies)
          if (p.draining) maxDrainingLeases = Math.max(maxDrainingLeases, p.activeLeases);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();

    const clients = Array.from({ length: CLIENTS }, (_, i) => client(i));
    await eventually(
      'every client leased at least once',
      () => Promise.resolve(granted >= CLIENTS ? true : undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 100,
      },
    );

    // A template change: a rollout (surge, then drain).
    phase = 'rollout';
    const rolloutStart = Date.now();
    await pools.patchSpec(cp.namespace, name, { template: template('2') });
    await eventually(
      'every member from the new template',
      async () => {
        const all = await members(name);
        return all.length === REPLICAS && all.every((p) => p.spec.attributes?.generation === '2')
          ? true
          : undefined;
      },
      { timeoutMs: 240_000, intervalMs: 250 },
    );
    await settled(name, REPLICAS, 'rolled out');
    const rolloutSeconds = (Date.now() - rolloutStart) / 1000;

    phase = 'scale-down';
    await pools.patchSpec(cp.namespace, name, { replicas: 5 });
    await settled(name, 5, 'scaled down to 5');

    phase = 'scale-up';
    await pools.patchSpec(cp.namespace, name, { replicas: REPLICAS });
    await settled(name, REPLICAS, `scaled back up to ${REPLICAS}`);

    // Deleting the pool under load: every member and instance goes, leases still end well.
    phase = 'delete';
    await h.deletePoolAndWait(name, 240_000);

    running = false;
    await Promise.all(clients);
    watching = false;
    await watcher;
    const t0 = timeline[0]?.atMs ?? 0;
    const ok =
      broken.length === 0 &&
      (minAvailable.rollout ?? 0) >= REPLICAS - MAX_UNAVAILABLE &&
      (minAvailable['scale-down'] ?? 0) >= 5 - MAX_UNAVAILABLE;
    // The whole curve only when something is off: it is what tells a health flap from a pool bug.
    if (!ok) console.log(timeline.map((e) => `${((e.atMs - t0) / 1000).toFixed(1)}s ${e.line}`).join('\n'));
    console.log(
      `issue 30: ${REPLICAS}-proxy pool, ${CLIENTS} clients holding leases ${HOLD_MIN_S}-${HOLD_MAX_S} s: rollout ${rolloutSeconds.toFixed(1)} s; ` +
        `most leases held by a draining proxy ${maxDrainingLeases}; leases granted ${granted}, checked ${checked}, ` +
        `broken ${broken.length}, denied ${denied}; fewest available: rollout ${minAvailable.rollout}, ` +
        `scale-down ${minAvailable['scale-down']}, scale-up ${minAvailable['scale-up']}`,
    );
    expect(broken, 'leases whose proxy was gone before they ended').toEqual([]);
    expect(checked).toBeGreaterThan(CLIENTS * 2);
    expect(minAvailable.rollout).toBeGreaterThanOrEqual(REPLICAS - MAX_UNAVAILABLE);
    expect(minAvailable['scale-down']).toBeGreaterThanOrEqual(5 - MAX_UNAVAILABLE);
    // Draining proxies really held leases while they drained (else the test proved little).
    expect(maxDrainingLeases).toBeGreaterThan(0);
  }, 600_000);
});
