/**
 * `egress-proxies dev` as a user runs it, in child processes: two instances
 * side by side on two --state-dir directories, a namespace deleted under one
 * (kube-controller-manager's namespace controller and our finalizer), and
 * one SIGKILLed and started again on the same directory. The binaries come
 * from the run's cache (TEMPORAL_CLI, KUBE_BIN_DIR); everything else lives
 * in the instances' own directories.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cliEntry } from '../helpers/cli.js';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { API_VERSION } from '../../kube/coordinates.js';
import { processRunning } from '../../local-servers/instance.js';
import { acceptsTcp } from '../../local-servers/ports.js';
import { eventually } from '../helpers/temporal.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const START_TIMEOUT_MS = 300_000;

interface Dev {
  dir: string;
  child: ChildProcess;
  output: () => string;
  kubeconfig: string;
  temporalAddress: string;
  leaseApi: string;
}

const devs: Dev[] = [];
const dirs: string[] = [];

function spawnDev(dir: string): { child: ChildProcess; output: () => string } {
  let output = '';
  const child = spawn(
    process.execPath,
    [...cliEntry(), 'dev', '--state-dir', dir, '--discovery-addr', '127.0.0.1:0'],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        // Nothing of the user's cache: only the binaries, named below.
        EGRESS_PROXIES_CACHE: join(dir, 'unused-cache'),
        TEMPORAL_CLI: inject('temporalCli'),
        KUBE_BIN_DIR: inject('kubeBinDir'),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  return { child, output: () => output };
}

async function startDev(dir: string): Promise<Dev> {
  const { child, output } = spawnDev(dir);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const banner = await Promise.race([
    eventually(
      `the dev banner (${dir})`,
      () => Promise.resolve(output().includes('Ctrl-C stops everything') ? output() : undefined),
      { timeoutMs: START_TIMEOUT_MS, intervalMs: 250 },
    ),
    exited.then(() => {
      throw new Error(`dev on ${dir} exited before its banner:\n${output()}`);
    }),
  ]);
  const dev: Dev = {
    dir,
    child,
    output,
    kubeconfig: /export KUBECONFIG=(\S+)/.exec(banner)![1]!,
    temporalAddress: /Temporal\s+(\S+)/.exec(banner)![1]!,
    leaseApi: /lease API\s+(http:\/\/\S+)/.exec(banner)![1]!,
  };
  devs.push(dev);
  return dev;
}

async function kubectl(dev: Dev, ...args: string[]): Promise<string> {
  const { stdout } = await run(join(inject('kubeBinDir'), 'kubectl'), [
    '--kubeconfig',
    dev.kubeconfig,
    ...args,
  ]);
  return stdout;
}

async function applyProxy(dev: Dev, name: string, namespace = 'default'): Promise<void> {
  const manifest = {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: { name, namespace },
    spec: {
      mode: 'Managed',
      provider: 'local',
      // Probed through the proxy at the instance's own lease API: no traffic leaves the loopback.
      healthCheck: { probeURL: `${dev.leaseApi}/healthz`, intervalSeconds: 10 },
    },
  };
  const child = execFile(join(inject('kubeBinDir'), 'kubectl'), [
    '--kubeconfig',
    dev.kubeconfig,
    'apply',
    '-f',
    '-',
  ]);
  child.stdin!.end(JSON.stringify(manifest));
  await new Promise<void>((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`kubectl apply ${name}: exit ${code}`)),
    ),
  );
}

async function provisioned(dev: Dev, name: string, namespace = 'default'): Promise<string> {
  return eventually(
    `Proxy ${namespace}/${name} Provisioned`,
    async () => {
      const out = await kubectl(
        dev,
        '-n',
        namespace,
        'get',
        'px',
        name,
        '-o',
        'jsonpath={.status.conditions[?(@.type=="Provisioned")].status} {.status.ip}',
      );
      const [status, ip] = out.trim().split(' ');
      return status === 'True' && ip ? ip : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
}

async function proxyNames(dev: Dev): Promise<string[]> {
  const out = await kubectl(
    dev,
    'get',
    'px',
    '-A',
    '-o',
    'jsonpath={range .items[*]}{.metadata.name}{"\\n"}{end}',
  );
  return out.split('\n').filter(Boolean).sort();
}

/** The local provider's instance records in the instance's own state directory. */
function localInstances(dev: Dev): Array<{ name: string; address: string; port: number }> {
  const dir = join(dev.dir, 'state', 'local', 'local', 'instances');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map(
      (f) =>
        JSON.parse(readFileSync(join(dir, f), 'utf8')) as { name: string; address: string; port: number },
    );
}

