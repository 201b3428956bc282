/**
 * The `list` provider on the real apiserver (its claims are ConfigMaps):
 * the conformance suite, with a static list, and the list's own rules.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKubeClaimStore } from '../../kube/claims.js';
import { listConfigSchema, type ListConfig } from '../../providers/list/config.js';
import { createListProvider } from '../../providers/list/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { CreateRequest } from '../../providers/types.js';
import { classOf } from '../../providers/errors.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import {
  createNamespace,
  kubeConfig,
  providerHealthClient,
  proxyCondition,
  waitForProxy,
} from '../helpers/kube.js';
import { startTarget, TcpRelay } from '../helpers/net.js';
import { claimHooks } from '../helpers/claims.js';
import { ensureSchedules, scheduleIds, type SchedulesConfig } from '../../cli/schedules.js';
import { createProxyPoolClient, poolSelector } from '../../kube/proxy-pools.js';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import type { Provider } from '../../providers/types.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import type { ChecksRoundReport } from '../../workflows/provider-checks/types.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { startFakeProxyList, type FakeProxyList } from '../helpers/fake-proxy-list.js';
import { eventually } from '../helpers/temporal.js';
import { startForwardProxies } from './gateway-helpers.js';
import { mutableRegistry, nthResult, startScheduleWorker, type ScheduleWorker } from './gc-helpers.js';
import { kubeConfigVia } from './gc-helpers.js';
import { capturedLogger } from '../helpers/captured-logger.js';

const live = () => new AbortController().signal;

/** `count` static entries on distinct loopback hosts, each with a user and a password. */
function entries(count: number, secret = 'pw'): string[] {
  return Array.from(
    { length: count },
    (_, i) => `127.60.${i >> 8}.${(i & 255) + 1}:${8000 + i}:u${i}:${secret}-${i}`,
  );
}

function makeList(kc: KubeConfig, namespace: string, name: string, block: Record<string, unknown>) {
  const config: ListConfig = listConfigSchema.parse({ claimsNamespace: namespace, ...block });
  const { logger, lines } = capturedLogger();
  const provider = createListProvider({
    name,
    config,
    logger,
    claims: createKubeClaimStore(kc, name, namespace),
  });
  return { provider, lines };
}

function request(overrides: Partial<CreateRequest> = {}): CreateRequest {
  const uid = overrides.uid ?? randomUUID();
  return {
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'default',
    proxyName: `p-${uid.slice(0, 6)}`,
    placement: {},
    port: 3128,
    installation: 'list-test',
    ...overrides,
  };
}

describeProviderConformance('list', async () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const namespace = await createNamespace(kc, 'list-conformance');
  const apiserver = new URL(kc.getCurrentCluster()!.server);
  const relay = new TcpRelay({ host: apiserver.hostname, port: Number(apiserver.port) });
  await relay.open();
  const name = 'list-conf';
  const { provider, lines } = makeList(kubeConfigVia(kc, relay.port), namespace, name, {
    entries: entries(200),
  });

  return {
    provider,
    logLines: () => lines,
    malformedIds: [
      `${name}-UPPERCASE0000000`,
      `${name}-abc`,
      `other-${'a'.repeat(16)}`,
      `${name}-${'a'.repeat(17)}`,
    ],
    hooks: claimHooks(kc, namespace, name, relay),
    cleanup: async () => {
      await relay.cut();
      await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    },
  };
});

