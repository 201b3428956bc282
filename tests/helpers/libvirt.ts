/**
 * Real libvirtd and sshd for the kvm provider's tests (see
 * ../shared notes: libvirt and sshd). Installs Debian's packages through
 * infra/scripts/install-libvirt.sh, starts virtlogd and libvirtd only when
 * none answers (they are machine-wide daemons other test runs share, so
 * they are left running and never killed here), and gives each test run its
 * own sshd on a free loopback port with its own host key and client key,
 * its own transient storage pool, and a local HTTP server serving a tiny
 * qcow2 image made with qemu-img.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer, connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const REPO = resolve(import.meta.dirname, '../..');
export const VIRSH_URI = 'qemu:///system';

export async function virsh(...args: string[]): Promise<string> {
  const { stdout } = await run('virsh', ['-q', '-c', VIRSH_URI, ...args], { timeout: 60_000 });
  return stdout;
}

async function waitFor(what: string, deadlineMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${what} did not come up within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether something accepts connections on a unix socket (a socket file alone can be stale). */
function socketAnswers(path: string): Promise<boolean> {
  return new Promise((r) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      r(true);
    });
    s.once('error', () => r(false));
  });
}

const VIRTLOGD_SOCKET = '/run/libvirt/virtlogd-sock';

/**
 * Installs the packages when missing and makes sure virtlogd and libvirtd
 * answer. Each daemon is judged by whether its socket accepts a connection:
 * a daemon killed without cleanup (a machine restored from a snapshot, a
 * killed container) leaves its socket file behind, and libvirtd then starts
 * but fails every `virsh start` because it cannot reach virtlogd.
 */
export async function ensureLibvirt(): Promise<void> {
  await run('bash', [join(REPO, 'infra/scripts/install-libvirt.sh')], { timeout: 600_000 });
  const libvirtdAnswers = () =>
    run('virsh', ['-c', VIRSH_URI, 'version'], { timeout: 20_000 }).then(
      () => true,
      () => false,
    );
  await kvmDeviceForQemu();
  if ((await socketAnswers(VIRTLOGD_SOCKET)) && (await libvirtdAnswers())) return;
  // Under a machine-wide lock: two test runs must not both start a daemon.
  // The shell re-checks inside the lock (another run may have started them).
  const virtlogdAnswers = `python3 -c "import socket; socket.socket(socket.AF_UNIX).connect('${VIRTLOGD_SOCKET}')" 2>/dev/null`;
  await run(
    'flock',
    [
      // -o: the daemons must not inherit the lock's descriptor and hold it for life.
      '-o',
      '/tmp/egress-proxies-libvirtd.lock',
      'sh',
      '-c',
      `${virtlogdAnswers} || { rm -f ${VIRTLOGD_SOCKET} /run/libvirt/virtlogd-admin-sock /run/virtlogd.pid; ` +
        'virtlogd -d -p /run/virtlogd.pid; }; ' +
        'virsh -c qemu:///system version >/dev/null 2>&1 || libvirtd -d -p /run/libvirtd.pid',
    ],
    { timeout: 60_000 },
  );
  await waitFor('virtlogd', 30_000, () => socketAnswers(VIRTLOGD_SOCKET));
  await waitFor('libvirtd', 30_000, libvirtdAnswers);
}

/**
 * Without udev, /dev/kvm stays root-only: libvirtd (root) sees KVM when it
 * probes QEMU, the QEMU user does not, so libvirt discards its capability
 * cache on every connection and re-probes (4-12 s per virsh call, and calls
 * pile up behind each other). Giving the device to the kvm group, as udev's
 * rule does on a normal host, makes the cache stick.
 */
