import { describe, expect, it } from 'vitest';
import { API_VERSION } from '../../kube/coordinates.js';
import { createStaticProxyCatalog, proxyViewFromResource } from '../../api/proxy-catalog.js';
import {
  ANNOTATION_CORDONED,
  type Proxy,
  type ProxySpec,
  type ProxySpecInput,
} from '../../resources/proxy-schema.js';
import { partition } from '../../api/routes/selection.js';

// Specs as a user writes them: the view must not rely on the apiserver
// having materialised defaults.
function proxy(
  name: string,
  spec: ProxySpecInput,
  status?: Proxy['status'],
  meta: Partial<Proxy['metadata']> = {},
): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: { name, namespace: 'crawl', ...meta },
    spec: spec as ProxySpec,
    ...(status ? { status } : {}),
  };
}

const healthy = [
  {
    type: 'Healthy',
    status: 'True' as const,
    lastTransitionTime: '2026-01-01T00:00:00Z',
    reason: 'ProbeSucceeded',
    message: '',
  },
];

describe('proxyViewFromResource', () => {
  it('uses the endpoint of an External proxy, ignoring status.ip', () => {
    const v = proxyViewFromResource(
      proxy(
        'ext',
        { mode: 'External', endpoint: { host: 'proxy.example.net', port: 8080 } },
        { ip: '10.9.9.9' },
      ),
    );
    expect(v).toMatchObject({ id: 'crawl/ext', host: 'proxy.example.net', port: 8080 });
  });

  it('defaults an External endpoint port to 3128', () => {
    expect(proxyViewFromResource(proxy('ext', { mode: 'External', endpoint: { host: 'h' } })).port).toBe(
      3128,
    );
  });

  it('uses status.ip and spec.port for a Managed proxy', () => {
    const v = proxyViewFromResource(
      proxy(
        'm',
        { mode: 'Managed', provider: 'local', port: 3129 },
        { ip: '10.0.0.7', phase: 'Ready', latencyMillis: 42, conditions: healthy },
      ),
    );
    expect(v).toEqual({
      id: 'crawl/m',
      host: '10.0.0.7',
      port: 3129,
      attributes: {},
      phase: 'Ready',
      healthy: true,
      latencyMillis: 42,
      maxLeases: 5,
      deleting: false,
      draining: false,
      cordoned: false,
      pool: '',
      provider: 'local',
      // Its generated Secret, by name: the view never holds the values.
      credentialsRef: {
        secret: 'm-proxy-auth',
        usernameKey: 'username',
        passwordKey: 'password',
        generated: true,
      },
    });
  });

  it('reads the cordon annotation ("true" only), and selection leaves a cordoned proxy out as it does a draining one', () => {
    const make = (name: string, value?: string) =>
      proxyViewFromResource(
        proxy(
          name,
          { mode: 'External', endpoint: { host: '10.0.0.1', port: 3128 } },
          { phase: 'Ready', conditions: healthy },
          value === undefined ? {} : { annotations: { [ANNOTATION_CORDONED]: value } },
        ),
      );
    const views = [make('a', 'true'), make('b', 'false'), make('c')];
    expect(views.map((v) => v.cordoned)).toEqual([true, false, false]);
    expect(partition(views, []).candidates.map((v) => v.id)).toEqual(['crawl/b', 'crawl/c']);
  });

  it("uses the port the provider chose (status.port: a vendor's super-proxy, a list entry) over spec.port", () => {
    const v = proxyViewFromResource(
      proxy(
        'v',
        { mode: 'Managed', provider: 'vend', port: 3129 },
        { ip: '127.0.0.1', port: 33335, phase: 'Ready', conditions: healthy },
      ),
    );
    expect(v).toMatchObject({ host: '127.0.0.1', port: 33335, provider: 'vend' });
  });

  it('has no host for a Managed proxy before its IP is known, and no phase before the first status', () => {
    const v = proxyViewFromResource(proxy('m', { mode: 'Managed', provider: 'local' }));
    expect(v).toMatchObject({ host: '', port: 3128, phase: '', healthy: false, latencyMillis: 0 });
  });

  it('is healthy only when the Healthy condition is True', () => {
    const cond = (status: 'True' | 'False' | 'Unknown', type = 'Healthy') => [
      { ...healthy[0]!, type, status },
    ];
    const spec = { mode: 'Managed' as const, provider: 'local' };
    expect(proxyViewFromResource(proxy('a', spec, { conditions: cond('False') })).healthy).toBe(false);
    expect(proxyViewFromResource(proxy('a', spec, { conditions: cond('Unknown') })).healthy).toBe(false);
    expect(proxyViewFromResource(proxy('a', spec, { conditions: cond('True', 'Provisioned') })).healthy).toBe(
      false,
    );
  });

  it('keeps an explicit maxLeases of 0 and marks deletion', () => {
    const v = proxyViewFromResource(
      proxy('d', { mode: 'External', endpoint: { host: 'h' }, maxLeases: 0 }, undefined, {
        deletionTimestamp: '2026-01-01T00:00:00Z',
      }),
    );
    expect(v.maxLeases).toBe(0);
    expect(v.deleting).toBe(true);
  });
});

describe('createStaticProxyCatalog', () => {
  it('lists by id in byte order and replaces the snapshot wholesale', () => {
    const spec = { mode: 'External' as const, endpoint: { host: 'h' } };
    const catalog = createStaticProxyCatalog([proxy('b', spec), proxy('B', spec), proxy('a', spec)]);
    expect(catalog.synced()).toBe(true);
    expect(catalog.list().map((p) => p.id)).toEqual(['crawl/B', 'crawl/a', 'crawl/b']);
    catalog.replace([proxy('z', spec)]);
    expect(catalog.list().map((p) => p.id)).toEqual(['crawl/z']);
  });

  it('reads the Draining condition and the pool label', () => {
    const at = '2026-12-03T10:00:00Z';
    const v = proxyViewFromResource(
      proxy(
        'm',
        { mode: 'Managed', provider: 'local' },
        {
          ip: '10.0.0.8',
          conditions: [
            {
              type: 'Healthy',
              status: 'True',
              reason: 'ProbeSucceeded',
              message: '',
              lastTransitionTime: at,
            },
            { type: 'Draining', status: 'True', reason: 'Replacing', message: '', lastTransitionTime: at },
          ],
        },
        { labels: { 'crawl.example.com/pool': 'web' } },
      ),
    );
    expect(v).toMatchObject({ draining: true, healthy: true, pool: 'web' });
  });
});
