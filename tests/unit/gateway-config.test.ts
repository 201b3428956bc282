/** The gateway's flags, read once into GatewayOptions (gateway/config.ts). */
import { describe, expect, it } from 'vitest';
import {
  DEV_GATEWAY_DEFAULTS,
  describeEgressPolicy,
  GatewayConfigError,
  readGatewayConfig,
} from '../../gateway/config.js';

describe('readGatewayConfig', () => {
  it('has the documented defaults and takes the lease settings the api takes', () => {
    expect(readGatewayConfig({ DISCOVERY_TOKEN: 'tok' })).toEqual({
      host: '',
      port: 8080,
      token: 'tok',
      insecureNoAuth: false,
      leaseCooldownMs: 15 * 60_000,
      maxLeaseTtlSeconds: 3600,
      defaultLeaseTtlSeconds: 300,
      leaseStore: { kind: 'memory' },
      connectTimeoutMs: 5_000,
      attempts: 3,
      rateLimitStatuses: [429, 403],
      maxTargetLabels: 500,
      egressDenyCidrs: [],
      egressAllowCidrs: [],
      egressAllowPorts: [
        [80, 80],
        [443, 443],
      ],
      authFailuresPerMinute: 20,
      tunnelIdleTimeoutMs: 5 * 60_000,
      tunnelMaxLifetimeMs: 0,
      responseTimeoutMs: 10 * 60_000,
      maxTunnelsPerClient: 256,
      maxConnections: 10_000,
    });
  });

  it('reads the limits, 0 turning a timeout off, and names a bad one', () => {
    expect(
      readGatewayConfig(
        {},
        {
          gatewayTunnelIdleTimeout: '0',
          gatewayTunnelMaxLifetime: '1h',
          gatewayResponseTimeout: '90s',
          gatewayMaxTunnelsPerClient: '0',
          gatewayMaxConnections: '50',
          tenantsFile: '/etc/egress/tenants.yaml',
        },
      ),
    ).toMatchObject({
      tunnelIdleTimeoutMs: 0,
      tunnelMaxLifetimeMs: 3_600_000,
      responseTimeoutMs: 90_000,
      maxTunnelsPerClient: 0,
      maxConnections: 50,
      tenantsFile: '/etc/egress/tenants.yaml',
    });
    expect(() => readGatewayConfig({}, { gatewayTunnelIdleTimeout: 'soon' })).toThrow(
      /^--gateway-tunnel-idle-timeout: /,
    );
    expect(() => readGatewayConfig({}, { gatewayMaxConnections: '0' })).toThrow(
      /^--gateway-max-connections: /,
    );
  });

  it('reads every flag', () => {
    expect(
      readGatewayConfig(
        {},
        {
          gatewayAddr: '127.0.0.1:9000',
          gatewayConnectTimeout: '1500ms',
          gatewayAttempts: '5',
          gatewayRateLimitStatuses: '429, 503,429',
          gatewayMaxTargetLabels: '0',
          leaseCooldown: '1m',
          maxLeaseTtl: '10m',
          leaseStore: 'redis://127.0.0.1:6379/1',
          egressDenyCidrs: '10.96.0.0/12, 10.244.1.7/16',
          egressAllowCidrs: '10.0.5.5',
          egressAllowPorts: '80,443,8000-8999',
          egressResolver: '10.96.0.10:53',
        },
      ),
    ).toMatchObject({
      egressDenyCidrs: ['10.96.0.0/12', '10.244.0.0/16'],
      egressAllowCidrs: ['10.0.5.5/32'],
      egressAllowPorts: [
        [80, 80],
        [443, 443],
        [8000, 8999],
      ],
      egressResolver: '10.96.0.10:53',
      host: '127.0.0.1',
      port: 9000,
      connectTimeoutMs: 1500,
      attempts: 5,
      rateLimitStatuses: [429, 503],
      maxTargetLabels: 0,
      leaseCooldownMs: 60_000,
      maxLeaseTtlSeconds: 600,
      leaseStore: { kind: 'redis', url: 'redis://127.0.0.1:6379/1' },
    });
    expect(readGatewayConfig({}, { gatewayRateLimitStatuses: '' }).rateLimitStatuses).toEqual([]);
    expect(readGatewayConfig({}, {}, { gatewayAddr: '127.0.0.1:8092' }).port).toBe(8092);
    // No SOCKS5 listener unless asked for; IPv6 listen addresses for both.
    expect(readGatewayConfig({}, {}).socks).toBeUndefined();
    expect(
      readGatewayConfig({}, { gatewayAddr: '[::1]:8080', gatewaySocksAddr: '[::1]:1080' }),
    ).toMatchObject({
      host: '::1',
      socks: { host: '::1', port: 1080 },
    });
    expect(readGatewayConfig({}, { egressAllowPorts: 'any' }).egressAllowPorts).toEqual([[1, 65535]]);
  });

  it('dev allows the loopback (on every port, as an allowance); a flag still wins over it', () => {
    expect(readGatewayConfig({}, {}, DEV_GATEWAY_DEFAULTS)).toMatchObject({
      port: 8092,
      socks: { host: '127.0.0.1', port: 8093 },
      egressAllowCidrs: ['127.0.0.0/8', '::1/128'],
      egressAllowPorts: [
        [80, 80],
        [443, 443],
      ],
    });
    expect(readGatewayConfig({}, { egressAllowCidrs: '' }, DEV_GATEWAY_DEFAULTS).egressAllowCidrs).toEqual(
      [],
    );
    expect(describeEgressPolicy(readGatewayConfig({}, {}, DEV_GATEWAY_DEFAULTS), true)).toBe(
      'egress policy: loopback allowed (dev); allowed 127.0.0.0/8,::1/128; ports 80,443',
    );
    expect(describeEgressPolicy(readGatewayConfig({}, {}))).toBe(
      'egress policy: private, loopback and link-local addresses refused; ports 80,443',
    );
  });

  it.each([
    [{ gatewayAddr: '8080' }, '--gateway-addr: expected host:port or :port, got "8080"'],
    [{ gatewaySocksAddr: '1080' }, '--gateway-socks-addr: expected host:port or :port, got "1080"'],
    [{ gatewayConnectTimeout: 'soon' }, '--gateway-connect-timeout: invalid duration "soon"'],
    [{ gatewayConnectTimeout: '0' }, '--gateway-connect-timeout must be positive'],
    [{ gatewayAttempts: '0' }, '--gateway-attempts: Too small'],
    [{ gatewayAttempts: '11' }, '--gateway-attempts: Too big'],
    [{ gatewayAttempts: 'three' }, '--gateway-attempts: must be a whole number, got "three"'],
    [
      { gatewayRateLimitStatuses: '429,42x' },
      '--gateway-rate-limit-statuses: expected HTTP status codes like 429,403, got "42x"',
    ],
    [{ gatewayMaxTargetLabels: '-1' }, '--gateway-max-target-labels: must be a whole number, got "-1"'],
    [{ leaseCooldown: 'x' }, '--lease-cooldown: invalid duration "x"'],
    [{ egressDenyCidrs: '10.0.0.0/8,10.0.0/33' }, '--egress-deny-cidrs: "10.0.0/33" is not a CIDR'],
    [{ egressAllowCidrs: 'internal' }, '--egress-allow-cidrs: "internal" is not a CIDR'],
    [{ egressAllowPorts: '443,70000' }, '--egress-allow-ports: "70000" is not a port or a range of ports'],
    [
      { egressAllowPorts: '9000-8000' },
      '--egress-allow-ports: "9000-8000" is not a port or a range of ports',
    ],
    [{ egressAllowPorts: ',' }, '--egress-allow-ports: no port given'],
    [{ egressResolver: 'dns.internal:53' }, '--egress-resolver: expected the ip:port of a DNS server'],
    [
      { leaseStore: 'http://x' },
      '--lease-store: expected memory, redis://host:port or rediss://host:port, got a http:// URL',
    ],
  ])('%j is refused naming the flag', (flags, message) => {
    expect(() => readGatewayConfig({}, flags)).toThrow(GatewayConfigError);
    expect(() => readGatewayConfig({}, flags)).toThrow(message);
  });
});
