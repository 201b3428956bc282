import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ApiConfigError,
  parseDuration,
  parseListenAddress,
  readApiConfig,
  requireAuthOffLoopback,
} from '../../api/config.js';
import { planCommand } from '../../cli/plan.js';
import { parseTraceparent } from '../../tracing/http.js';
import { rfc3339 } from '../../api/app.js';

const dir = mkdtempSync(join(tmpdir(), 'lease-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('readApiConfig', () => {
  it('applies the documented defaults', () => {
    expect(readApiConfig({}, {})).toEqual({
      host: '',
      port: 8090,
      token: '',
      leaseCooldownMs: 15 * 60_000,
      maxLeaseTtlSeconds: 3600,
      defaultLeaseTtlSeconds: 300,
      leaseStore: { kind: 'memory' },
      poolDemandIntervalMs: 5_000,
      prober: true,
      insecureNoAuth: false,
      authFailuresPerMinute: 20,
      dashboard: true,
    });
    expect(
      readApiConfig({}, { dashboard: false, temporalWebUrl: 'https://temporal.example:8080/' }),
    ).toMatchObject({
      dashboard: false,
      temporalWebUrl: 'https://temporal.example:8080/',
    });
    expect(() => readApiConfig({}, { temporalWebUrl: 'temporal-ui:8080' })).toThrow(
      '--temporal-web-url: an http:// or https:// URL',
    );
    expect(readApiConfig({}, { poolDemandInterval: '500ms' }).poolDemandIntervalMs).toBe(500);
    expect(readApiConfig({}, { tenantsFile: '/etc/t.yaml', authFailuresPerMinute: '0' })).toMatchObject({
      tenantsFile: '/etc/t.yaml',
      authFailuresPerMinute: 0,
    });
    expect(() => readApiConfig({}, { authFailuresPerMinute: 'many' })).toThrow(
      '--auth-failures-per-minute: must be a whole number, got "many"',
    );
    // commander's --no-prober sets prober: false; absent, it is on.
    expect(readApiConfig({}, { prober: false }).prober).toBe(false);
  });

  it('reads the Redis lease store: URL, password from a Secret file, CA for TLS', () => {
    const password = join(dir, 'redis-password');
    writeFileSync(password, 'p@ss\n');
    const ca = join(dir, 'ca.pem');
    writeFileSync(ca, '-----BEGIN CERTIFICATE-----\n');
    expect(readApiConfig({}, { leaseStore: 'redis://redis.crawl:6379/2' }).leaseStore).toEqual({
      kind: 'redis',
      url: 'redis://redis.crawl:6379/2',
    });
    expect(
      readApiConfig(
        {},
        {
          leaseStore: 'rediss://default@redis.crawl:6380',
          leaseStorePasswordFile: password,
          leaseStoreCaFile: ca,
        },
      ).leaseStore,
    ).toEqual({ kind: 'redis', url: 'rediss://default@redis.crawl:6380', password: 'p@ss', caFile: ca });
  });

  it('never quotes a Redis URL (it may hold a password) in its errors', () => {
    for (const leaseStore of [
      'http://:hunter2@redis:6379',
      'redis://:hunter2@redis:6379/not-a-db',
      'hunter2',
    ]) {
      let message = '';
      try {
        readApiConfig({}, { leaseStore });
      } catch (err) {
        expect(err).toBeInstanceOf(ApiConfigError);
        message = (err as Error).message;
      }
      expect(message).toMatch(/--lease-store/);
      expect(message).not.toContain('hunter2');
    }
  });

  it('reads flags and DISCOVERY_TOKEN', () => {
    const cfg = readApiConfig(
      { DISCOVERY_TOKEN: 's3cret' },
      { discoveryAddr: '127.0.0.1:9000', leaseCooldown: '90s', maxLeaseTtl: '2h' },
    );
    expect(cfg).toMatchObject({
      host: '127.0.0.1',
      port: 9000,
      token: 's3cret',
      leaseCooldownMs: 90_000,
      maxLeaseTtlSeconds: 7200,
    });
  });

  it('reads the token from a file, trimming the trailing newline', () => {
    const file = join(dir, 'token');
    writeFileSync(file, '  abc123\n');
    expect(readApiConfig({}, { discoveryTokenFile: file }).token).toBe('abc123');
  });

  it.each([
    [{}, { maxLeaseTtl: '1m' }, /max-lease-ttl/],
    [{}, { maxLeaseTtl: '1500ms' }, /whole seconds/],
    [{}, { leaseCooldown: '0' }, /lease-cooldown must be positive/],
    [{}, { leaseCooldown: '-5m' }, /lease-cooldown/],
    [{}, { leaseCooldown: '15 minutes' }, /invalid duration/],
    [{}, { poolDemandInterval: '0' }, /pool-demand-interval must be positive/],
    [{}, { poolDemandInterval: 'often' }, /pool-demand-interval/],
    [{}, { discoveryAddr: '8090' }, /discovery-addr/],
    [{}, { discoveryAddr: ':70000' }, /discovery-addr/],
    [{ DISCOVERY_TOKEN: 'x' }, { discoveryTokenFile: '/nonexistent' }, /not both/],
    [{}, { discoveryTokenFile: '/nonexistent/token' }, /cannot read/],
    [{}, { leaseStore: 'postgres://db:5432' }, /expected memory, redis:\/\/host:port/],
    [{}, { leaseStore: 'redis://' }, /no host/],
    [{}, { leaseStorePasswordFile: '/x' }, /needs --lease-store redis/],
    [{}, { leaseStore: 'redis://r:6379', leaseStoreCaFile: '/x' }, /needs a rediss:\/\//],
    [{}, { leaseStore: 'redis://r:6379', leaseStorePasswordFile: '/nonexistent/pw' }, /cannot read/],
  ])('rejects %j %j', (env, flags, message) => {
    expect(() => readApiConfig(env, flags)).toThrow(ApiConfigError);
    expect(() => readApiConfig(env, flags)).toThrow(message);
  });
});

describe('parseDuration', () => {
  it.each([
    ['15m', 900_000],
    ['1h', 3_600_000],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    ['250ms', 250],
    ['0', 0],
  ])('%s is %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['', '15', 'm', '1d', '1h 30m', '+1h'])('rejects %j', (text) => {
    expect(() => parseDuration(text)).toThrow(ApiConfigError);
  });
});

