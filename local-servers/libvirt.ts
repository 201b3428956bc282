/**
 * The kvm provider's servers: real libvirtd and sshd. Installs Debian's
 * packages through infra/scripts/install-libvirt.sh and starts virtlogd and
 * libvirtd only when none answers (they are machine-wide daemons other test
 * runs share, so they are left running and never killed here); each test
 * run gets its own sshd on a free loopback port with its own host key and
 * client key. The guest image comes from infra/scripts/build-kvm-guest.sh.
 * tests/helpers/libvirt.ts has the rest (pools, fake ARP entries, image
 * servers).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { chmod, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.js';
import { waitUntil } from './process.js';
import { runInfraScript } from './tools.js';

const run = promisify(execFile);
export const VIRSH_URI = 'qemu:///system';

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
  await runInfraScript('install-libvirt.sh', { stderr: 'capture', timeoutMs: 600_000 });
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
  await waitUntil('virtlogd', () => socketAnswers(VIRTLOGD_SOCKET), { timeoutMs: 30_000, intervalMs: 100 });
  await waitUntil('libvirtd', libvirtdAnswers, { timeoutMs: 30_000, intervalMs: 100 });
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
  await waitUntil(
    'sshd',
    () =>
      new Promise<boolean>((r) => {
        const s = connect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          r(true);
        });
        s.once('error', () => r(false));
      }),
    { timeoutMs: 15_000, intervalMs: 100 },
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

/** The guest image infra/scripts/build-kvm-guest.sh builds (or finds cached): path, sha256, how long it took. */
export async function guestImage(): Promise<{ path: string; sha256: string; seconds: number }> {
  const started = Date.now();
  const path = await runInfraScript('build-kvm-guest.sh', { stderr: 'capture', timeoutMs: 1_800_000 });
  const sha256 = (await readFile(`${path}.sha256`, 'utf8')).trim();
  return { path, sha256, seconds: (Date.now() - started) / 1000 };
}