describe('list provider', () => {
  let kc: KubeConfig;
  let namespace: string;

  beforeAll(async () => {
    kc = kubeConfig();
    namespace = await createNamespace(kc, 'list-rules');
  });
  afterAll(async () => {
    await kc
      .makeApiClient(CoreV1Api)
      .deleteNamespace({ name: namespace })
      .catch(() => undefined);
  });

  it('never gives one entry to two Proxies, and says so when every entry is taken', async () => {
    const { provider } = makeList(kc, namespace, 'list-three', { entries: entries(3) });
    const reqs = Array.from({ length: 4 }, () => request());
    const settled = await Promise.allSettled(reqs.map((r) => provider.create(r, live())));
    const made = settled.filter((s) => s.status === 'fulfilled').map((s) => s.value);
    expect(made).toHaveLength(3);
    const addresses = await Promise.all(
      made.map(async (id) => {
        const got = await provider.get(id, live());
        expect(got.state).toBe('Running');
        return `${got.ip}:${got.port}`;
      }),
    );
    expect(new Set(addresses).size).toBe(3);
    const refused = settled.find((s) => s.status === 'rejected');
    expect(classOf((refused as PromiseRejectedResult).reason)).toBe('QuotaExceeded');
    expect(String((refused as PromiseRejectedResult).reason)).toMatch(
      /every entry of the static list is taken \(3 listed, 3 claimed\)/,
    );

    // A deleted instance frees its entry for the next Proxy.
    await provider.delete(made[0]!, live());
    const next = await provider.create(
      reqs.find((_r, i) => settled[i]!.status === 'rejected')!,
      live(),
    );
    expect(`${(await provider.get(next, live())).ip}`).toBeTruthy();
  });

  it("hands out the entry's credentials, and none for an entry without them; never logs them", async () => {
    const { provider, lines } = makeList(kc, namespace, 'list-creds', {
      entries: ['127.61.0.1:9001:alice:s3cret-sentinel-7f'],
    });
    const id = await provider.create(request(), live());
    expect(await provider.credentialsOf!(id, live())).toEqual({
      username: 'alice',
      password: 's3cret-sentinel-7f',
    });
    const bare = makeList(kc, namespace, 'list-bare', { entries: ['127.61.0.2:9002'] });
    const bareId = await bare.provider.create(request(), live());
    expect(await bare.provider.credentialsOf!(bareId, live())).toBeUndefined();
    expect((await bare.provider.get(bareId, live())).port).toBe(9002);
    expect(lines.join('\n')).not.toContain('s3cret-sentinel-7f');
  });

  it('refuses a bad static entry at load, naming it and never quoting a password', () => {
    const bad = listConfigSchema.safeParse({ entries: ['127.0.0.1:3128', 'host:99999:u:hunter2-sentinel'] });
    expect(bad.success).toBe(false);
    const text = JSON.stringify(bad.error!.issues);
    expect(bad.error!.issues[0]!.path).toEqual(['entries', 1]);
    expect(text).toMatch(/port of host is not in 1-65535/);
    expect(text).not.toContain('hunter2-sentinel');
    expect(listConfigSchema.safeParse({}).success).toBe(false);
    expect(listConfigSchema.safeParse({ entries: ['a:1'], url: 'http://127.0.0.1:1/x' }).success).toBe(false);
  });
});

