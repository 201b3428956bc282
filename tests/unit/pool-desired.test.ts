import { describe, expect, it } from 'vitest';
import { membersVersion } from '../../k8s-bridge/pool-desired.js';
import type { Proxy } from '../../resources/proxy-schema.js';

function member(status: Proxy['status'] = {}): Proxy {
  return {
    apiVersion: 'crawl.example.com/v1alpha1',
    kind: 'Proxy',
    metadata: { name: 'm-1', uid: 'uid-1', generation: 1, labels: { pool: 'p' } },
    spec: { mode: 'Managed', provider: 'aws-spot', port: 3128 },
    status,
  } as unknown as Proxy;
}

describe("the members' version the bridge sends its pool", () => {
  it('changes when a member learns the end of its instance (a Spot notice), not on a routine status write', () => {
    const steady = membersVersion([member({ ip: '203.0.113.7' })]);
    // A latency report or a new lease count: nothing the pool decides on.
    expect(membersVersion([member({ ip: '203.0.113.7', latencyMillis: 12 })])).toBe(steady);
    const noticed = membersVersion([member({ ip: '203.0.113.7', expiresAt: '2026-12-06T15:00:00Z' })]);
    expect(noticed).not.toBe(steady);
    expect(membersVersion([member({ ip: '203.0.113.7', expiresAt: '2026-12-06T15:01:00Z' })])).not.toBe(
      noticed,
    );
  });
});
