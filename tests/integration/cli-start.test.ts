/**
 * Every process as a real child: a failed start stops what it started and
 * exits non-zero with one line naming the problem; a good start serves
 * /healthz, /readyz and /metrics (worker, bridge) and SIGTERM exits 0; api
 * and gateway exit 0 on SIGTERM with their ports closed, and an api stopped
 * while its start is held still exits 0.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { LEASE_API_LISTENING, startCli, type CliProcess, testServerArgs } from '../helpers/cli.js';
import { TcpRelay } from '../helpers/net.js';
import { eventually, uniqueTaskQueue } from '../helpers/temporal.js';
// A loopback port with nothing listening: connection refused, at once.
import { acceptsTcp, freePort as closedPort } from '../../local-servers/ports.js';

const dir = mkdtempSync(join(tmpdir(), 'ep-cli-start-'));
const providers = join(dir, 'providers.yaml');
writeFileSync(
  providers,
  `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: 127.77.9.0/24 }\n`,
);
const children: CliProcess[] = [];
afterAll(async () => {
  for (const c of children) await c.stop(15_000).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

function run(args: string[], env: Record<string, string> = {}): CliProcess {
  const child = startCli(args, { env: { DISCOVERY_TOKEN: 't', ...env } });
  children.push(child);
  return child;
}

/** The flags each command offers (a command refuses the flags of parts it does not run). */
const common = (command: string) => [
  // The gateway runs no Temporal part, so it takes no --temporal-* flag.
  ...(command === 'gateway' ? ['--kubeconfig', inject('kubeconfigPath')] : testServerArgs()),
  ...(command === 'api' || command === 'gateway' ? [] : ['--task-queue', uniqueTaskQueue('cli-start')]),
  ...(command === 'worker' ? ['--installation', 'cli-start-test'] : []),
  // Nothing of other tests on the shared apiserver: a namespace no Proxy is in.
  '--watch-namespaces',
  `cli-start-${randomBytes(3).toString('hex')}`,
];

/** Exactly one non-empty stderr line, the CLI's, naming the problem. */
function oneErrorLine(child: CliProcess): string {
  const lines = child
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('egress-proxies: '));
  expect(lines, child.output()).toHaveLength(1);
  return lines[0]!;
}

describe('a failed start exits non-zero with one line', () => {
  it('worker --gc-interval 30s: rejected before anything starts (it used to poll on with no schedules)', async () => {
    const child = run([
      'worker',
      ...common('worker'),
      '--providers-config',
      providers,
      '--gc-interval',
      '30s',
    ]);
    expect(await child.exited(90_000)).toBe(1);
    expect(oneErrorLine(child)).toMatch(/gc interval must be 0 \(off\) or at least 1m/);
    expect(child.output()).not.toContain('worker started');
  });

  it('dev --gc-interval 30s: rejected before it starts any server', async () => {
    const child = run(['dev', '--gc-interval', '30s'], { EGRESS_PROXIES_CACHE: join(dir, 'dev-cache') });
    expect(await child.exited(90_000)).toBe(1);
    expect(oneErrorLine(child)).toMatch(/gc interval/);
  });

  it('worker with a broken providers config names the field, in one line', async () => {
    const bad = join(dir, 'bad.yaml');
    writeFileSync(
      bad,
      'providers:\n  - name: a\n    type: local\n    local: { startDelay: 3 }\n  - name: A\n    type: local\n',
    );
    const child = run(['worker', ...common('worker'), '--providers-config', bad]);
    expect(await child.exited(90_000)).toBe(1);
    const line = oneErrorLine(child);
    expect(line).toContain('providers[0].local.startDelay: unknown field');
    expect(line).toContain('providers[1].name');
  });

  it.each(['worker', 'bridge', 'api'])(
    '%s with Temporal unreachable: stops what it started and exits 1 naming the address',
    async (command) => {
      const port = await closedPort();
      const args = [
        ...common(command),
        '--temporal-address',
        `127.0.0.1:${port}`,
        '--metrics-addr',
        '127.0.0.1:0',
      ];
      if (command === 'worker') args.push('--providers-config', providers);
      if (command === 'api') args.push('--discovery-addr', '127.0.0.1:0');
      const child = run([command, ...args]);
      expect(await child.exited(90_000)).toBe(1);
      expect(oneErrorLine(child)).toContain(`cannot connect to Temporal at 127.0.0.1:${port}`);
    },
  );

  it.each(['bridge', 'api'])(
    '%s with a Temporal namespace that does not exist: exits 1 naming it',
    async (command) => {
      const args = [...common(command), '--temporal-namespace', 'no-such-namespace-here'];
      if (command === 'api') args.push('--discovery-addr', '127.0.0.1:0');
      const child = run([command, ...args]);
      expect(await child.exited(90_000)).toBe(1);
      expect(oneErrorLine(child)).toContain('Temporal namespace "no-such-namespace-here" cannot be used');
    },
  );

  it.each([
    ['api', '--discovery-addr', 'the lease API'],
    ['gateway', '--gateway-addr', 'the gateway'],
  ] as const)(
    '%s on 0.0.0.0 with no token: exits 1 naming --insecure-no-auth, having listened nowhere',
    async (command, addrFlag, what) => {
      const child = run([command, ...common(command), addrFlag, '0.0.0.0:0'], { DISCOVERY_TOKEN: '' });
      expect(await child.exited(90_000)).toBe(1);
      expect(oneErrorLine(child)).toContain(`${what} would listen on 0.0.0.0:0 with no token`);
      expect(oneErrorLine(child)).toContain('or pass --insecure-no-auth to serve it open');
      expect(child.output()).not.toMatch(/listening/);
    },
  );

  it('a TLS client certificate that cannot be read: exits 1 naming the file', async () => {
    const child = run(['bridge', ...common('bridge')], {
      TEMPORAL_TLS_CLIENT_CERT_PATH: join(dir, 'missing.crt'),
      TEMPORAL_TLS_CLIENT_KEY_PATH: join(dir, 'missing.key'),
    });
    expect(await child.exited(90_000)).toBe(1);
    expect(oneErrorLine(child)).toBe(
      `egress-proxies: Temporal TLS client certificate: cannot read ${join(dir, 'missing.crt')} (ENOENT)`,
    );
  });
});

