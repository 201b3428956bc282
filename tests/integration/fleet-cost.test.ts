/**
 * What the fleet costs (issue 53), on the real servers: this file's worker
 * and bridge (`local` provider with fake prices, real forward proxies), the
 * real CLI `api` process (it counts instance time) and an `egress-proxies
 * gateway` process (it counts the bytes it relays), both reading the same
 * providers config, the shared apiserver and Temporal dev server.
 *
 * - A pool of 5 running for a window the test measures with its own clock
 *   reports egress_proxy_cost_total = 5 x price x the window (within 1 %);
 *   a download of a size the test counts through the gateway adds its
 *   per-GiB price (within 1 %); `kubectl get proxypool` shows the rate.
 * - A pool autoscaling (min 1, max 10) under a demand for 10, with a budget
 *   that pays for 4, stops at 4 and says why (condition and Event naming
 *   the budget); a raised budget lets it grow.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventsV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPoolHarness, leaseApi, type PoolHarness } from '../helpers/pools.js';
import { kubectl } from '../helpers/kube.js';
import { eventually, maybeRecord } from '../helpers/temporal.js';
import { poolWorkflowId } from '../../workflows/pool/ids.js';
import { poolStateQuery } from '../../workflows/pool/messages.js';
import {
  gatewayConnect,
  startGatewayCli,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';

const TOKEN = 'fleet-cost-token';
/** Per instance-hour: a cent a second, so a short window costs something measurable. */
const PRICE_PER_HOUR = 36;
const PRICE_PER_GIB = 10;
const GIB = 1024 ** 3;

/** The prices every process reads (the api and the gateway a file, the in-test worker the same text). */
const pricesYaml = (local: string) => `currency: USD
providers:
  - name: local
    type: local
${local}    prices:
      perInstanceHour: { onDemand: ${PRICE_PER_HOUR} }
      perGiB: ${PRICE_PER_GIB}
`;

/** The sum of a metric's samples whose labels include `labels`, from a Prometheus text page. */
function metric(text: string, name: string, labels: Record<string, string>): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1]!, l[2]!]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) total += Number(m[3]);
  }
  return total;
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  return res.text();
}