async function proxyWorkflowIds(dev: Dev): Promise<string[]> {
  const connection = await Connection.connect({ address: dev.temporalAddress });
  try {
    const ids: string[] = [];
    for await (const wf of new Client({ connection }).workflow.list()) ids.push(wf.workflowId);
    return ids.filter((id) => id.startsWith('proxy/')).sort();
  } finally {
    await connection.close();
  }
}

/** Pids of the servers an instance runs, from its pid files. */
function serverPids(dir: string): Record<string, number> {
  const pidDir = join(dir, 'pids');
  return Object.fromEntries(
    readdirSync(pidDir)
      .filter((f) => f.endsWith('.pid'))
      .map((f) => [
        f.slice(0, -4),
        (JSON.parse(readFileSync(join(pidDir, f), 'utf8')) as { pid: number }).pid,
      ]),
  );
}

async function stopDev(dev: Dev): Promise<void> {
  if (dev.child.exitCode !== null || dev.child.signalCode !== null) return;
  const exited = new Promise((r) => dev.child.once('exit', r));
  dev.child.kill('SIGINT');
  await exited;
}

describe.sequential('dev instances (--state-dir)', () => {
  const dirA = mkdtempSync(join(tmpdir(), 'ep-dev-a-'));
  const dirB = mkdtempSync(join(tmpdir(), 'ep-dev-b-'));
  dirs.push(dirA, dirB);

  afterAll(async () => {
    for (const dev of devs) await stopDev(dev);
    // Whatever an expectation left running, by recorded pid only.
    for (const dir of dirs) {
      if (!existsSync(join(dir, 'pids'))) continue;
      for (const pid of Object.values(serverPids(dir))) if (processRunning(pid)) process.kill(pid, 'SIGKILL');
    }
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it(
    'two instances run side by side, each with its own Proxies, and a second dev on a held directory refuses in one line',
    async () => {
      // At once: the start lock makes the second wait while the first takes the preferred ports.
      const [a, b] = await Promise.all([startDev(dirA), startDev(dirB)]);
      expect(a.kubeconfig).toBe(join(dirA, 'kube', 'kubeconfig'));
      expect(b.kubeconfig).toBe(join(dirB, 'kube', 'kubeconfig'));
      expect(a.temporalAddress).not.toBe(b.temporalAddress);
      expect(a.leaseApi).not.toBe(b.leaseApi);
      expect(existsSync(join(dirA, 'temporal', 'temporal.db'))).toBe(true);
      expect(existsSync(join(dirB, 'temporal', 'temporal.db'))).toBe(true);
      expect(existsSync(join(dirA, 'kube', 'etcd', 'member'))).toBe(true);

      await Promise.all([applyProxy(a, 'a-1'), applyProxy(b, 'b-1')]);
      await Promise.all([provisioned(a, 'a-1'), provisioned(b, 'b-1')]);

      expect(await proxyNames(a)).toEqual(['a-1']);
      expect(await proxyNames(b)).toEqual(['b-1']);
      expect(await proxyWorkflowIds(a)).toEqual([expect.stringMatching(/^proxy\/default\/a-1\//)]);
      expect(await proxyWorkflowIds(b)).toEqual([expect.stringMatching(/^proxy\/default\/b-1\//)]);
      expect(localInstances(a)).toHaveLength(1);
      expect(localInstances(b)).toHaveLength(1);

      const second = spawnDev(dirA);
      const code = await new Promise<number | null>((r) => second.child.once('exit', (c) => r(c)));
      expect(code).toBe(1);
      expect(second.output()).toBe(
        `egress-proxies: another egress-proxies dev (pid ${a.child.pid}) is running on ${dirA}; stop it, or give this one its own --state-dir\n`,
      );
      // The refusal touched nothing: the holder still runs and still holds it.
      expect(a.child.exitCode).toBeNull();
      expect(JSON.parse(readFileSync(join(dirA, 'dev.pid'), 'utf8'))).toMatchObject({ pid: a.child.pid });
    },
    2 * START_TIMEOUT_MS,
  );

  it(
    'a namespace with Proxies deleted under dev disappears, and each instance goes through its Proxy finalizer',
    async () => {
      const a = devs.find((d) => d.dir === dirA)!;
      const before = localInstances(a).map((r) => r.name);
      await kubectl(a, 'create', 'namespace', 'doomed');
      await Promise.all([applyProxy(a, 'doomed-1', 'doomed'), applyProxy(a, 'doomed-2', 'doomed')]);
      await Promise.all([provisioned(a, 'doomed-1', 'doomed'), provisioned(a, 'doomed-2', 'doomed')]);
      const doomed = localInstances(a).filter((r) => !before.includes(r.name));
      expect(doomed).toHaveLength(2);
      for (const r of doomed) expect(await acceptsTcp(r.port, r.address)).toBe(true);

      await kubectl(a, 'delete', 'namespace', 'doomed', '--wait=false');
      await eventually(
        'namespace doomed gone',
        async () => {
          const out = await kubectl(a, 'get', 'namespace', 'doomed', '--ignore-not-found', '-o', 'name');
          return out.trim() === '' ? true : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      );
      const left = localInstances(a).map((r) => r.name);
      for (const r of doomed) {
        expect(left).not.toContain(r.name);
        expect(await acceptsTcp(r.port, r.address)).toBe(false);
      }
      // The Proxy elsewhere is untouched.
      expect(left.sort()).toEqual([...before].sort());
      expect(await proxyNames(a)).toEqual(['a-1']);
    },
    START_TIMEOUT_MS,
  );

  it(
    'SIGKILL of dev leaves no server behind; dev again on the same directory comes up with the earlier Proxies',
    async () => {
      const first = devs.find((d) => d.dir === dirA)!;
      const before = localInstances(first);
      expect(before).toHaveLength(1);
      const pids = { dev: first.child.pid!, ...serverPids(dirA) };
      expect(Object.keys(pids).sort()).toEqual([
        'dev',
        'etcd',
        'kube-apiserver',
        'kube-controller-manager',
        'temporal',
      ]);

      const exited = new Promise((r) => first.child.once('exit', r));
      first.child.kill('SIGKILL');
      await exited;
      // Before any new start (which would reap them): the kernel ended them (PDEATHSIG).
      await eventually(
        'every process of the killed instance gone',
        () => Promise.resolve(Object.values(pids).some((pid) => processRunning(pid)) ? undefined : true),
        { timeoutMs: 30_000, intervalMs: 100 },
      );

      const again = await startDev(dirA);
      expect(again.output()).not.toContain('another egress-proxies dev');
      expect(await proxyNames(again)).toEqual(['a-1']);
      await provisioned(again, 'a-1');
      const [record] = localInstances(again);
      expect(record?.name).toBe(before[0]!.name);
      await eventually('the earlier instance listening again', async () =>
        (await acceptsTcp(record!.port, record!.address)) ? true : undefined,
      );
      for (const [name, pid] of Object.entries(pids))
        expect({ name, running: processRunning(pid) }).toEqual({ name, running: false });
      // The other instance never noticed.
      const b = devs.find((d) => d.dir === dirB)!;
      expect(b.child.exitCode).toBeNull();
      expect(await proxyNames(b)).toEqual(['b-1']);
    },
    2 * START_TIMEOUT_MS,
  );
});
