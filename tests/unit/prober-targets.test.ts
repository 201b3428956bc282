import { describe, expect, it } from 'vitest';
import { API_VERSION } from '../../kube/coordinates.js';
import { DEFAULT_HEALTH_CHECK, type Proxy } from '../../resources/proxy-schema.js';
import {
  createStaticProbeTargets,
  targetFromProxy,
  type EntryHealthLookup,
  type ProbeTarget,
} from '../../prober/targets.js';

const hc = { ...DEFAULT_HEALTH_CHECK, expectedStatusCodes: [200, 204] };

function proxy(
  over: { spec?: Partial<Proxy['spec']>; status?: Proxy['status']; deleting?: boolean } = {},
): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: {
      name: 'p1',
      namespace: 'ns',
      uid: 'uid-1',
      ...(over.deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    spec: {
      mode: 'Managed',
      provider: 'local',
      port: 3128,
      maxLeases: 5,
      healthCheck: hc,
      ...over.spec,
    },
    ...(over.status ? { status: over.status } : {}),
  };
}

const healthy = (status: 'True' | 'False' | 'Unknown') => ({
  type: 'Healthy',
  status,
  reason: 'x',
  message: 'x',
  lastTransitionTime: '2026-01-01T00:00:00Z',
});

describe("targetFromProxy: the providers-config entry's health: block", () => {
  const entries: EntryHealthLookup = (name) =>
    name === 'vendor' ? { probeURL: 'http://cheap.example/204', intervalSeconds: 300 } : undefined;
  const status = { ip: '127.9.0.1', conditions: [healthy('True')] };

  it('applies to a Managed Proxy of the entry where the Proxy holds the shipped defaults', () => {
    const t = targetFromProxy(proxy({ spec: { provider: 'vendor' }, status }), entries);
    expect(t?.healthCheck).toEqual({ ...hc, probeURL: 'http://cheap.example/204', intervalSeconds: 300 });
  });

  it("a Proxy's own value wins, field by field", () => {
    const t = targetFromProxy(
      proxy({ spec: { provider: 'vendor', healthCheck: { ...hc, intervalSeconds: 10 } }, status }),
      entries,
    );
    expect(t?.healthCheck).toEqual({ ...hc, probeURL: 'http://cheap.example/204', intervalSeconds: 10 });
  });

  it('another entry, an entry without a block and an External Proxy keep their own settings', () => {
    expect(targetFromProxy(proxy({ spec: { provider: 'local' }, status }), entries)?.healthCheck).toEqual(hc);
    expect(targetFromProxy(proxy({ spec: { provider: 'vendor' }, status }))?.healthCheck).toEqual(hc);
    const external = proxy({
      spec: { mode: 'External', provider: undefined, endpoint: { host: '127.9.0.2', port: 3128 } },
    });
    delete external.spec.provider;
    expect(targetFromProxy(external, () => ({ intervalSeconds: 300 }))?.healthCheck).toEqual(hc);
  });
});

describe('targetFromProxy', () => {
  it('a Managed proxy is probed at status.ip on spec.port, seeded from its Healthy condition', () => {
    const t = targetFromProxy(
      proxy({ status: { ip: '127.9.0.1', latencyMillis: 12, conditions: [healthy('True')] } }),
    );
    expect(t).toEqual({
      key: 'ns/p1',
      ref: { namespace: 'ns', name: 'p1', uid: 'uid-1' },
      host: '127.9.0.1',
      port: 3128,
      healthCheck: hc,
      condition: 'Healthy',
      latencyMillis: 12,
      credentialsRef: {
        secret: 'p1-proxy-auth',
        usernameKey: 'username',
        passwordKey: 'password',
        generated: true,
      },
    });
    expect(
      targetFromProxy(proxy({ status: { ip: '127.9.0.1', conditions: [healthy('False')] } }))?.condition,
    ).toBe('Unhealthy');
    expect(
      targetFromProxy(proxy({ status: { ip: '127.9.0.1', conditions: [healthy('Unknown')] } }))?.condition,
    ).toBe('Unknown');
    expect(targetFromProxy(proxy({ status: { ip: '127.9.0.1' } }))?.condition).toBe('Unknown');
  });

  it('a Managed proxy without an IP, and any proxy being deleted, has nothing to probe', () => {
    expect(targetFromProxy(proxy())).toBeUndefined();
    expect(targetFromProxy(proxy({ status: { phase: 'Provisioning' } }))).toBeUndefined();
    expect(targetFromProxy(proxy({ status: { ip: '127.9.0.1' }, deleting: true }))).toBeUndefined();
  });

  it('an External proxy is probed at its endpoint', () => {
    const t = targetFromProxy(
      proxy({
        spec: { mode: 'External', provider: undefined, endpoint: { host: 'proxy.example', port: 8080 } },
      }),
    );
    expect(t).toMatchObject({ host: 'proxy.example', port: 8080, condition: 'Unknown' });
  });

  it('fills health-check fields an old object lacks with the defaults', () => {
    const p = proxy({ status: { ip: '127.9.0.1' } });
    (p.spec as { healthCheck?: unknown }).healthCheck = {
      probeURL: 'http://127.0.0.1:1/',
      intervalSeconds: 0,
    };
    expect(targetFromProxy(p)?.healthCheck).toEqual({ ...hc, probeURL: 'http://127.0.0.1:1/' });
  });
});

describe('static targets', () => {
  it('notifies on appear, change and removal, and not on an identical update', () => {
    const targets = createStaticProbeTargets();
    const heard: string[] = [];
    targets.subscribe((key) => heard.push(key));
    const t: ProbeTarget = targetFromProxy(proxy({ status: { ip: '127.9.0.1' } }))!;
    targets.set(t);
    targets.set({ ...t });
    targets.set({ ...t, condition: 'Healthy' });
    targets.remove(t.key);
    targets.remove(t.key);
    expect(heard).toEqual(['ns/p1', 'ns/p1', 'ns/p1']);
    expect(targets.get(t.key)).toBeUndefined();
  });
});
