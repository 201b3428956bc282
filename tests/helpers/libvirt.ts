/**
 * What the kvm provider's tests do beside its servers
 * (local-servers/libvirt.ts: libvirtd, sshd, the guest image): each run's
 * own transient storage pool, fake ARP entries for its domains, a local
 * HTTP server serving a tiny qcow2 image made with qemu-img (or a real
 * guest image), and what they look at (domains' MACs, sshd's children,
 * a command's output inside a guest).
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync } from 'node:fs';
import { chmod, mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { VIRSH_URI } from '../../local-servers/libvirt.js';

const run = promisify(execFile);

export async function virsh(...args: string[]): Promise<string> {
  const { stdout } = await run('virsh', ['-q', '-c', VIRSH_URI, ...args], { timeout: 60_000 });
  return stdout;
}

export interface TestPool {
  name: string;
  dir: string;
  destroy(): Promise<void>;
}

/** A transient `dir` pool of this run's own; destroy() removes every domain whose disks live in it, then the pool. */
export async function createPool(root: string): Promise<TestPool> {
  const name = `ep-test-${randomBytes(4).toString('hex')}`;
  const dir = join(root, 'pool');
  mkdirSync(dir, { recursive: true });
  await virsh('pool-create-as', name, 'dir', '--target', dir);
  return {
    name,
    dir,
    async destroy() {
      for (const d of (await virsh('list', '--all', '--name')).split('\n').filter((x) => x.trim() !== '')) {
        const xml = await virsh('dumpxml', d).catch(() => '');
        if (!xml.includes(dir)) continue;
        await virsh('destroy', d).catch(() => undefined);
        await virsh('undefine', d, '--nvram', '--managed-save', '--snapshots-metadata').catch(
          () => undefined,
        );
      }
      await virsh('pool-destroy', name).catch(() => undefined);
    },
  };
}

export interface ImageServer {
  url: string;
  sha256: string;
  /** Requests served, by path. */
  hits: Map<string, number>;
  close(): Promise<void>;
}

/** A tiny qcow2 (no OS) made by qemu-img, served over HTTP on the loopback. */
export async function startImageServer(root: string): Promise<ImageServer> {
  const file = join(root, 'tiny.qcow2');
  await run('qemu-img', ['create', '-q', '-f', 'qcow2', file, '64M']);
  const bytes = await readFile(file);
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  const hits = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    hits.set(req.url ?? '', (hits.get(req.url ?? '') ?? 0) + 1);
    if (req.url === '/tiny.qcow2')
      res
        .writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes.length })
        .end(bytes);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/tiny.qcow2`,
    sha256,
    hits,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/** The run's directory; world-traversable, since QEMU runs as its own user and opens the disks in it. */
export async function tempRoot(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'ep-kvm-'));
  await chmod(dir, 0o755);
  return dir;
}

/**
 * Plays the guest's first packet: a permanent neighbour entry for the
 * domain's MAC, with an address from TEST-NET-2 (198.51.100.0/24, never
 * routed) on the default-route device, so the host's ARP table shows the VM
 * the way it would once a booted guest sent traffic. No packet is sent.
 */
export class FakeArp {
  private entries = new Map<string, string>();
  private next = 10 + Math.floor(Math.random() * 200);
  private dev: string | undefined;

  private async device(): Promise<string> {
    if (this.dev !== undefined) return this.dev;
    const { stdout } = await run('ip', ['-o', 'link', 'show']);
    const dev = /^\d+: (eth\d+|en\w+)[:@]/m.exec(stdout)?.[1];
    if (dev === undefined) throw new Error('no ethernet device for the neighbour entry');
    this.dev = dev;
    return dev;
  }

  async add(mac: string): Promise<string> {
    const ip = `198.51.100.${this.next++ % 250}`;
    await run('ip', ['neigh', 'replace', ip, 'lladdr', mac, 'dev', await this.device(), 'nud', 'permanent']);
    this.entries.set(mac, ip);
    return ip;
  }

  async remove(mac: string): Promise<void> {
    const ip = this.entries.get(mac);
    if (ip === undefined) return;
    this.entries.delete(mac);
    await run('ip', ['neigh', 'del', ip, 'dev', await this.device()]).catch(() => undefined);
  }

  async clear(): Promise<void> {
    for (const mac of [...this.entries.keys()]) await this.remove(mac);
  }
}

export async function domainMacs(domain: string): Promise<string[]> {
  const xml = await virsh('dumpxml', domain);
  return [...xml.matchAll(/<mac address='([0-9a-f:]{17})'/g)].map((m) => m[1]!);
}

/** Every descendant of `pid` (the sshd processes serving this run's connections). */
export async function descendants(pid: number): Promise<number[]> {
  const out: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const p = queue.shift()!;
    const { stdout } = await run('pgrep', ['-P', String(p)]).catch(() => ({ stdout: '' }));
    for (const c of stdout
      .split('\n')
      .filter((x) => x.trim() !== '')
      .map(Number)) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

/** Serves one file (a real guest image) over HTTP on the loopback, streamed from disk. */
export async function serveFile(
  path: string,
): Promise<{ url: string; hits: () => number; close(): Promise<void> }> {
  const { size } = await stat(path);
  let hits = 0;
  const name = `/${basename(path)}`;
  const server: Server = createServer((req, res) => {
    if (req.url !== name) return void res.writeHead(404).end();
    hits++;
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
    createReadStream(path).pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}${name}`,
    hits: () => hits,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/**
 * Whether KVM here can run what the provider's `domainType: kvm` domain runs:
 * OVMF on a q35 machine with the host's CPU passed through, for 3 s. Some
 * nested hypervisors expose a /dev/kvm on which QEMU starts but the firmware's
 * first instructions fail ("KVM internal error") or the host CPU's MSRs are
 * refused; there the tests use software emulation (`domainType: qemu`).
 */
