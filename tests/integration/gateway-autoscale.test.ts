/**
 * A ProxyPool fed only through the gateway (issue 56): crawlers hold CONNECT
 * tunnels through an `egress-proxies gateway` process; the `api` process
 * (which sends the pools their demand) sees those leases through the Redis
 * store both share, so the pool grows while the tunnels are held and shrinks
 * back when they close. Real parts: this file's worker and bridge (local
 * provider, real forward proxies), the CLI `api` and `gateway` processes,
 * Debian's redis-server, the shared apiserver and Temporal dev server.
 */
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { startPoolHarness, type PoolHarness } from '../helpers/pools.js';
import { eventually } from '../helpers/temporal.js';
import { gatewayConnect, startGatewayCli } from './gateway-helpers.js';

const TOKEN = 'gateway-autoscale-token';

const tunnel = (gatewayUrl: string, user: string, authority: string) =>
  gatewayConnect(gatewayUrl, authority, { credentials: `${user}:${TOKEN}` }).then((t) => {
    if (t.status !== 200) t.socket.destroy();
    return t;
  });

describe('a ProxyPool fed only through the gateway', () => {
  let redis: RunningRedis;
  let h: PoolHarness;
  let gateway: Awaited<ReturnType<typeof startGatewayCli>>;

  beforeAll(async () => {
    redis = await startRedis();
    h = await startPoolHarness('gateway-autoscale', {
      apiArgs: ['--pool-demand-interval', '500ms', '--lease-store', redis.url],
      poolTiming: { progressPollMs: 2_000 },
    });
    gateway = await startGatewayCli(h.cp.namespace, ['--lease-store', redis.url], { DISCOVERY_TOKEN: TOKEN });
  }, 300_000);

  afterAll(async () => {
    await gateway?.cli.stop();
    await h?.close();
    await redis?.stop();
  });

  it(
    'grows while tunnels are held and shrinks back to its minimum when they close',
    { timeout: 300_000 },
    async () => {
      const { cp, pools, target } = h;
      const name = 'gw';
      await pools.create(cp.namespace, name, {
        replicas: 1,
        template: {
          spec: {
            mode: 'Managed',
            provider: 'local',
            maxLeases: 2,
            healthCheck: { probeURL: target.url, intervalSeconds: 1, timeoutSeconds: 2 },
          },
        },
        strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 },
        autoscaling: {
          minReplicas: 1,
          maxReplicas: 6,
          targetUtilization: 0.8,
          scaleUpStabilizationSeconds: 2,
          scaleDownStabilizationSeconds: 4,
        },
      });
      const status = async () => (await pools.get(cp.namespace, name))?.status;
      await eventually(
        'pool gw: 1 available',
        async () => ((await status())?.availableReplicas === 1 ? true : undefined),
        {
          timeoutMs: 60_000,
          intervalMs: 250,
        },
      );

      // Six crawlers each hold a tunnel; a refused one (every member full) retries, as a crawler would.
      const held: Socket[] = [];
      const wanted = 6;
      let refused = 0;
      try {
        await eventually(
          `${wanted} tunnels held through the gateway`,
          async () => {
            while (held.length < wanted) {
              const t = await tunnel(gateway.url, `pool-${name}`, `127.0.0.1:${target.port}`);
              if (t.status !== 200) {
                refused++;
                return undefined;
              }
              held.push(t.socket);
            }
            return true;
          },
          { timeoutMs: 150_000, intervalMs: 250 },
        );
        // Six leases at two a member and 80 %: four members at least.
        const grown = await eventually(
          'pool gw: grown for the held tunnels',
          async () => {
            const s = await status();
            return (s?.desiredReplicas ?? 0) >= 4 && (s?.readyReplicas ?? 0) >= 3 ? s : undefined;
          },
          { timeoutMs: 60_000, intervalMs: 250 },
        );
        console.log(
          `gateway-fed pool: ${wanted} tunnels held (${refused} refusals on the way), desired ${grown.desiredReplicas}, ready ${grown.readyReplicas}`,
        );
        expect(grown.desiredReplicas).toBeLessThanOrEqual(6);
      } finally {
        for (const s of held) s.destroy();
      }
      await eventually(
        'pool gw: back to 1 member',
        async () =>
          (await status())?.desiredReplicas === 1 && (await h.members(name)).length === 1 ? true : undefined,
        { timeoutMs: 120_000, intervalMs: 500 },
      );
      await h.deletePoolAndWait(name, 90_000);
    },
  );

  it(
    'bans reported by session reach the pool through the shared store, and rotation replaces that member',
    { timeout: 300_000 },
    async () => {
      const { cp, pools, target } = h;
      const name = 'gwban';
      await pools.create(cp.namespace, name, {
        replicas: 2,
        template: {
          spec: {
            mode: 'Managed',
            provider: 'local',
            maxLeases: 5,
            healthCheck: { probeURL: target.url, intervalSeconds: 1, timeoutSeconds: 2 },
          },
        },
        rotation: { afterBans: { reports: 2, distinctTargets: 2, windowSeconds: 600 } },
      });
      await eventually(
        'pool gwban: 2 available',
        async () =>
          (await pools.get(cp.namespace, name))?.status?.availableReplicas === 2 ? true : undefined,
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      const authority = `127.0.0.1:${target.port}`;
      const report = async (session: string, site: string) => {
        const res = await fetch(`${gateway.url}/v1/gateway/sessions/${session}/report`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ reason: 'banned', target: site }),
        });
        expect(res.status).toBe(204);
      };
      const held: Socket[] = [];
      let banned = '';
      try {
        const first = await tunnel(gateway.url, `session-b1_pool-${name}`, authority);
        expect(first.status).toBe(200);
        banned = first.proxy;
        held.push(first.socket);
        await report('b1', 'one.example');
        // A second session on the same member: while the other member holds more, least-loaded picks this one.
        for (let i = 2; ; i++) {
          const next = await tunnel(gateway.url, `session-b${i}_pool-${name}`, authority);
          expect(next.status).toBe(200);
          held.push(next.socket);
          if (next.proxy === banned) {
            await report(`b${i}`, 'two.example');
            break;
          }
          expect(i).toBeLessThan(5);
        }
      } finally {
        for (const s of held) s.destroy();
      }
      const bannedUid = (await h.members(name)).find(
        (m) => `${m.metadata.namespace}/${m.metadata.name}` === banned,
      )?.metadata.uid;
      expect(bannedUid).toBeTruthy();
      const rotated = await eventually(
        'the banned member replaced',
        async () => {
          const s = (await pools.get(cp.namespace, name))?.status;
          const members = await h.members(name);
          return s?.rotation?.rotatedTotal === 1 && !members.some((m) => m.metadata.uid === bannedUid)
            ? s
            : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 250 },
      );
      expect(rotated.rotation).toMatchObject({
        lastRotated: banned.split('/')[1],
        lastRotationReason: 'Banned',
      });
      await h.deletePoolAndWait(name, 90_000);
    },
  );
});
