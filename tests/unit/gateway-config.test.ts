/** The gateway's flags, read once into GatewayOptions (gateway/config.ts). */
import { describe, expect, it } from 'vitest';
import { GatewayConfigError, readGatewayConfig } from '../../gateway/config.js';

describe('readGatewayConfig', () => {
  it('has the documented defaults and takes the lease settings the api takes', () => {
    expect(readGatewayConfig({ DISCOVERY_TOKEN: 'tok' })).toEqual({
      host: '',
      port: 8080,
      token: 'tok',
      leaseCooldownMs: 15 * 60_000,
      maxLeaseTtlSeconds: 3600,
      defaultLeaseTtlSeconds: 300,
      leaseStore: { kind: 'memory' },
      connectTimeoutMs: 5_000,
      attempts: 3,
      rateLimitStatuses: [429, 403],
      maxTargetLabels: 500,
    });
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
        },
      ),
    ).toMatchObject({
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
  });

  it.each([
    [{ gatewayAddr: '8080' }, '--gateway-addr: expected host:port or :port, got "8080"'],
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
    [
      { leaseStore: 'http://x' },
      '--lease-store: expected memory, redis://host:port or rediss://host:port, got a http:// URL',
    ],
  ])('%j is refused naming the flag', (flags, message) => {
    expect(() => readGatewayConfig({}, flags)).toThrow(GatewayConfigError);
    expect(() => readGatewayConfig({}, flags)).toThrow(message);
  });
});