describe('health, readiness and graceful stop', () => {
  async function get(url: string): Promise<{ status: number; body: string }> {
    const res = await fetch(url);
    return { status: res.status, body: await res.text() };
  }

  it.each(['worker', 'bridge'])(
    '%s serves /healthz, /readyz and /metrics (with build_info), and SIGTERM exits 0',
    async (command) => {
      const args = [...common(command), '--metrics-addr', '127.0.0.1:0'];
      if (command === 'worker') args.push('--providers-config', providers);
      const child = run([command, ...args]);
      const base = (
        await child.waitFor(/"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*health and metrics listening/)
      )[1]!;
      expect((await get(`${base}/healthz`)).status).toBe(200);
      await child.waitFor(command === 'worker' ? /worker started/ : /bridge started/);
      // Ready once started and (bridge) its informers have synced; the answer is cached 5 s.
      const ready = await eventually(
        'readyz to answer 200',
        async () => {
          const r = await get(`${base}/readyz`);
          return r.status === 200 ? r : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(ready, child.output()).toEqual({ status: 200, body: 'ready\n' });
      const metrics = await get(`${base}/metrics`);
      expect(metrics.body).toMatch(/egress_proxies_build_info\{version="0\.1\.0",commit="[^"]+",node="v\d+/);
      expect(await child.stop(60_000)).toBe(0);
    },
  );

  it.each([
    [
      'api',
      ['--discovery-addr', '127.0.0.1:0'],
      /"url":"http:\/\/127\.0\.0\.1:(\d+)"[^\n]*lease API listening/,
    ],
    [
      'gateway',
      ['--gateway-addr', '127.0.0.1:0'],
      /"url":"http:\/\/127\.0\.0\.1:(\d+)"[^\n]*gateway listening/,
    ],
  ] as const)('%s exits 0 on SIGTERM, its port closed', async (command, listen, listening) => {
    const child = run([command, ...common(command), ...listen]);
    const port = Number((await child.waitFor(listening, 90_000))[1]);
    expect(await acceptsTcp(port), child.output()).toBe(true);
    expect(await child.stop(60_000), child.output()).toBe(0);
    expect(await acceptsTcp(port)).toBe(false);
  });

  it.each([
    [
      'api',
      '--discovery-addr',
      /lease API listening/,
      /--insecure-no-auth: the lease API is served WITHOUT AUTHENTICATION off the loopback/,
    ],
    [
      'gateway',
      '--gateway-addr',
      /gateway listening/,
      /gateway: --insecure-no-auth: no API token, served off the loopback/,
    ],
  ] as const)(
    '%s on 0.0.0.0 with no token and --insecure-no-auth: starts, says so, and stops on SIGTERM',
    async (command, addrFlag, listening, warning) => {
      const child = run([command, ...common(command), addrFlag, '0.0.0.0:0', '--insecure-no-auth'], {
        DISCOVERY_TOKEN: '',
      });
      await child.waitFor(listening, 90_000);
      expect(child.output()).toMatch(warning);
      expect(await child.stop(60_000), child.output()).toBe(0);
    },
  );

  it('api stopped while it is still starting (its apiserver held): exits 0, saying so', async () => {
    // The api's apiserver behind a relay that holds every connection: its
    // first informer cannot sync, so the stop lands inside the start however
    // fast or slow the machine is.
    const kubeconfig = readFileSync(inject('kubeconfigPath'), 'utf8');
    const server = /server: https:\/\/127\.0\.0\.1:(\d+)/.exec(kubeconfig);
    expect(server, 'the test kubeconfig names its apiserver').not.toBeNull();
    const relay = new TcpRelay({ host: '127.0.0.1', port: Number(server![1]) });
    await relay.open();
    const release = relay.stall();
    const heldKubeconfig = join(dir, 'held.kubeconfig');
    writeFileSync(heldKubeconfig, kubeconfig.replace(server![0], `server: https://127.0.0.1:${relay.port}`));
    try {
      const child = run([
        'api',
        ...common('api'),
        '--kubeconfig',
        heldKubeconfig,
        '--discovery-addr',
        '127.0.0.1:0',
      ]);
      await eventually(
        'the api to reach its apiserver',
        () => Promise.resolve(relay.accepted > 0 ? true : undefined),
        { timeoutMs: 90_000 },
      );
      child.proc.kill('SIGTERM');
      await child.waitFor(/stop requested while starting/, 60_000);
      expect(child.output()).not.toMatch(LEASE_API_LISTENING);
      // Let the held start go on: it ends, and the process exits 0 then or
      // at the exit backstop, whichever comes first.
      release();
      expect(await child.exited(60_000), child.output()).toBe(0);
    } finally {
      release();
      await relay.cut();
    }
  });
});
