import { beforeAll, describe, expect, it } from 'vitest';
import type { KubeConfig } from '@kubernetes/client-node';
import type { ProviderHealthClient } from '../../kube/provider-healths.js';
import { refOf, type ProxyClient } from '../../kube/proxies.js';
import {
  DEFAULT_HEALTH_CHECK,
  DEFAULT_MAX_LEASES,
  DEFAULT_PORT,
  FINALIZER,
} from '../../resources/proxy-schema.js';
import type { ProxySpecInput } from '../../resources/proxy-schema.js';
import {
  apiErrorMessage,
  createNamespace,
  createProviderHealth,
  createProxy,
  deleteProviderHealth,
  getProxy,
  kubeConfig,
  kubectl,
  providerHealthClient,
  proxyClient,
  setProxyStatus,
} from '../helpers/kube.js';

describe('Proxy and ProviderHealth CRDs on the real apiserver', () => {
  let kc: KubeConfig;
  let api: ProxyClient;
  let healths: ProviderHealthClient;
  let ns: string;

  beforeAll(async () => {
    kc = kubeConfig();
    api = proxyClient(kc);
    healths = providerHealthClient(kc);
    ns = await createNamespace(kc, 'crds');
  });

  const invalid: Array<[string, ProxySpecInput, string]> = [
    ['Managed without provider', { mode: 'Managed' }, 'provider is required when mode is Managed'],
    [
      'External with provider',
      { mode: 'External', provider: 'stub', endpoint: { host: '203.0.113.9' } },
      'provider must not be set when mode is External',
    ],
    ['External without endpoint', { mode: 'External' }, 'endpoint is required when mode is External'],
    [
      'Managed with endpoint',
      { mode: 'Managed', provider: 'stub', endpoint: { host: '203.0.113.9' } },
      'endpoint must not be set when mode is Managed',
    ],
    [
      'cloudInit with both',
      { mode: 'Managed', provider: 'stub', cloudInit: { inline: '#cloud-config', secretRef: { name: 's' } } },
      'exactly one of inline or secretRef',
    ],
    [
      'cloudInit with neither',
      { mode: 'Managed', provider: 'stub', cloudInit: {} },
      'exactly one of inline or secretRef',
    ],
  ];

  it.each(invalid)('rejects %s with the seed wording', async (_about, spec, want) => {
    const error = await createProxy(api, ns, 'cel-invalid', spec).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error, 'create must fail').toBeDefined();
    expect(apiErrorMessage(error)).toContain(want);
  });

  it('rejects mode mutation', async () => {
    const created = await createProxy(api, ns, 'cel-mode', {
      mode: 'External',
      endpoint: { host: '203.0.113.9' },
    });
    const error = await api.patch(refOf(created), { spec: { mode: 'Managed', provider: 'stub' } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(apiErrorMessage(error)).toContain('mode is immutable');
  });

  it('rejects provider mutation and removal', async () => {
    const created = await createProxy(api, ns, 'cel-provider', { mode: 'Managed', provider: 'stub' });
    const patch = (spec: ProxySpecInput) =>
      api.patch(refOf(created), { spec }).then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(apiErrorMessage(await patch({ mode: 'Managed', provider: 'other' }))).toContain(
      'provider is immutable',
    );
    // Removal: flip mode too so the required-iff rule is not what fires.
    const removal = apiErrorMessage(await patch({ mode: 'External', endpoint: { host: '203.0.113.9' } }));
    expect(removal).toContain('provider is immutable');
    expect((await getProxy(api, ns, 'cel-provider')).spec.provider).toBe('stub');
  });

  it('materialises every default, including the nested healthCheck ones, on a minimal Managed Proxy', async () => {
    await createProxy(api, ns, 'defaults', { mode: 'Managed', provider: 'stub' });
    const got = await getProxy(api, ns, 'defaults');
    expect(got.spec.port).toBe(DEFAULT_PORT);
    expect(got.spec.maxLeases).toBe(DEFAULT_MAX_LEASES);
    expect(got.spec.healthCheck).toEqual({
      ...DEFAULT_HEALTH_CHECK,
      expectedStatusCodes: [...DEFAULT_HEALTH_CHECK.expectedStatusCodes],
    });
  });

  it('keeps an explicit maxLeases: 0 (unleasable) instead of defaulting it', async () => {
    await createProxy(api, ns, 'zero-leases', { mode: 'Managed', provider: 'stub', maxLeases: 0 });
    expect((await getProxy(api, ns, 'zero-leases')).spec.maxLeases).toBe(0);
  });

  it('kubectl get px shows MODE, PROVIDER, PHASE, IP, HEALTHY, READY, AGE', async () => {
    await createProxy(api, ns, 'columns', {
      mode: 'External',
      endpoint: { host: '203.0.113.7', port: 8080 },
    });
    const out = await kubectl(['get', 'px', '-n', ns, 'columns']);
    const header = out.split('\n')[0]!.trim().split(/\s+/);
    expect(header).toEqual(['NAME', 'MODE', 'PROVIDER', 'PHASE', 'IP', 'HEALTHY', 'READY', 'AGE']);
    expect(out).toMatch(/columns\s+External/);
  });

  it('keeps a Ready condition and lastHealthReportTime in status; kubectl wait --for=condition=Ready returns on it', async () => {
    const created = await createProxy(api, ns, 'ready', {
      mode: 'External',
      endpoint: { host: '203.0.113.8' },
    });
    const at = '2026-12-01T00:00:00Z';
    const condition = (type: string, reason: string) => ({
      type,
      status: 'True' as const,
      reason,
      message: '',
      lastTransitionTime: at,
    });
    await setProxyStatus(api, created, {
      phase: 'Ready',
      lastHealthReportTime: at,
      conditions: [
        condition('Provisioned', 'External'),
        condition('Healthy', 'ProbeSucceeded'),
        condition('Ready', 'Ready'),
      ],
    });
    const stored = await getProxy(api, ns, 'ready');
    expect(stored.status?.lastHealthReportTime).toBe(at);
    expect(stored.status?.conditions?.map((c) => c.type)).toEqual(['Provisioned', 'Healthy', 'Ready']);
    const out = await kubectl(['wait', '--for=condition=Ready', '--timeout=10s', '-n', ns, 'px/ready']);
    expect(out).toContain('condition met');
    expect(await kubectl(['get', 'px', '-n', ns, 'ready'])).toMatch(
      /ready\s+External\s+(<none>\s+)?Ready\s+(<none>\s+)?True\s+True/,
    );
  });

  it('a status write pinned to a resourceVersion lands only while the Proxy is at it (stale after any other write)', async () => {
    const created = await createProxy(api, ns, 'pinned', { mode: 'Managed', provider: 'stub' });
    const ref = refOf(created);
    // The bridge's finalizer patch says the version it leaves.
    const added = await api.addFinalizer(created, FINALIZER);
    expect(added.result).toBe('added');
    expect(added.resourceVersion).toBe((await getProxy(api, ns, 'pinned')).metadata.resourceVersion);
    expect((await api.addFinalizer(await getProxy(api, ns, 'pinned'), FINALIZER)).result).toBe('present');

    const first = { phase: 'Provisioning' as const, conditions: [] };
    expect(await api.writeStatus(ref, first, { resourceVersion: added.resourceVersion! })).toBe('written');
    const after = await getProxy(api, ns, 'pinned');
    expect(after.status?.phase).toBe('Provisioning');
    // The same pin again: the first write moved the version on, so a late copy replaces nothing.
    const late = { phase: 'Pending' as const, conditions: [] };
    expect(await api.writeStatus(ref, late, { resourceVersion: added.resourceVersion! })).toBe('stale');
    expect((await getProxy(api, ns, 'pinned')).status?.phase).toBe('Provisioning');
    // Unpinned, as the workflow writes: lands.
    expect(await api.writeStatus(ref, late)).toBe('written');
    expect((await getProxy(api, ns, 'pinned')).status?.phase).toBe('Pending');
    // A status the schema rejects is an error, pinned or not, not 'stale'.
    const bad = { phase: 'Sideways', conditions: [] } as unknown as typeof first;
    const current = (await getProxy(api, ns, 'pinned')).metadata.resourceVersion!;
    await expect(api.writeStatus(ref, bad, { resourceVersion: current })).rejects.toThrow();
    // A recreated Proxy of the same name: gone, whatever the pin.
    await api.removeFinalizer(ref, FINALIZER);
    await kubectl(['delete', 'px', '-n', ns, 'pinned', '--wait=true']);
    const again = await createProxy(api, ns, 'pinned', { mode: 'Managed', provider: 'stub' });
    expect(await api.writeStatus(ref, first, { resourceVersion: again.metadata.resourceVersion! })).toBe(
      'gone',
    );
  });

  it('kubectl get ph shows TYPE, READY, TARGETS, LAST CHECK, AGE for a cluster-scoped ProviderHealth', async () => {
    const name = `ph-${ns}`;
    // The status write is pinned to a label: this test's own.
    const pin = { key: 'suite', value: 'crds' };
    const created = await createProviderHealth(healths, name, { [pin.key]: pin.value });
    const now = new Date().toISOString();
    await healths.writeStatus(created, pin, {
      type: 'local',
      targetsReady: '1/1',
      lastCheckTime: now,
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'AllTargetsReady',
          message: '1/1',
          lastTransitionTime: now,
        },
      ],
    });
    const out = await kubectl(['get', 'ph', name]);
    const lines = out.trim().split('\n');
    expect(lines[0]!.trim().split(/\s{2,}/)).toEqual([
      'NAME',
      'TYPE',
      'READY',
      'TARGETS',
      'LAST CHECK',
      'AGE',
    ]);
    expect(lines[1]).toMatch(new RegExp(`${name}\\s+local\\s+True\\s+1/1`));
    await deleteProviderHealth(healths, name);
  });
});
