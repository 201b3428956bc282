/**
 * `egress-proxies dev --node` as a user runs it (issue 29), in a child
 * process on a --state-dir of its own: the banner says the node is up, the
 * `kubernetes` sample goes Ready on a real Squid pod, a request through the
 * pod IP from the host leaves from the pod's address; a `kill -9` of dev
 * leaves nothing running (no shim, pod, mount, bridge or cgroup of the
 * node), the next start brings the same Node back with the Proxy Ready
 * again, and Ctrl-C leaves nothing either.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { authorizationOf } from '../helpers/crawler.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cliEntry } from '../helpers/cli.js';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { eventually } from '../helpers/temporal.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

interface Dev {
  child: ChildProcess;
  banner: string;
  kubeconfig: string;
  node: string;
  bridge: string;
  echoForPods: string;
}

const children: ChildProcess[] = [];

async function startDev(dir: string): Promise<Dev> {
  let output = '';
  const child = spawn(
    process.execPath,
    [...cliEntry(), 'dev', '--node', '--state-dir', dir, '--discovery-addr', '127.0.0.1:0'],
    {
      cwd: ROOT,
      // The binaries and images from the run's cache; the instance in its own directory.
      env: {
        ...process.env,
        TEMPORAL_CLI: inject('temporalCli'),
        KUBE_BIN_DIR: inject('kubeBinDir'),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  children.push(child);
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const banner = await Promise.race([
    eventually(
      'the dev banner',
      () => Promise.resolve(output.includes('Ctrl-C stops everything') ? output : undefined),
      {
        timeoutMs: 300_000,
        intervalMs: 250,
      },
    ),
    exited.then(() => {
      throw new Error(`dev exited before its banner:\n${output}`);
    }),
  ]);
  const node =
    /Node\s+(egress-node-[0-9a-f]{6}) Ready, pods on \S+ \(bridge (epn[0-9a-f]{6})\); IP echo for pods (\S+)/.exec(
      banner,
    );
  if (!node) throw new Error(`no node line in the banner:\n${banner}`);
  return {
    child,
    banner,
    kubeconfig: /export KUBECONFIG=(\S+)/.exec(banner)![1]!,
    node: node[1]!,
    bridge: node[2]!,
    echoForPods: node[3]!,
  };
}

async function kubectl(dev: Dev, ...args: string[]): Promise<string> {
  const { stdout } = await run(join(inject('kubeBinDir'), 'kubectl'), [
    '--kubeconfig',
    dev.kubeconfig,
    ...args,
  ]);
  return stdout;
}

/** GET `url` through the HTTP proxy at host:3128 (absolute-form), with a lease's credentials; the status and body. */
function getThrough(host: string, url: string, proxyURL?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const authorization = authorizationOf(proxyURL);
    const headers = { host: target.host, ...(authorization ? { 'proxy-authorization': authorization } : {}) };
    const req = request({ host, port: 3128, method: 'GET', path: url, headers, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** A lease of the node's proxy from this dev's lease API (geo=node): the proxy and its proxyURL. */
async function leaseOf(dev: Dev): Promise<{ proxy: { id: string; ip: string }; proxyURL?: string }> {
  const leaseApi = /lease API\s+(http:\/\/\S+)/.exec(dev.banner)![1]!;
  // After a restart the lease API's prober may still be confirming the proxy: until then, 409.
  return eventually(
    'a lease of the node proxy',
    async () => {
      const granted = await fetch(`${leaseApi}/v1/leases`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ selector: { geo: 'node' } }),
      });
      const body = (await granted.json()) as { proxy: { id: string; ip: string }; proxyURL?: string };
      return granted.status === 201 ? body : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 500 },
  );
}

/** What of the node is still on this machine: processes naming the directory, mounts under it, the bridge, its cgroups. */
function leftovers(dir: string, dev: Dev): string[] {
  const found: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes(`${dir}/`))
        found.push(`process ${entry}: ${cmdline.replace(/\0/g, ' ').slice(0, 120)}`);
    } catch {
      // exited meanwhile
    }
  }
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const point = line.split(' ')[4];
    if (point?.startsWith(`${dir}/`)) found.push(`mount ${point}`);
  }
  if (existsSync(`/sys/class/net/${dev.bridge}`)) found.push(`bridge ${dev.bridge}`);
  if (
    existsSync(`/sys/fs/cgroup/pids/${dev.node}`) ||
    existsSync(`/sys/fs/cgroup/${dev.node}/cgroup.procs`)
  ) {
    found.push(`cgroup /${dev.node}`);
  }
  return found;
}

async function readyProxy(dev: Dev): Promise<{ ip: string; pod: string }> {
  return eventually(
    'squid-1 Ready on a Running pod of the node',
    async () => {
      const [ready, ip] = (
        await kubectl(
          dev,
          'get',
          'px',
          'squid-1',
          '-o',
          'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.ip}',
        )
      ).split(' ');
      if (ready !== 'True' || !ip) return undefined;
      const pods = await kubectl(
        dev,
        'get',
        'pods',
        '-o',
        'jsonpath={range .items[*]}{.spec.nodeName} {.status.phase} {.status.podIP}{"\\n"}{end}',
      );
      const pod = pods.split('\n').find((l) => l === `${dev.node} Running ${ip}`);
      return pod ? { ip, pod } : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
}

describe.sequential('dev --node', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-dev-node-'));

  afterAll(async () => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
    for (const c of children) {
      if (c.exitCode === null && c.signalCode === null) await new Promise((r) => c.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it('serves a lease from a real Squid pod, and neither kill -9 nor Ctrl-C leaves anything running', async () => {
    const dev = await startDev(dir);
    // The sample as shipped, its probe URL pointed at this instance's echo for pods (10.244.0.1 unless that was taken).
    const sample = readFileSync(join(ROOT, 'infra/samples/proxy-kubernetes-node.yaml'), 'utf8').replace(
      'http://10.244.0.1:8091/',
      dev.echoForPods,
    );
    const file = join(dir, 'sample.yaml');
    writeFileSync(file, sample);
    await kubectl(dev, 'apply', '-f', file);
    const first = await readyProxy(dev);
    // The lease API hands it out, with its credentials.
    const leased = await leaseOf(dev);
    expect(leased.proxy).toMatchObject({ id: 'default/squid-1', ip: first.ip });
    // From the host through the pod: the echo sees the pod's own address; without the credentials, 407.
    expect((await getThrough(first.ip, dev.echoForPods)).status).toBe(407);
    expect(JSON.parse((await getThrough(first.ip, dev.echoForPods, leased.proxyURL)).body)).toEqual({
      ip: first.ip,
    });

    const killed = new Promise((r) => dev.child.once('exit', r));
    dev.child.kill('SIGKILL');
    await killed;
    await eventually('nothing of the node left after kill -9', () =>
      Promise.resolve(leftovers(dir, dev).length === 0 ? true : undefined),
    ).catch(() => {
      throw new Error(`left after kill -9:\n${leftovers(dir, dev).join('\n')}`);
    });

    // The same Node comes back, and its kubelet runs the pod bound to it again.
    const again = await startDev(dir);
    expect(again.node).toBe(dev.node);
    const second = await readyProxy(again);
    const again2 = await leaseOf(again);
    expect(JSON.parse((await getThrough(second.ip, again.echoForPods, again2.proxyURL)).body)).toEqual({
      ip: second.ip,
    });

    const stopped = new Promise((r) => again.child.once('exit', r));
    again.child.kill('SIGINT');
    await stopped;
    expect(leftovers(dir, again)).toEqual([]);
  });
});
