/**
 * `egress-proxies api --no-prober`: a replica that serves leases only (issue
 * 33: at 10,000 Proxies the prober is a fifth of a core per replica, and every
 * replica probing every Proxy multiplies the probes). It grants leases on
 * the verdicts the Proxies carry and sends no probe; a replica with the
 * prober on, started after it against the same Proxy, does probe it, which
 * shows the first had every chance to.
 */
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  getProxy,
  kubeConfig,
  proxyClient,
  setProxyStatus,
} from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';

const TOKEN = 'no-prober-token';

describe('api --no-prober', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  const started: CliProcess[] = [];
  const sockets = new Set<Socket>();
  let endpoint: Server;
  let connections = 0;
  let namespace = '';

  const startApi = (args: string[]) => {
    const api = startCli(
      [
        'api',
        '--discovery-addr',
        '127.0.0.1:0',
        ...testServerArgs(),
        '--watch-namespaces',
        namespace,
        ...args,
      ],
      { env: { DISCOVERY_TOKEN: TOKEN } },
    );
    started.push(api);
    return api;
  };

  beforeAll(async () => {
    // The Proxy's endpoint: counts the connections a prober opens (and answers nothing).
    endpoint = createServer((socket) => {
      connections++;
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve));
    namespace = await createNamespace(kc, 'no-prober');
    await createProxy(objects, namespace, 'p1', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: (endpoint.address() as AddressInfo).port },
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
  }, 120_000);

  afterAll(async () => {
    for (const api of started) await api.stop();
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => endpoint?.close(() => resolve()));
  });

  it('grants leases on the Proxies’ verdicts, probes nothing, and says so', async () => {
    const api = startApi(['--no-prober']);
    const url = await leaseApiUrl(api, 150_000);
    const lease = await eventually(
      'a lease on p1',
      async () => {
        const res = await fetch(`${url}/v1/leases`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ selector: { suite: namespace } }),
        });
        return res.status === 201 ? ((await res.json()) as { proxy: { id: string } }) : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(lease.proxy.id).toBe(`${namespace}/p1`);
    // Said where the prober would have started (after the Temporal connection, so after the first lease may be served).
    await eventually(
      'the replica saying it runs no prober',
      () => Promise.resolve(api.output().includes('health prober off (--no-prober)') || undefined),
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('proxy_operator_leases_active');
    expect(metrics).not.toContain('egress_prober_');

    expect(connections).toBe(0);
    // A replica with the prober probes the same never-probed Proxy at once...
    const probing = startApi([]);
    await leaseApiUrl(probing, 150_000);
    await eventually(
      'a probe from the replica with the prober',
      () => Promise.resolve(connections > 0 || undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 100,
      },
    );
    // ...and the one without had seen that Proxy (it leased it) before the other even started.
    await eventually(
      'the probing replica’s start line',
      () => Promise.resolve(probing.output().includes('prober started') || undefined),
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    expect(api.output()).not.toContain('prober started');
  });
});
