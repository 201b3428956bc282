/**
 * The `bridge` and `api` subcommands as real processes, started while the
 * apiserver cannot be reached: they keep retrying their first listing (a
 * retry timer must keep the process alive; an unref'd one let Node exit
 * silently with code 13) and come up once the apiserver answers. The
 * outage is a closed TCP relay in front of the shared apiserver.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { kubeConfig } from '../helpers/kube.js';
import { TcpRelay } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('bridge and api started while the apiserver is unreachable', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-down-'));
  const children: Array<{ name: string; proc: ChildProcess; output: string; exit?: number | null }> = [];
  let relay: TcpRelay | undefined;

  afterAll(async () => {
    for (const c of children) {
      if (c.proc.exitCode === null && c.proc.signalCode === null) {
        c.proc.kill('SIGTERM');
        await new Promise((r) => c.proc.once('exit', r));
      }
    }
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

    const start = (name: string, args: string[]) => {
      const proc = spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          join(ROOT, 'cli/entry.ts'),
          ...args,
          '--kubeconfig',
          kubeconfigPath,
          '--temporal-address',
          inject('temporalAddress'),
          '--temporal-namespace',
          inject('temporalNamespace'),
          // The api runs no workflows: it does not offer --task-queue.
          ...(name === 'api' ? [] : ['--task-queue', `down-${process.pid}`]),
        ],
        { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info', DISCOVERY_TOKEN: 't' }, stdio: 'pipe' },
      );
      const child: (typeof children)[number] = { name, proc, output: '' };
      proc.stdout.on('data', (d: Buffer) => (child.output += d.toString()));
      proc.stderr.on('data', (d: Buffer) => (child.output += d.toString()));
      proc.once('exit', (code) => (child.exit = code));
      children.push(child);
      return child;
    };
    const bridge = start('bridge', ['bridge']);
    const api = start('api', ['api', '--discovery-addr', '127.0.0.1:0']);

    // Several retries fail against the closed port; both processes stay up.
    for (const c of [bridge, api]) {
      await eventually(
        `${c.name} to report a failed listing`,
        () => Promise.resolve((c.output.match(/watch stopped; restarting/g) ?? []).length >= 2 || undefined),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
    }
    // Two retries more: each process went on past its failed listings.
    for (const c of [bridge, api]) {
      await eventually(
        `${c.name} to keep retrying`,
        () => Promise.resolve((c.output.match(/watch stopped; restarting/g) ?? []).length >= 4 || undefined),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
    }
    expect(bridge.exit, bridge.output).toBeUndefined();
    expect(api.exit, api.output).toBeUndefined();

    await relay.open();
    await eventually(
      'the bridge to start',
      () => Promise.resolve(bridge.output.includes('bridge started') || undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 200,
      },
    );
    const listening = await eventually(
      'the lease API to listen',
      () =>
        Promise.resolve(/"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*lease API listening/.exec(api.output)?.[1]),
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const health = await fetch(`${listening}/healthz`);
    expect(health.status).toBe(200);
    expect(bridge.exit).toBeUndefined();
    expect(api.exit).toBeUndefined();
  }, 150_000);

  it('api exits with an error naming the cause when its port is taken, instead of hanging on what it started', async () => {
    const { createServer } = await import('node:net');
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      const proc = spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          join(ROOT, 'cli/entry.ts'),
          'api',
          '--discovery-addr',
          `127.0.0.1:${port}`,
          '--kubeconfig',
          inject('kubeconfigPath'),
          '--temporal-address',
          inject('temporalAddress'),
        ],
        { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'warn', DISCOVERY_TOKEN: 't' }, stdio: 'pipe' },
      );
      let output = '';
      proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
      proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
      const code = await new Promise<number | null>((resolve) => {
        const timer = setTimeout(() => {
          proc.kill('SIGKILL');
          resolve(null);
        }, 30_000);
        proc.once('exit', (c) => {
          clearTimeout(timer);
          resolve(c);
        });
      });
      expect(code, output).not.toBeNull();
      expect(code).not.toBe(0);
      expect(output).toContain('EADDRINUSE');
    } finally {
      await new Promise((r) => taken.close(r));
    }
  }, 60_000);
});