describe('what the fleet costs', () => {
  let dir: string;
  let h: PoolHarness;
  let gateway: Awaited<ReturnType<typeof startGatewayCli>>;
  let gatewayMetrics: string;
  let target: LoopbackTarget;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ep-fleet-cost-'));
    const configPath = join(dir, 'providers.yaml');
    writeFileSync(configPath, pricesYaml(''));
    h = await startPoolHarness('fleet-cost', {
      providersYaml: (stateRoot, range) =>
        pricesYaml(`    local:\n      stateDir: ${stateRoot}/local\n      addressRange: ${range}\n`),
      apiArgs: ['--providers-config', configPath, '--pool-demand-interval', '500ms'],
      poolTiming: { progressPollMs: 2_000 },
    });
    gateway = await startGatewayCli(
      h.cp.namespace,
      ['--providers-config', configPath, '--metrics-addr', '127.0.0.1:0'],
      { DISCOVERY_TOKEN: TOKEN },
    );
    gatewayMetrics = (await gateway.cli.waitFor(/"metrics":"(http:\/\/[^"]+)"[^\n]*gateway listening/))[1]!;
    target = await startLoopbackTarget();
  }, 300_000);

  afterAll(async () => {
    await gateway?.cli.stop();
    await h?.close();
    await target?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(
    'a pool of 5 costs 5 x price x the time it runs, relayed bytes their per-GiB price, and kubectl shows the rate',
    { timeout: 300_000 },
    async () => {
      const { cp, pools } = h;
      const name = 'five';
      await pools.create(cp.namespace, name, {
        replicas: 5,
        template: {
          spec: {
            mode: 'Managed',
            provider: 'local',
            healthCheck: { probeURL: h.target.url, intervalSeconds: 1, timeoutSeconds: 2 },
          },
        },
      });
      const labels = { provider: 'local', pool: name, namespace: cp.namespace };
      const apiMetrics = `${h.apiUrl}/metrics`;
      // All 5 Ready, and the api's meter sees 5 running at the price.
      await eventually(
        'pool five: 5 ready, counted at 5 x the price',
        async () => {
          const s = (await pools.get(cp.namespace, name))?.status;
          if (s?.readyReplicas !== 5) return undefined;
          const rate = metric(await scrape(apiMetrics), 'egress_proxy_cost_per_hour', labels);
          return rate === 5 * PRICE_PER_HOUR ? true : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 250 },
      );

      // The window: bracketed by the test's clock on both sides of each scrape.
      const t0a = Date.now();
      const c0 = metric(await scrape(apiMetrics), 'egress_proxy_cost_total', labels);
      const t0b = Date.now();

      // Meanwhile, a download of a size the test counts, through the gateway.
      const g0 = await scrape(gatewayMetrics);
      const size = 32 * 1024 * 1024;
      const tunnel = await gatewayConnect(gateway.url, `127.0.0.1:${target.port}`, {
        credentials: `pool-${name}:${TOKEN}`,
      });
      expect(tunnel.status).toBe(200);
      const request = `GET /bytes/${size} HTTP/1.1\r\nHost: 127.0.0.1:${target.port}\r\nConnection: close\r\n\r\n`;
      let read = 0;
      tunnel.socket.on('data', (chunk: string) => (read += Buffer.byteLength(chunk, 'latin1')));
      tunnel.socket.write(request);
      await tunnel.closed;
      const written = Buffer.byteLength(request);
      expect(read).toBeGreaterThan(size);
      const relayed = written + read;
      const g1 = await eventually(
        'the gateway counted the tunnel',
        async () => {
          const text = await scrape(gatewayMetrics);
          const bytes =
            metric(text, 'egress_tenant_traffic_bytes_total', { provider: 'local' }) -
            metric(g0, 'egress_tenant_traffic_bytes_total', { provider: 'local' });
          return bytes > 0 ? text : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      const trafficCost =
        metric(g1, 'egress_proxy_cost_total', labels) - metric(g0, 'egress_proxy_cost_total', labels);
      const expectedTraffic = (relayed / GIB) * PRICE_PER_GIB;
      const tenantBytes =
        metric(g1, 'egress_tenant_traffic_bytes_total', { provider: 'local' }) -
        metric(g0, 'egress_tenant_traffic_bytes_total', { provider: 'local' });
      console.log(
        `traffic: ${relayed} bytes relayed by the test's count, ${tenantBytes} by the gateway's; cost ${trafficCost.toFixed(6)} USD, expected ${expectedTraffic.toFixed(6)} (${((100 * (trafficCost - expectedTraffic)) / expectedTraffic).toFixed(3)} %)`,
      );
      expect(Math.abs(trafficCost - expectedTraffic)).toBeLessThanOrEqual(0.01 * expectedTraffic);
      expect(Math.abs(tenantBytes - relayed)).toBeLessThanOrEqual(0.01 * relayed);

      // Run on until the instance cost has grown by what 30 s of the 5 cost (a condition on the metric, not a sleep).
      const grown = 5 * PRICE_PER_HOUR * (30 / 3600);
      const [c1, t1a, t1b] = await eventually(
        'instance cost grown by 30 s of 5 proxies',
        async () => {
          const a = Date.now();
          const c = metric(await scrape(apiMetrics), 'egress_proxy_cost_total', labels);
          const b = Date.now();
          return c - c0 >= grown ? ([c, a, b] as const) : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 1_000 },
      );
      const spent = c1 - c0;
      // The window is somewhere between the inner and the outer bracket.
      const shortest = (t1a - t0b) / 3_600_000;
      const longest = (t1b - t0a) / 3_600_000;
      const expected = 5 * PRICE_PER_HOUR * ((shortest + longest) / 2);
      console.log(
        `instances: ${spent.toFixed(6)} USD over ${((t1a - t0b) / 1000).toFixed(3)}-${((t1b - t0a) / 1000).toFixed(3)} s, expected ${expected.toFixed(6)} (${((100 * (spent - expected)) / expected).toFixed(3)} %)`,
      );
      // Within 1 % of 5 x price x the window, wherever in its bracket the window lies.
      expect(spent).toBeGreaterThanOrEqual(0.99 * 5 * PRICE_PER_HOUR * shortest);
      expect(spent).toBeLessThanOrEqual(1.01 * 5 * PRICE_PER_HOUR * longest);

      // The status and `kubectl get proxypool` show the run rate.
      await eventually(
        'pool five: costPerHour in the status',
        async () =>
          (await pools.get(cp.namespace, name))?.status?.costPerHour === '180.0000 USD' ? true : undefined,
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      const table = await kubectl(['get', 'proxypool', name, '-n', cp.namespace]);
      console.log(table);
      expect(table).toMatch(/COST\/H/);
      expect(table).toMatch(/180\.0000 USD/);
      await h.deletePoolAndWait(name, 90_000);
    },
  );

  it(
    'autoscaling stops where the budget does, says so, and grows once the budget is raised',
    { timeout: 300_000 },
    async () => {
      const { cp, pools } = h;
      const name = 'capped';
      await pools.create(cp.namespace, name, {
        replicas: 1,
        template: {
          spec: {
            mode: 'Managed',
            provider: 'local',
            maxLeases: 1,
            healthCheck: { probeURL: h.target.url, intervalSeconds: 1, timeoutSeconds: 2 },
          },
        },
        strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 30 },
        autoscaling: {
          minReplicas: 1,
          maxReplicas: 10,
          targetUtilization: 1,
          scaleUpStabilizationSeconds: 1,
          scaleDownStabilizationSeconds: 600,
        },
        // Pays for 4 members at 36 an hour.
        budget: { maxPerHour: 4 * PRICE_PER_HOUR },
      });
      const status = async () => (await pools.get(cp.namespace, name))?.status;
      await eventually(
        'pool capped: 1 available',
        async () => ((await status())?.availableReplicas === 1 ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 250 },
      );

      // Demand for 10: crawlers hold up to 10 leases (one per member), and keep asking when refused.
      const api = leaseApi(h.apiUrl);
      const held: string[] = [];
      let refused = 0;
      let mostMembers = 0;
      const demand = async () => {
        while (held.length < 10) {
          const answer = await api.acquire({ pool: name, ttlSeconds: 300 });
          if (answer.status === 409) {
            refused++;
            return;
          }
          expect(answer.status).toBe(201);
          held.push(answer.body.leaseID);
        }
      };
      const members = async () => {
        const n = (await h.members(name)).filter((m) => !m.metadata.deletionTimestamp).length;
        mostMembers = Math.max(mostMembers, n);
        return n;
      };
      try {
        const limited = await eventually(
          'pool capped: held at 4 by its budget',
          async () => {
            await demand();
            const s = await status();
            const c = s?.conditions?.find((x) => x.type === 'BudgetLimited');
            return (await members()) === 4 && s?.availableReplicas === 4 && c?.status === 'True'
              ? { s, c }
              : undefined;
          },
          { timeoutMs: 120_000, intervalMs: 500 },
        );
        console.log(
          `budget-limited: ${held.length} leases held, ${refused} refused; desired ${limited.s.desiredReplicas}; ${limited.c.reason}: ${limited.c.message}`,
        );
        expect(limited.s.desiredReplicas).toBe(4);
        expect(limited.c.reason).toBe('BudgetLimited');
        expect(limited.c.message).toMatch(
          /^budget\.maxPerHour 144\.0000 USD allows 4 proxies at 36\.0000 USD each per hour; demand asks for up to (\d+)$/,
        );
        expect(Number(/asks for up to (\d+)$/.exec(limited.c.message)![1])).toBeGreaterThan(4);
        // The demand stands (refusals keep coming) and the pool stays at 4: it asks for 10. The
        // condition holds steady meanwhile: refusals come and go between demand reports, and the
        // want is the most asked within the scale-down window, so it does not flap with them.
        const poolUid = (await pools.get(cp.namespace, name))!.metadata.uid!;
        const handle = cp.client.workflow.getHandle(
          poolWorkflowId({ namespace: cp.namespace, name, uid: poolUid }),
        );
        const reportsSent = async () =>
          metric(await scrape(`${h.apiUrl}/metrics`), 'egress_pool_demand_reports_total', {
            outcome: 'sent',
          });
        const looks0 = (await handle.query(poolStateQuery)).looks;
        const reports0 = await reportsSent();
        const transitions = new Set<string>();
        await eventually(
          'pool capped: the autoscaler recommends 10, kept at 4, over 6 more demand reports',
          async () => {
            await demand();
            const s = await status();
            const c = s?.conditions?.find((x) => x.type === 'BudgetLimited');
            transitions.add(`${c?.status} ${c?.lastTransitionTime}`);
            return s?.autoscaling?.recommendation === 10 &&
              s.desiredReplicas === 4 &&
              (await reportsSent()) >= reports0 + 6
              ? true
              : undefined;
          },
          { timeoutMs: 60_000, intervalMs: 500 },
        );
        const looks = (await handle.query(poolStateQuery)).looks - looks0;
        const reports = (await reportsSent()) - reports0;
        console.log(
          `while limited: ${reports} demand reports, ${looks} looks; BudgetLimited ${[...transitions].join(', ')}`,
        );
        expect([...transitions]).toEqual([`True ${limited.c.lastTransitionTime}`]);
        expect(mostMembers).toBe(4);
        const events = cp.kc.makeApiClient(EventsV1Api);
        const uid = (await pools.get(cp.namespace, name))!.metadata.uid;
        const event = await eventually(
          'the BudgetLimited Event',
          async () =>
            (await events.listNamespacedEvent({ namespace: cp.namespace })).items.find(
              (e) => e.regarding?.uid === uid && e.reason === 'BudgetLimited',
            ),
          { timeoutMs: 30_000, intervalMs: 250 },
        );
        expect(event.type).toBe('Warning');
        expect(event.note).toContain('budget.maxPerHour 144.0000 USD allows 4 proxies');

        // A budget for 10: it grows.
        await pools.patchSpec(cp.namespace, name, { budget: { maxPerHour: 10 * PRICE_PER_HOUR } });
        const grown = await eventually(
          'pool capped: grown past 4 once the budget allows',
          async () => {
            await demand();
            const s = await status();
            const c = s?.conditions?.find((x) => x.type === 'BudgetLimited');
            return s && (s.desiredReplicas ?? 0) > 4 && (s.readyReplicas ?? 0) > 4 && c?.status === 'False'
              ? { s, c }
              : undefined;
          },
          { timeoutMs: 120_000, intervalMs: 500 },
        );
        console.log(
          `budget raised: desired ${grown.s.desiredReplicas}, ready ${grown.s.readyReplicas}; ${grown.c.message}`,
        );
      } finally {
        await Promise.all(held.map((id) => api.release(id)));
      }
      const uid = (await pools.get(cp.namespace, name))!.metadata.uid!;
      await h.deletePoolAndWait(name, 90_000);
      const handle = cp.client.workflow.getHandle(poolWorkflowId({ namespace: cp.namespace, name, uid }));
      await handle.result();
      maybeRecord('pool-budget-limited', await handle.fetchHistory());
    },
  );
});