describe('list proxies end to end', () => {
  let cp: ControlPlane;
  let list: FakeProxyList;
  let proxies: ForwardProxy[];
  let target: Awaited<ReturnType<typeof startTarget>>;
  let api: CliProcess;
  let sw: ScheduleWorker;
  let provider: Provider;
  const prefix = `list-e2e-${randomBytes(3).toString('hex')}`;
  /** ProviderHealth objects are cluster-wide, named after the entry: one of this run's own. */
  const LST = `lst-${randomBytes(3).toString('hex')}`;
  const entryOf = (p: ForwardProxy) => ({ host: p.host, port: p.port });
  const addressOf = (p: Proxy) => `${p.status?.ip}:${p.status?.port}`;
  const isReady = (p: Proxy) => proxyCondition(p, 'Ready')?.status === 'True';
  const members = async () =>
    (await cp.api.list(cp.namespace, { labelSelector: poolSelector('four') })).items;

  beforeAll(async () => {
    proxies = await startForwardProxies(6);
    target = await startTarget('through a listed proxy');
    list = await startFakeProxyList({ format: 'lines', entries: proxies.slice(0, 4).map(entryOf) });
    cp = await startControlPlane({ prefix: 'list-e2e', providersYaml: () => 'providers: []\n' });
    provider = createListProvider({
      name: LST,
      config: listConfigSchema.parse({ url: list.url, refreshSeconds: 1, claimsNamespace: cp.namespace }),
      logger: cp.logger,
      claims: createKubeClaimStore(cp.kc, LST, cp.namespace),
    });
    cp.registry.add(provider);
    sw = await startScheduleWorker({
      prefix: 'list-e2e',
      kubeConfig: cp.kc,
      registry: mutableRegistry([provider]),
    });
    api = startCli([
      'api',
      '--discovery-addr',
      '127.0.0.1:0',
      ...testServerArgs(),
      '--watch-namespaces',
      cp.namespace,
    ]);
    await leaseApiUrl(api, 150_000);
  }, 240_000);

  afterAll(async () => {
    await api?.stop();
    await sw?.close();
    await cp?.close();
    await list?.close();
    await target?.close();
    for (const p of proxies ?? []) await p.close();
  });

  it('4 entries become 4 Ready Proxies; a removed entry is replaced from the list, or waits with a condition; a bad list keeps the last good one', async () => {
    const pools = createProxyPoolClient(cp.kc);
    await pools.create(cp.namespace, 'four', {
      replicas: 4,
      template: {
        spec: {
          mode: 'Managed',
          provider: LST,
          healthCheck: {
            probeURL: `http://127.0.0.1:${target.port}/`,
            intervalSeconds: 1,
            timeoutSeconds: 2,
          },
        },
      },
    });
    const first = await eventually(
      'pool four: 4 Ready',
      async () => {
        const ms = await members();
        return ms.length === 4 && ms.every(isReady) ? ms : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(new Set(first.map(addressOf))).toEqual(
      new Set(proxies.slice(0, 4).map((p) => `${p.host}:${p.port}`)),
    );

    // Entry 0 leaves the list, entry 4 joins: its Proxy moves to entry 4.
    const leaving = `${proxies[0]!.host}:${proxies[0]!.port}`;
    const moved = first.find((m) => addressOf(m) === leaving)!;
    list.setEntries([...proxies.slice(1, 5)].map(entryOf));
    const replaced = await waitForProxy(
      cp.api,
      cp.namespace,
      moved.metadata.name,
      'on entry 4, Ready',
      (p) => addressOf(p) === `${proxies[4]!.host}:${proxies[4]!.port}` && isReady(p),
      { timeoutMs: 60_000 },
    );
    expect(replaced.metadata.uid).toBe(moved.metadata.uid);

    // Entry 1 leaves with nothing to take its place: its Proxy waits, saying why.
    const stranded = first.find((m) => addressOf(m) === `${proxies[1]!.host}:${proxies[1]!.port}`)!;
    list.setEntries([...proxies.slice(2, 5)].map(entryOf));
    const waiting = await waitForProxy(
      cp.api,
      cp.namespace,
      stranded.metadata.name,
      'Provisioned False (QuotaExceeded)',
      (p) => proxyCondition(p, 'Provisioned')?.reason === 'QuotaExceeded',
      { timeoutMs: 60_000 },
    );
    expect(proxyCondition(waiting, 'Provisioned')?.message).toMatch(
      /every entry of .* is taken \(3 listed, 3 claimed\)/,
    );

    // A list that answers 500, then garbage: the last good list stays, and ProviderHealth says why.
    const checks: SchedulesConfig = {
      taskQueue: sw.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs: 0 },
      providerChecks: { intervalMs: 3_600_000, timeoutMs: 5_000 },
    };
    await ensureSchedules(sw.client, checks);
    const handle = sw.client.schedule.getHandle(scheduleIds(prefix).providerChecks);
    let rounds = 0;
    const round = async () => {
      await handle.trigger();
      return nthResult<ChecksRoundReport>(sw.client, handle, ++rounds);
    };
    const health = providerHealthClient(cp.kc);
    const listTarget = async () => (await health.get(LST))?.status?.targets?.find((t) => t.name === 'list');
    for (const [fail, why] of [
      [() => list.failWith(500), /answered HTTP 500; keeping the last good list \(3 entries\)/],
      [() => list.serveGarbage(), /is not a usable lines list: .*; keeping the last good list \(3 entries\)/],
    ] as const) {
      fail();
      await eventually(
        `ProviderHealth ${LST} says ${why}`,
        async () => {
          await round();
          const t = await listTarget();
          return t?.ready === false && why.test(t.message ?? '') ? t : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 1_100 },
      );
      // The Proxies on the kept list stay Ready.
      const ready = (await members()).filter(isReady);
      expect(ready.map(addressOf).sort()).toEqual(
        proxies
          .slice(2, 5)
          .map((p) => `${p.host}:${p.port}`)
          .sort(),
      );
    }
    list.recover();
    await eventually(
      `ProviderHealth ${LST} Reachable again`,
      async () => {
        await round();
        return (await listTarget())?.ready === true || undefined;
      },
      { timeoutMs: 30_000, intervalMs: 1_100 },
    );
    expect(list.requests().some((r) => r.conditional && r.status === 304)).toBe(true);
    await pools.delete(cp.namespace, 'four');
    const ph = await health.get(LST);
    if (ph) await health.delete(ph);
  });
});
