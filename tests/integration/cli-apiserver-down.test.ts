/**
 * The `bridge` and `api` subcommands as real processes, started while the
 * apiserver cannot be reached: they keep retrying their first listing (a
 * retry timer must keep the process alive; an unref'd one let Node exit
 * silently with code 13) and come up once the apiserver answers. The
 * outage is a closed TCP relay in front of the shared apiserver.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { leaseApiUrl, startCli, type CliProcess } from '../helpers/cli.js';
import { kubeConfig } from '../helpers/kube.js';
import { TcpRelay } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';

describe('bridge and api started while the apiserver is unreachable', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-down-'));
  // A namespace of their own: a bridge watching every namespace of the shared
  // apiserver would start other files' Proxies' workflows on its task queue,
  // which no worker serves, and an api's prober would write their health.
  const watched = ['--watch-namespaces', `down-${randomBytes(4).toString('hex')}`];
  const children: CliProcess[] = [];
  let relay: TcpRelay | undefined;

  afterAll(async () => {
    for (const c of children) await c.stop();
    await relay?.cut();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keep retrying instead of exiting, then come up when it answers', async () => {
    const kc = kubeConfig();
    const apiserver = new URL(kc.getCurrentCluster()!.server);
    relay = new TcpRelay({ host: apiserver.hostname, port: Number(apiserver.port) });
    await relay.open();
    await relay.cut();
    const relayed = new KubeConfig();
    relayed.loadFromOptions({
      clusters: kc.clusters.map((c) => ({ ...c, server: `https://127.0.0.1:${relay!.port}` })),
      users: kc.users,
      contexts: kc.contexts,
      currentContext: kc.getCurrentContext(),
    });
    const kubeconfigPath = join(dir, 'kubeconfig');
    writeFileSync(kubeconfigPath, relayed.exportConfig(), { mode: 0o600 });

    const start = (args: string[]) => {
      const child = startCli(
        [
          ...args,
          '--kubeconfig',
          kubeconfigPath,
          '--temporal-address',
          inject('temporalAddress'),
          '--temporal-namespace',
          inject('temporalNamespace'),
          ...watched,
          // The api runs no workflows: it does not offer --task-queue.
          ...(args[0] === 'api' ? [] : ['--task-queue', `down-${process.pid}`]),
        ],
        { env: { DISCOVERY_TOKEN: 't' } },
      );
      children.push(child);
      return child;
    };
    const exitCode = (c: CliProcess) => c.proc.exitCode ?? c.proc.signalCode ?? undefined;
    const bridge = start(['bridge']);
    const api = start(['api', '--discovery-addr', '127.0.0.1:0']);

    // Several retries fail against the closed port; both processes stay up.
    for (const [name, c] of [
      ['bridge', bridge],
      ['api', api],
    ] as const) {
      await eventually(
        `${name} to report a failed listing`,
        () =>
          Promise.resolve((c.output().match(/watch stopped; restarting/g) ?? []).length >= 2 || undefined),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
    }
    // Two retries more: each process went on past its failed listings.
    for (const [name, c] of [
      ['bridge', bridge],
      ['api', api],
    ] as const) {
      await eventually(
        `${name} to keep retrying`,
        () =>
          Promise.resolve((c.output().match(/watch stopped; restarting/g) ?? []).length >= 4 || undefined),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
    }
    expect(exitCode(bridge), bridge.output()).toBeUndefined();
    expect(exitCode(api), api.output()).toBeUndefined();

    await relay.open();
    await bridge.waitFor(/bridge started/, 60_000);
    const listening = await leaseApiUrl(api, 60_000);
    const health = await fetch(`${listening}/healthz`);
    expect(health.status).toBe(200);
    expect(exitCode(bridge)).toBeUndefined();
    expect(exitCode(api)).toBeUndefined();
  }, 150_000);

  it('api exits with an error naming the cause when its port is taken, instead of hanging on what it started', async () => {
    const { createServer } = await import('node:net');
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      const api = startCli(
        [
          'api',
          '--discovery-addr',
          `127.0.0.1:${port}`,
          '--kubeconfig',
          inject('kubeconfigPath'),
          '--temporal-address',
          inject('temporalAddress'),
          ...watched,
        ],
        { env: { LOG_LEVEL: 'warn', DISCOVERY_TOKEN: 't' } },
      );
      children.push(api);
      // Still running after 30 s rejects with its output: the hang this test is about.
      const code = await api.exited(30_000);
      expect(code, api.output()).not.toBeNull();
      expect(code).not.toBe(0);
      expect(api.output()).toContain('EADDRINUSE');
    } finally {
      await new Promise((r) => taken.close(r));
    }
  }, 60_000);
});
