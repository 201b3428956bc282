import { describe, expect, it } from 'vitest';
import { matchesTemplate, memberOf } from '../../activities/pool-activities.js';
import {
  controllingPool,
  memberProxy,
  memberTemplate,
  poolSelector,
  templateHashOf,
} from '../../kube/proxy-pools.js';
import type { Proxy, ProxyPool } from '../../resources/proxy-schema.js';
import { API_VERSION } from '../../kube/coordinates.js';

function pool(over: Partial<ProxyPool['spec']> = {}): ProxyPool {
  return {
    apiVersion: API_VERSION,
    kind: 'ProxyPool',
    metadata: { name: 'web', namespace: 'crawl', uid: 'pool-uid' },
    spec: {
      replicas: 3,
      strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 600 },
      template: {
        metadata: { labels: { team: 'crawl' } },
        spec: { mode: 'Managed', provider: 'local', port: 3128, maxLeases: 5, attributes: { geo: 'eu' } },
      },
      ...over,
    } as ProxyPool['spec'],
  };
}

function asProxy(made: ReturnType<typeof memberProxy>, uid = 'm-uid'): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: { ...made.metadata, uid, creationTimestamp: '2026-12-03T10:00:00Z' },
    spec: made.spec as Proxy['spec'],
  };
}

describe('the member template', () => {
  it('hashes the same whatever the key order, and differently for another spec', () => {
    const a = pool();
    const b = pool({
      template: {
        spec: { attributes: { geo: 'eu' }, maxLeases: 5, port: 3128, provider: 'local', mode: 'Managed' },
        metadata: { labels: { team: 'crawl' } },
      } as unknown as ProxyPool['spec']['template'],
    });
    expect(templateHashOf(a)).toBe(templateHashOf(b));
    expect(templateHashOf(a)).toMatch(/^[0-9a-f]{10}$/);
    const c = pool();
    c.spec.template.spec.attributes = { geo: 'us' };
    expect(templateHashOf(c)).not.toBe(templateHashOf(a));
    // The drain timeout is part of what members are made of.
    expect(
      templateHashOf(pool({ strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 } })),
    ).not.toBe(templateHashOf(a));
  });

  it('gives members the strategy’s drain timeout unless the template sets its own', () => {
    expect(memberTemplate(pool()).spec.drainTimeoutSeconds).toBe(600);
    const own = pool();
    own.spec.template.spec.drainTimeoutSeconds = 5;
    expect(memberTemplate(own).spec.drainTimeoutSeconds).toBe(5);
  });

  it('makes a member with the pool label, the hash label and a controller reference to the pool', () => {
    const made = memberProxy(pool(), 'web-abcde');
    expect(made.metadata.labels).toEqual({
      team: 'crawl',
      'crawl.example.com/pool': 'web',
      'crawl.example.com/pool-template-hash': templateHashOf(pool()),
    });
    expect(poolSelector('web')).toBe('crawl.example.com/pool=web');
    expect(controllingPool(asProxy(made))).toEqual({ name: 'web', uid: 'pool-uid' });
    const foreign = asProxy(made);
    foreign.metadata.ownerReferences = [{ ...foreign.metadata.ownerReferences![0]!, controller: false }];
    expect(controllingPool(foreign)).toBeUndefined();
  });

  it('sees a member edited by hand (spec, or a template label removed), not one carrying extra labels', () => {
    const p = pool();
    const member = asProxy(memberProxy(p, 'web-abcde'));
    expect(matchesTemplate(member, p)).toBe(true);
    expect(
      matchesTemplate(
        { ...member, metadata: { ...member.metadata, labels: { ...member.metadata.labels, extra: 'x' } } },
        p,
      ),
    ).toBe(true);
    expect(matchesTemplate({ ...member, spec: { ...member.spec, maxLeases: 9 } }, p)).toBe(false);
    const { team: _team, ...withoutTeam } = member.metadata.labels!;
    expect(matchesTemplate({ ...member, metadata: { ...member.metadata, labels: withoutTeam } }, p)).toBe(
      false,
    );
    // A member of an older template is being replaced, never restored.
    const old = {
      ...member,
      spec: { ...member.spec, maxLeases: 9 },
      metadata: {
        ...member.metadata,
        labels: { ...member.metadata.labels, 'crawl.example.com/pool-template-hash': 'older' },
      },
    };
    expect(memberOf(old, p, templateHashOf(p)).matchesTemplate).toBe(true);
  });
});