describe('parseListenAddress', () => {
  it.each([
    [':8090', { host: '', port: 8090 }],
    ['127.0.0.1:0', { host: '127.0.0.1', port: 0 }],
    ['[::1]:8090', { host: '::1', port: 8090 }],
  ])('%s', (text, want) => {
    expect(parseListenAddress(text)).toEqual(want);
  });
});

describe('parseTraceparent', () => {
  const valid = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  it('parses a valid header', () => {
    expect(parseTraceparent(valid)).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      parentId: '00f067aa0ba902b7',
      flags: 1,
    });
  });
  it.each([
    undefined,
    '',
    'garbage',
    '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
    'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01',
    `${valid}-extra`,
  ])('rejects %j', (header) => {
    expect(parseTraceparent(header)).toBeUndefined();
  });
});

describe('rfc3339', () => {
  it('prints whole seconds without a fraction and trims trailing zeros, like Go', () => {
    expect(rfc3339(Date.UTC(2026, 7, 11, 22, 5, 0))).toBe('2026-08-11T22:05:00Z');
    expect(rfc3339(Date.UTC(2026, 7, 11, 22, 5, 0, 120))).toBe('2026-08-11T22:05:00.12Z');
    expect(rfc3339(Date.UTC(2026, 7, 11, 22, 5, 0, 7))).toBe('2026-08-11T22:05:00.007Z');
  });
});

describe('no listening off the loopback without auth', () => {
  const open = { token: '', insecureNoAuth: false };
  it('refuses a lease API or gateway with no token on an address others reach, naming --insecure-no-auth', () => {
    for (const host of ['', '0.0.0.0', '10.1.2.3', '::']) {
      expect(() =>
        requireAuthOffLoopback('the gateway', { host, port: 8080 }, open, '--gateway-addr'),
      ).toThrow(
        /the gateway would listen on .*8080.* with no token: set DISCOVERY_TOKEN, --discovery-token-file or --tenants-file, listen on the loopback \(--gateway-addr 127\.0\.0\.1:8080\), or pass --insecure-no-auth/,
      );
    }
  });

  it('lets it start with a token, with --insecure-no-auth, or on the loopback', () => {
    const listen = { host: '', port: 8090 };
    expect(() =>
      requireAuthOffLoopback('x', listen, { token: 't', insecureNoAuth: false }, '--f'),
    ).not.toThrow();
    expect(() =>
      requireAuthOffLoopback('x', listen, { token: '', insecureNoAuth: true }, '--f'),
    ).not.toThrow();
    for (const host of ['127.0.0.1', '127.9.9.9', '::1', '[::1]', 'localhost'])
      expect(() => requireAuthOffLoopback('x', { host, port: 1 }, open, '--f')).not.toThrow();
  });

  it('is what api, gateway and dev plans check', () => {
    expect(() => planCommand('api', {}, {})).toThrow(/lease API would listen on :8090 \(every interface\)/);
    expect(() => planCommand('gateway', {}, {})).toThrow(/gateway would listen on :8080/);
    expect(planCommand('api', { insecureNoAuth: true }, {}).api?.options.insecureNoAuth).toBe(true);
    expect(planCommand('gateway', {}, { DISCOVERY_TOKEN: 't' }).gateway?.options.token).toBe('t');
    // dev listens on the loopback: no token needed.
    expect(planCommand('dev', {}, {}).gateway?.options.host).toBe('127.0.0.1');
    expect(() => planCommand('dev', { gatewayAddr: ':8092' }, {})).toThrow(/--insecure-no-auth/);
    // The SOCKS5 listener is held to the same rule, on its own address.
    expect(() => planCommand('dev', { gatewaySocksAddr: ':1080' }, {})).toThrow(
      /SOCKS5 listener would listen on :1080 .*--gateway-socks-addr 127\.0\.0\.1:1080/,
    );
    expect(planCommand('dev', {}, {}).gateway?.options.socks).toEqual({ host: '127.0.0.1', port: 8093 });
  });
});