async function kvmDeviceForQemu(): Promise<void> {
  const { stdout } = await run('stat', ['-c', '%a %G', '/dev/kvm']).catch(() => ({ stdout: '' }));
  if (stdout.trim() === '' || stdout.trim() === '660 kvm') return;
  await run('chgrp', ['kvm', '/dev/kvm']);
  await run('chmod', ['660', '/dev/kvm']);
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

async function freePort(): Promise<number> {
  const s = createTcpServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

export interface TestSshd {
  port: number;
  /** The listening sshd's pid (each connection is served by its descendants). */
  pid: number;
  address: string;
  keyFile: string;
  knownHostsFile: string;
  /** The server's host public key line (`type base64`). */
  hostKeyLine: string;
  /** Writes a new client key pair and authorizes only it; returns the new private key path (same path). */
  rotateClientKey(): Promise<void>;
  stop(): Promise<void>;
}

export type HostKeyType = 'ed25519' | 'ecdsa' | 'rsa';

/**
 * A private sshd on 127.0.0.1 (root login with the run's own key only), with
 * a host key of each of `hostKeyTypes` (ed25519 alone by default); the first
 * is the one `knownHostsFile` lists.
 */
export async function startSshd(
  root: string,
  hostKeyTypes: readonly HostKeyType[] = ['ed25519'],
): Promise<TestSshd> {
  mkdirSync('/run/sshd', { recursive: true });
  const dir = join(root, `ssh-${hostKeyTypes.join('-')}`);
  mkdirSync(dir, { recursive: true });
  const hostKeys = hostKeyTypes.map((t, i) => join(dir, i === 0 ? 'host_key' : `host_key_${t}`));
  for (const [i, t] of hostKeyTypes.entries())
    await run('ssh-keygen', ['-q', '-t', t, '-N', '', '-f', hostKeys[i]!]);
  const keyFile = join(dir, 'id_ed25519');
  const authorized = join(dir, 'authorized_keys');
  const newClientKey = async () => {
    await rm(keyFile, { force: true });
    await rm(`${keyFile}.pub`, { force: true });
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', keyFile]);
    await writeFile(authorized, await readFile(`${keyFile}.pub`));
    await chmod(authorized, 0o600);
  };
  await newClientKey();
  const port = await freePort();
  const config = join(dir, 'sshd_config');
  await writeFile(
    config,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      ...hostKeys.map((k) => `HostKey ${k}`),
      `PidFile ${join(dir, 'sshd.pid')}`,
      `AuthorizedKeysFile ${authorized}`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'StrictModes no',
      'MaxSessions 20',
      'MaxStartups 50',
      // bash run by sshd sources ~/.bashrc when it is the top-level shell; this
      // machine's root .bashrc runs `pyenv init` (about 140 ms), which would be
      // paid on every command the provider runs. A hypervisor's SSH user has no
      // such startup cost; SHLVL=1 makes bash a second-level shell, which skips it.
      'SetEnv SHLVL=1',
      '',
    ].join('\n'),
  );
  const hostKeyLine = readFileSync(join(dir, 'host_key.pub'), 'utf8')
    .trim()
    .split(/\s+/)
    .slice(0, 2)
    .join(' ');
  const knownHostsFile = join(dir, 'known_hosts');
  await writeFile(knownHostsFile, `[127.0.0.1]:${port} ${hostKeyLine}\n`);
  const child: ChildProcess = spawn('/usr/sbin/sshd', ['-D', '-e', '-f', config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr?.resume();
  await waitFor(
    'sshd',
    15_000,
    () =>
      new Promise<boolean>((r) => {
        const s = connect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          r(true);
        });
        s.once('error', () => r(false));
      }),
  );
  return {
    port,
    pid: child.pid!,
    address: `127.0.0.1:${port}`,
    keyFile,
    knownHostsFile,
    hostKeyLine,
    rotateClientKey: newClientKey,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
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

/** The guest image infra/scripts/build-kvm-guest.sh builds (or finds cached): path, sha256, how long it took. */
export async function guestImage(): Promise<{ path: string; sha256: string; seconds: number }> {
  const started = Date.now();
  const { stdout } = await run('bash', [join(REPO, 'infra/scripts/build-kvm-guest.sh')], {
    timeout: 1_800_000,
    maxBuffer: 16 << 20,
  });
  const path = stdout.trim().split('\n').pop()!;
  const sha256 = (await readFile(`${path}.sha256`, 'utf8')).trim();
  return { path, sha256, seconds: (Date.now() - started) / 1000 };
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
