/**
 * `dev` gives its lease API the flags it was given, as `api` does: both run
 * as child processes with `--lease-cooldown 10s --max-lease-ttl 10m
 * --discovery-token-file F` against the same cluster (the apiserver dev
 * started) and Temporal (the run's server), and answer the same: the token
 * is required, a TTL over 10 min is refused, a rate_limited proxy comes back
 * after 10 s (not 15 min), and a 1 s lease stops being reportable 10 s after
 * it ends. The Proxy they lease is a real one from the local provider,
 * health-probed through its forward proxy.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cliEntry } from '../helpers/cli.js';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { API_VERSION } from '../../kube/coordinates.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import { eventually } from '../helpers/temporal.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TOKEN = 'dev-flags-token';

interface Child {
  proc: ChildProcess;
  output: string;
}

function start(args: string[], env: NodeJS.ProcessEnv): Child {
  const proc = spawn(process.execPath, [...cliEntry(), ...args], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const child: Child = { proc, output: '' };
  proc.stdout.on('data', (d: Buffer) => (child.output += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (child.output += d.toString()));
  return child;
}

async function stop(child: Child | undefined): Promise<number | null> {
  if (!child) return null;
  if (child.proc.exitCode !== null) return child.proc.exitCode;
  const exited = new Promise<number | null>((r) => child.proc.once('exit', (code) => r(code)));
  child.proc.kill('SIGINT');
  return exited;
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  token = TOKEN,
): Promise<Answer> {
  const res = await fetch(base + path, {
    method,
    headers: {
      ...(token ? { Authorization: `Bearer ${token}` } : {}),
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return {
    status: res.status,
    body: text.startsWith('{') ? (JSON.parse(text) as Record<string, unknown>) : {},
  };
}

/** What a lease API does with the flags, measured the same way for both processes. */
async function observe(base: string): Promise<{
  withoutToken: number;
  wrongToken: number;
  ttl601: Answer;
  ttl600: number;
  cooldownHeldMs: number;
  reportableAfterEndMs: number;
}> {
  const withoutToken = (await call(base, 'GET', '/v1/proxies', undefined, '')).status;
  const wrongToken = (await call(base, 'GET', '/v1/proxies', undefined, 'not-the-token')).status;
  const ttl601 = await call(base, 'POST', '/v1/leases', { ttlSeconds: 601 });

  await eventually(
    `a healthy proxy at ${base}`,
    async () => {
      const list = await call(base, 'GET', '/v1/proxies?healthy=true');
      return (list.body.count as number) > 0 ? true : undefined;
    },
    { timeoutMs: 90_000, intervalMs: 500 },
  );
  const first = await call(base, 'POST', '/v1/leases', { ttlSeconds: 600 });
  const leaseId = first.body.leaseID as string;
  const reported = await call(base, 'POST', `/v1/leases/${leaseId}/report`, { result: 'rate_limited' });
  expect(reported.status).toBe(204);
  const reportedAt = Date.now();
  const during = await call(base, 'POST', '/v1/leases', { ttlSeconds: 600 });
  expect(during).toMatchObject({ status: 409, body: { error: 'no_match', inCooldown: 1 } });
  const again = await eventually(
    `a lease again after the cooldown at ${base}`,
    async () => {
      const r = await call(base, 'POST', '/v1/leases', { ttlSeconds: 1 });
      return r.status === 201 ? r : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
  const cooldownHeldMs = Date.now() - reportedAt;

  // A 1 s lease ends at +1 s and stays reportable one cooldown window (10 s) longer.
  const shortId = again.body.leaseID as string;
  const shortAt = Date.now();
  await eventually(
    `the 1 s lease no longer reportable at ${base}`,
    async () => {
      const r = await call(base, 'POST', `/v1/leases/${shortId}/report`, { result: 'ok' });
      return r.status === 404 ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
  const reportableAfterEndMs = Date.now() - shortAt - 1_000;
  return {
    withoutToken,
    wrongToken,
    ttl601,
    ttl600: first.status,
    cooldownHeldMs,
    reportableAfterEndMs,
  };
}

describe('dev passes its lease API flags on, as api does', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-dev-flags-'));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
  const providers = join(dir, 'providers.yaml');
  writeFileSync(
    providers,
    `providers:\n  - name: local\n    type: local\n    local:\n      stateDir: ${join(dir, 'local')}\n      addressRange: ${privateLoopbackRange()}\n`,
  );
  const leaseFlags = [
    '--lease-cooldown',
    '10s',
    '--max-lease-ttl',
    '10m',
    '--discovery-token-file',
    tokenFile,
    '--discovery-addr',
    '127.0.0.1:0',
  ];
  const { DISCOVERY_TOKEN: _ignored, ...baseEnv } = process.env;
  let dev: Child | undefined;
  let api: Child | undefined;
  let kubeconfig = '';

  afterAll(async () => {
    if (kubeconfig) {
      // The Proxy's workflow ends with it, so nothing is left running on the shared Temporal.
      await run(join(inject('kubeBinDir'), 'kubectl'), [
        '--kubeconfig',
        kubeconfig,
        'delete',
        'px',
        'dev-flags',
        '--ignore-not-found',
        '--timeout=60s',
      ]).catch(() => undefined);
    }
    await stop(api);
    await stop(dev);
    rmSync(dir, { recursive: true, force: true });
  });

  it('dev --lease-cooldown 10s --max-lease-ttl 10m --discovery-token-file F answers as api with the same flags', async () => {
    const temporal = [
      '--temporal-address',
      inject('temporalAddress'),
      '--temporal-namespace',
      inject('temporalNamespace'),
    ];
    dev = start(
      [
        'dev',
        ...temporal,
        '--task-queue',
        `dev-flags-${process.pid}`,
        '--providers-config',
        providers,
        // Nothing of this run is left scheduled on the shared Temporal.
        '--gc-interval',
        '0',
        '--provider-check-interval',
        '0',
        ...leaseFlags,
      ],
      {
        ...baseEnv,
        EGRESS_PROXIES_CACHE: join(dir, 'cache'),
        TEMPORAL_CLI: inject('temporalCli'),
        KUBE_BIN_DIR: inject('kubeBinDir'),
        LOG_LEVEL: 'warn',
      },
    );
    const banner = await eventually(
      'the dev banner',
      () => Promise.resolve(dev!.output.includes('Ctrl-C stops everything') ? dev!.output : undefined),
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    kubeconfig = /export KUBECONFIG=(\S+)/.exec(banner)![1]!;
    const devUrl = /lease API (http:\/\/127\.0\.0\.1:\d+)/.exec(banner)![1]!;

    api = start(['api', ...temporal, '--kubeconfig', kubeconfig, ...leaseFlags], {
      ...baseEnv,
      LOG_LEVEL: 'info',
    });
    const apiUrl = await eventually(
      'the api listening',
      () =>
        Promise.resolve(
          /"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*lease API listening/.exec(api!.output)?.[1],
        ),
      { timeoutMs: 60_000, intervalMs: 250 },
    );

    const manifest = join(dir, 'proxy.yaml');
    writeFileSync(
      manifest,
      [
        `apiVersion: ${API_VERSION}`,
        'kind: Proxy',
        'metadata: {name: dev-flags, namespace: default}',
        'spec:',
        '  mode: Managed',
        '  provider: local',
        '  maxLeases: 5',
        `  healthCheck: {probeURL: "${devUrl}/healthz", intervalSeconds: 1}`,
        '',
      ].join('\n'),
    );
    await run(join(inject('kubeBinDir'), 'kubectl'), ['--kubeconfig', kubeconfig, 'apply', '-f', manifest]);

    const [fromDev, fromApi] = await Promise.all([observe(devUrl), observe(apiUrl)]);
    for (const seen of [fromDev, fromApi]) {
      expect(seen).toMatchObject({
        withoutToken: 401,
        wrongToken: 401,
        ttl601: {
          status: 400,
          body: { error: 'invalid_ttl', message: 'ttlSeconds must be between 1 and 600' },
        },
        ttl600: 201,
      });
      // 10 s, give or take the polling and a loaded machine; the default would be 15 min.
      expect(seen.cooldownHeldMs).toBeGreaterThanOrEqual(9_500);
      expect(seen.cooldownHeldMs).toBeLessThan(20_000);
      expect(seen.reportableAfterEndMs).toBeGreaterThanOrEqual(9_000);
      expect(seen.reportableAfterEndMs).toBeLessThan(20_000);
    }

    await run(join(inject('kubeBinDir'), 'kubectl'), [
      '--kubeconfig',
      kubeconfig,
      'delete',
      'px',
      'dev-flags',
      '--timeout=60s',
    ]);
    expect(await stop(api)).toBe(0);
    expect(await stop(dev)).toBe(0);
  });
});
