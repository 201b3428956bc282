/**
 * The README's first command, for real: `egress-proxies dev` in a child
 * process brings up Temporal and the apiserver, prints where each is, and a
 * Proxy applied with the kubectl it built comes up. Uses its own cache
 * directory (the binaries come from the run's cache through TEMPORAL_CLI and
 * KUBE_BIN_DIR, so nothing is rebuilt).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { eventually } from '../helpers/temporal.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('make dev (egress-proxies dev)', () => {
  const cache = mkdtempSync(join(tmpdir(), 'ep-dev-'));
  let child: ChildProcess | undefined;
  let output = '';

  afterAll(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGINT');
      await new Promise((r) => child!.once('exit', r));
    }
    rmSync(cache, { recursive: true, force: true });
  });

  it('starts Temporal and the apiserver, prints where they are, and runs a Proxy; Ctrl-C stops everything', async () => {
    child = spawn(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'cli/entry.ts'), 'dev', '--discovery-addr', '127.0.0.1:0'],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          EGRESS_PROXIES_CACHE: cache,
          TEMPORAL_CLI: inject('temporalCli'),
          KUBE_BIN_DIR: inject('kubeBinDir'),
          LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));

    const banner = await eventually(
      'the dev banner',
      () => Promise.resolve(output.includes('Ctrl-C stops everything') ? output : undefined),
      {
        timeoutMs: 120_000,
        intervalMs: 250,
      },
    );
    expect(banner).toMatch(/Temporal\s+127\.0\.0\.1:\d+\s+Web UI http:\/\/127\.0\.0\.1:\d+/);
    const kubeconfig = /export KUBECONFIG=(\S+)/.exec(banner)?.[1];
    expect(kubeconfig).toBe(join(cache, 'dev', 'kube', 'kubeconfig'));
    expect(banner).toMatch(/lease API http:\/\/127\.0\.0\.1:\d+/);
    const uiUrl = /Web UI (\S+)/.exec(banner)![1]!;
    expect((await fetch(uiUrl)).status).toBe(200);

    const kubectl = join(inject('kubeBinDir'), 'kubectl');
    await run(kubectl, [
      '--kubeconfig',
      kubeconfig!,
      'apply',
      '-f',
      join(ROOT, 'infra/samples/proxy-local.yaml'),
    ]);
    const ip = await eventually(
      'the sample Proxy Provisioned',
      async () => {
        const { stdout } = await run(kubectl, [
          '--kubeconfig',
          kubeconfig!,
          'get',
          'px',
          'local-1',
          '-o',
          'jsonpath={.status.conditions[?(@.type=="Provisioned")].status} {.status.ip}',
        ]);
        const [status, addr] = stdout.trim().split(' ');
        return status === 'True' && addr ? addr : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(ip).toMatch(/^127\./);

    child.kill('SIGINT');
    const code = await new Promise<number | null>((r) => child!.once('exit', (c) => r(c)));
    expect(code).toBe(0);
    // Everything it started is gone: the Web UI no longer answers.
    await expect(fetch(uiUrl)).rejects.toThrow();
  });
});
