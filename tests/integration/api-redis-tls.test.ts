/**
 * The lease API process on a Redis that speaks only TLS: Debian's
 * redis-server with `tls-port` and a certificate from a CA made here by
 * openssl. `egress-proxies api --lease-store rediss://... --lease-store-ca-file`
 * starts, grants a lease whose slot is in that Redis, and without the CA
 * file refuses to start, naming the Redis and the certificate problem.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REDIS_PREFIX } from '../../api/redis-lease-store.js';
import { leaseApiUrl, startCli, type CliProcess, testServerArgs } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  getProxy,
  kubeConfig,
  proxyClient,
  setProxyStatus,
} from '../helpers/kube.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { eventually } from '../helpers/temporal.js';
import { makePki, type Pki } from '../../local-servers/pki.js';
import { freePort as closedPort } from '../../local-servers/ports.js';

const TOKEN = 'tls-token';

function startApi(args: string[]): CliProcess {
  return startCli(['api', '--discovery-addr', '127.0.0.1:0', ...testServerArgs(), ...args], {
    env: { DISCOVERY_TOKEN: TOKEN },
  });
}

describe('lease API on a TLS-only Redis (rediss://)', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  const started: CliProcess[] = [];
  let dir = '';
  let pki: Pki;
  let redis: RunningRedis;
  let inspect: Redis;
  let namespace = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'redis-tls-'));
    pki = await makePki(dir);
    redis = await startRedis({ tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca } });
    inspect = new Redis(redis.url, { lazyConnect: true, tls: { ca: readFileSync(pki.ca) } });
    await inspect.connect();

    namespace = await createNamespace(kc, 'redis-tls');
    await createProxy(objects, namespace, 'p1', {
      mode: 'External',
      // A closed loopback port: the api's prober sends nothing off the machine.
      endpoint: { host: '127.0.0.1', port: await closedPort() },
      maxLeases: 1,
      attributes: { suite: namespace },
    });
    await setProxyStatus(objects, await getProxy(objects, namespace, 'p1'), {
      phase: 'Ready',
      latencyMillis: 10,
      conditions: [
        {
          type: 'Healthy',
          status: 'True',
          lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          reason: 'Probe',
          message: 'ok',
        },
      ],
    });
  }, 200_000);

  afterAll(async () => {
    for (const api of started) await api.stop();
    inspect?.disconnect();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the test Redis speaks only TLS: a plaintext client gets no answer', async () => {
    expect(redis.url).toMatch(/^rediss:\/\/127\.0\.0\.1:\d+$/);
    const plain = new Redis(redis.url.replace(/^rediss:/, 'redis:'), {
      lazyConnect: true,
      connectTimeout: 1_000,
      commandTimeout: 1_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    plain.on('error', () => {});
    await expect(plain.connect().then(() => plain.ping())).rejects.toThrow();
    plain.disconnect();
    expect(await inspect.ping()).toBe('PONG');
  });

  it('grants a lease through Redis over TLS with --lease-store-ca-file', async () => {
    const api = startApi([
      '--lease-store',
      redis.url,
      '--lease-store-ca-file',
      pki.ca,
      '--watch-namespaces',
      namespace,
    ]);
    started.push(api);
    const url = await leaseApiUrl(api, 150_000);
    expect(api.output()).toContain('lease store: using Redis');
    const lease = await eventually(
      'a lease on p1',
      async () => {
        const res = await fetch(`${url}/v1/leases`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ selector: { suite: namespace }, target: 'example.com' }),
        });
        const body = (await res.json()) as { leaseID?: string; proxy?: { id: string } };
        // 409 until the informer has the healthy proxy.
        return res.status === 201 ? body : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(lease.proxy?.id).toBe(`${namespace}/p1`);
    // The slot lives in the TLS Redis, under p1's UID.
    const uid = (await getProxy(objects, namespace, 'p1')).metadata.uid!;
    expect(await inspect.hgetall(`${DEFAULT_REDIS_PREFIX}active`)).toEqual({ [uid]: '1' });
    expect(await inspect.hget(`${DEFAULT_REDIS_PREFIX}lease:${lease.leaseID}`, 'p')).toBe(uid);
    await api.stop();
  });

  it('refuses to start without the CA file, naming the Redis and the certificate problem', async () => {
    const api = startApi(['--lease-store', redis.url, '--watch-namespaces', namespace]);
    started.push(api);
    const code = await api.exited(60_000);
    expect(code).not.toBe(0);
    expect(api.output()).toMatch(/lease store: cannot use Redis at rediss:\/\/127\.0\.0\.1:\d+\/?: /);
    expect(api.output()).toMatch(/self[- ]signed certificate|unable to (get|verify)/i);
  });
});
