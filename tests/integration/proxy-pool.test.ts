/**
 * ProxyPool on the real servers (issue 30): the worker and bridge of this
 * file's control plane (local provider, real forward proxies), the real CLI
 * `api` process (lease API, prober, drain notifier), the shared apiserver
 * and Temporal dev server.
 *
 * - A pool scales with `kubectl scale`, exposes a scale subresource an
 *   autoscaling/v2 HPA accepts, replaces a member deleted by hand, puts
 *   back one edited by hand, and deleting it deletes every member and
 *   instance.
 * - A standalone Proxy with drainTimeoutSeconds keeps serving a held lease
 *   through a spec change, and is replaced once the lease is released.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_VERSION, PROXY_POOL_PLURAL } from '../../kube/coordinates.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import type { ProxyClient } from '../../kube/proxies.js';
import type { ProxyPoolClient } from '../../kube/proxy-pools.js';
import type { ControlPlane } from '../helpers/control-plane.js';
import { kubectl, proxyCondition } from '../helpers/kube.js';
import type { ProbeTarget } from '../helpers/prober-fixtures.js';
import { eventually, maybeRecord } from '../helpers/temporal.js';
import { poolWorkflowId } from '../../workflows/pool/ids.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import {
  authorizationOf,
  connectThrough,
  leaseApi,
  startPoolHarness,
  type PoolHarness,
} from '../helpers/pools.js';

describe('ProxyPool', () => {
  let h: PoolHarness;
  let cp: ControlPlane;
  let target: ProbeTarget;
  let apiUrl: string;
  let proxies: ProxyClient;
  let pools: ProxyPoolClient;

  beforeAll(async () => {
    h = await startPoolHarness('pool');
    ({ cp, target, apiUrl, proxies, pools } = h);
  });
  afterAll(async () => {
    await h?.close();
  });

  const template = (attributes: Record<string, string> = {}) => ({
    metadata: { labels: { team: 'crawl' } },
    spec: {
      mode: 'Managed' as const,
      provider: 'local',
      attributes,
      maxLeases: 3,
      healthCheck: { probeURL: target.url, intervalSeconds: 1, timeoutSeconds: 2 },
    },
  });

  const members = (pool: string): Promise<Proxy[]> => h.members(pool);

  const poolReady = (name: string, replicas: number, what = `${replicas} available`) =>
    eventually(
      `pool ${name}: ${what}`,
      async () => {
        const pool = await pools.get(cp.namespace, name);
        const s = pool?.status;
        const all = await members(name);
        return s?.availableReplicas === replicas &&
          s.updatedReplicas === replicas &&
          s.replicas === replicas &&
          all.length === replicas
          ? { pool: pool!, members: all }
          : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    );

  it('scales with kubectl, takes an HPA, heals hand edits and deletions, and deletes every member with it', async () => {
    const name = 'web';
    await pools.create(cp.namespace, name, { replicas: 3, template: template({ geo: 'eu' }) });
    const first = await poolReady(name, 3);
    for (const m of first.members) {
      expect(m.metadata.labels).toMatchObject({ team: 'crawl', 'crawl.example.com/pool': name });
      expect(m.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'ProxyPool', name, controller: true });
      expect(m.spec.drainTimeoutSeconds).toBe(3600);
    }
    expect(proxyCondition(first.pool as unknown as Proxy, 'Available')?.status).toBe('True');

    // The scale subresource: kubectl scale, and what an HPA reads.
    await kubectl(['-n', cp.namespace, 'scale', `proxypool/${name}`, '--replicas=5']);
    await poolReady(name, 5);
    // Each scale step is an Event on the pool.
    const events = await eventually(
      'ScalingUp Events on the pool',
      async () => {
        const out = await kubectl([
          '-n',
          cp.namespace,
          'get',
          'events',
          '--field-selector',
          `involvedObject.kind=ProxyPool,involvedObject.name=${name}`,
          '-o',
          'jsonpath={range .items[*]}{.reason}{"\\n"}{end}',
        ]);
        return out.includes('ScalingUp') ? out : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    expect(events).toContain('ScalingUp');
    const scale = JSON.parse(
      await kubectl([
        'get',
        '--raw',
        `/apis/${API_VERSION}/namespaces/${cp.namespace}/${PROXY_POOL_PLURAL}/${name}/scale`,
      ]),
    ) as { spec: { replicas: number }; status: { replicas: number; selector: string } };
    expect(scale).toMatchObject({
      spec: { replicas: 5 },
      status: { replicas: 5, selector: `crawl.example.com/pool=${name}` },
    });
    await kubectlApply(
      cp.namespace,
      JSON.stringify({
        apiVersion: 'autoscaling/v2',
        kind: 'HorizontalPodAutoscaler',
        metadata: { name: `${name}-hpa`, namespace: cp.namespace },
        spec: {
          scaleTargetRef: { apiVersion: API_VERSION, kind: 'ProxyPool', name },
          minReplicas: 2,
          maxReplicas: 40,
          metrics: [
            {
              type: 'External',
              external: {
                metric: { name: 'egress_pool_lease_utilization' },
                target: { type: 'Value', value: '1' },
              },
            },
          ],
        },
      }),
    );
    expect(await kubectl(['-n', cp.namespace, 'get', 'hpa', `${name}-hpa`, '-o', 'name'])).toContain(
      `${name}-hpa`,
    );

    // The lease API sees the pool.
    const listed = (await (await fetch(`${apiUrl}/v1/proxies?pool=${name}`)).json()) as {
      count: number;
      proxies: Array<{ pool?: string }>;
    };
    expect(listed.count).toBe(5);
    expect(listed.proxies.every((p) => p.pool === name)).toBe(true);
    const metrics = await (await fetch(`${apiUrl}/metrics`)).text();
    expect(metrics).toContain(`egress_pool_proxies_leasable{namespace="${cp.namespace}",pool="${name}"} 5`);
    const lease = await leaseApi(apiUrl).acquire({ pool: name, ttlSeconds: 30 });
    expect(lease.status).toBe(201);
    expect(lease.body.proxy.pool).toBe(name);
    expect(await (await fetch(`${apiUrl}/metrics`)).text()).toContain(
      `egress_pool_leases_active{namespace="${cp.namespace}",pool="${name}"} 1`,
    );
    expect((await leaseApi(apiUrl).acquire({ pool: 'no-such-pool', ttlSeconds: 30 })).status).toBe(409);
    await leaseApi(apiUrl).release(lease.body.leaseID);

    // A member deleted by hand is replaced; one edited by hand is put back.
    const [gone, edited] = (await members(name)).sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
    await kubectl(['-n', cp.namespace, 'delete', 'proxy', gone!.metadata.name, '--wait=false']);
    await proxies.patch(
      { namespace: cp.namespace, name: edited!.metadata.name, uid: edited!.metadata.uid! },
      { spec: { ...edited!.spec, maxLeases: 9 } },
    );
    await eventually(
      'the deleted member replaced and the edited one restored',
      async () => {
        const now = await members(name);
        const live = now.filter((p) => !p.metadata.deletionTimestamp);
        const restored = now.find((p) => p.metadata.uid === edited!.metadata.uid);
        return live.length === 5 &&
          !live.some((p) => p.metadata.uid === gone!.metadata.uid) &&
          restored?.spec.maxLeases === 3
          ? true
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    await poolReady(name, 5);

    // Deleting the pool deletes every member, and every instance with it.
    const poolUid = (await pools.get(cp.namespace, name))!.metadata.uid!;
    await h.deletePoolAndWait(name, 120_000);
    // Its workflow ends with its members gone; its history joins the replay guard.
    const handle = cp.client.workflow.getHandle(
      poolWorkflowId({ namespace: cp.namespace, name, uid: poolUid }),
    );
    await handle.result();
    maybeRecord('pool-scale-heal-delete', await handle.fetchHistory());
  });

  it('a standalone Proxy with drainTimeoutSeconds serves a held lease through a spec change, then is replaced', async () => {
    const name = 'drainer';
    await proxies.create({
      metadata: { name, namespace: cp.namespace },
      spec: {
        mode: 'Managed',
        provider: 'local',
        drainTimeoutSeconds: 300,
        attributes: { role: 'drain-test' },
        healthCheck: { probeURL: target.url, intervalSeconds: 1, timeoutSeconds: 2 },
      },
    });
    const ready = await eventually(
      `${name} Ready`,
      async () => {
        const p = await proxies.get(cp.namespace, name);
        return p && proxyCondition(p, 'Ready')?.status === 'True' ? p : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    const oldIp = ready.status!.ip!;
    const lease = await leaseApi(apiUrl).acquire({ selector: { role: 'drain-test' }, ttlSeconds: 300 });
    expect(lease.status).toBe(201);
    expect(lease.body.proxy.ip).toBe(oldIp);

    // A spec change that replaces the instance (the port).
    await proxies.patch(
      { namespace: cp.namespace, name, uid: ready.metadata.uid! },
      { spec: { ...ready.spec, port: 3999 } },
    );
    const draining = await eventually(
      `${name} draining`,
      async () => {
        const p = await proxies.get(cp.namespace, name);
        return p && proxyCondition(p, 'Draining')?.status === 'True' ? p : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    expect(draining.status?.ip).toBe(oldIp);
    // No new lease on it; the held one still works through the old instance.
    expect(
      (await leaseApi(apiUrl).acquire({ selector: { role: 'drain-test' }, ttlSeconds: 30 })).status,
    ).toBe(409);
    const listed = (await (await fetch(`${apiUrl}/v1/proxies?attr.role=drain-test`)).json()) as {
      proxies: Array<{ draining?: boolean; activeLeases: number }>;
    };
    expect(listed.proxies[0]).toMatchObject({ draining: true, activeLeases: 1 });
    // The drain notifier has looked past its grace and found the lease held (twice): it still serves.
    const heldChecks = async () => {
      const text = await (await fetch(`${apiUrl}/metrics`)).text();
      const m = /^egress_drain_checks_total\{outcome="held"\} (\d+)/m.exec(text);
      return Number(m?.[1] ?? 0);
    };
    const before = await heldChecks();
    await eventually('two held checks', async () => ((await heldChecks()) >= before + 2 ? true : undefined), {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    expect(
      await connectThrough(oldIp, ready.spec.port, target.port, 5_000, authorizationOf(lease.body.proxyURL)),
    ).toBe(200);
    expect((await proxies.get(cp.namespace, name))?.status?.ip).toBe(oldIp);

    await leaseApi(apiUrl).release(lease.body.leaseID);
    // Replaced: an instance of the new spec, Ready. (Its address usually
    // differs, but the local provider may hand the freed one out again.)
    const oldSpecHash = ready.status!.specHash;
    const replaced = await eventually(
      `${name} replaced after the release`,
      async () => {
        const p = await proxies.get(cp.namespace, name);
        return p && proxyCondition(p, 'Ready')?.status === 'True' && p.status?.specHash !== oldSpecHash
          ? p
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(proxyCondition(replaced, 'Draining')?.status).toBe('False');
    expect(
      await connectThrough(
        replaced.status!.ip!,
        3999,
        target.port,
        5_000,
        authorizationOf(lease.body.proxyURL),
      ),
    ).toBe(200);
    await proxies.delete({ namespace: cp.namespace, name, uid: replaced.metadata.uid! });
    const handle = cp.client.workflow.getHandle(
      proxyWorkflowId({ namespace: cp.namespace, name, uid: replaced.metadata.uid! }),
    );
    await handle.result();
    maybeRecord('proxy-drain-replace-delete', await handle.fetchHistory());
  });
});

async function kubectlApply(namespace: string, json: string): Promise<void> {
  const file = join(mkdtempSync(join(tmpdir(), 'ep-hpa-')), 'hpa.json');
  writeFileSync(file, json);
  await kubectl(['-n', namespace, 'apply', '-f', file]);
}