export async function kvmRunsFirmware(root: string): Promise<{ usable: boolean; why: string }> {
  const vars = join(root, 'probe-vars.fd');
  await writeFile(vars, await readFile('/usr/share/OVMF/OVMF_VARS_4M.fd'));
  const res = await run(
    'timeout',
    [
      '3',
      'qemu-system-x86_64',
      '-accel',
      'kvm',
      '-machine',
      'q35',
      '-cpu',
      'host',
      '-m',
      '128',
      '-nodefaults',
      '-display',
      'none',
      '-drive',
      'if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd',
      '-drive',
      `if=pflash,format=raw,file=${vars}`,
    ],
    { timeout: 20_000 },
  ).then(
    (r) => ({ code: 0, stderr: r.stderr }),
    (e: { code?: number; stderr?: string }) => ({ code: e.code ?? -1, stderr: e.stderr ?? '' }),
  );
  const bad = /KVM internal error|failed to set MSR|Could not access KVM|failed to initialize kvm/i.exec(
    res.stderr,
  );
  // `timeout` ends a healthy firmware that is still running: exit 124.
  if (res.code !== 124 || bad !== null)
    return { usable: false, why: (bad?.[0] ?? `qemu exited ${res.code}`) + ' under -accel kvm' };
  return { usable: true, why: 'OVMF runs under -accel kvm -cpu host' };
}

/**
 * A command's standard output inside a running guest, through its guest
 * agent (guest-exec with captured output, then guest-exec-status until it
 * has exited); throws when it exits non-zero or takes over `timeoutMs`.
 */
export async function guestRun(
  domain: string,
  [path, ...arg]: string[],
  timeoutMs = 30_000,
): Promise<string> {
  const agent = async <T>(execute: string, args: object) =>
    (
      JSON.parse(await virsh('qemu-agent-command', domain, JSON.stringify({ execute, arguments: args }))) as {
        return: T;
      }
    ).return;
  const { pid } = await agent<{ pid: number }>('guest-exec', { path, arg, 'capture-output': true });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await agent<{ exited: boolean; exitcode?: number; 'out-data'?: string }>(
      'guest-exec-status',
      { pid },
    );
    const out = Buffer.from(status['out-data'] ?? '', 'base64').toString('utf8');
    if (status.exited && status.exitcode === 0) return out;
    if (status.exited) throw new Error(`${path} in ${domain} exited ${status.exitcode}: ${out}`);
    if (Date.now() > deadline) throw new Error(`${path} in ${domain} still running after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
