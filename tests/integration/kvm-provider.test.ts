/**
 * The `kvm` provider against a real libvirtd (domain type qemu, software
 * emulation, user-mode networking) reached through a real sshd on the
 * loopback, both from Debian's packages (local-servers/libvirt.ts). The
 * disk image is a tiny qcow2 made by qemu-img and served by a local HTTP
 * server; no OS boots, so a running domain has no address and is
 * Provisioning. Where the conformance suite needs a Running instance with an
 * IP, the test plays the guest's first packet: a neighbour entry for the
 * domain's MAC (FakeArp), which is what the provider reads from the host's
 * ARP table.
 */
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { CoreV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { classOf, ProviderError } from '../../providers/errors.js';
import { kvmConfigSchema } from '../../providers/kvm/config.js';
import { marksElement, METADATA_KEY, METADATA_URI } from '../../providers/kvm/domain-xml.js';
import { formatProviderId, parseProviderId } from '../../providers/kvm/ids.js';
import { createKvmProvider } from '../../providers/kvm/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { CreateRequest, Provider } from '../../providers/types.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import { createDriftActivities } from '../../activities/drift-activities.js';
import { createGcActivities } from '../../activities/gc-activities.js';
import { createProviderCircuits } from '../../activities/provider-circuit.js';
import { unlistedOf } from '../../providers/types.js';
import { createNamespace, createProxy, kubeConfig, proxyClient, setProxyStatus } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import {
  createPool,
  descendants,
  domainMacs,
  FakeArp,
  startImageServer,
  tempRoot,
  virsh,
  type ImageServer,
  type TestPool,
} from '../helpers/libvirt.js';
import { ensureLibvirt, startSshd, type TestSshd } from '../../local-servers/libvirt.js';
import { freePort } from '../../local-servers/ports.js';

const HOST = 'lab';

interface Env {
  root: string;
  sshd: TestSshd;
  pool: TestPool;
  image: ImageServer;
  arp: FakeArp;
  noArp: Set<string>;
  poller: NodeJS.Timeout;
}

async function startEnv(): Promise<Env> {
  await ensureLibvirt();
  const root = await tempRoot();
  const sshd = await startSshd(root);
  const pool = await createPool(root);
  const image = await startImageServer(root);
  const arp = new FakeArp();
  const noArp = new Set<string>();
  const seeded = new Set<string>();
  let busy = false;
  const poller = setInterval(() => {
    if (busy) return;
    busy = true;
    void (async () => {
      for (const d of (await virsh('list', '--name')).split('\n').map((x) => x.trim())) {
        if (d === '' || seeded.has(d) || noArp.has(d)) continue;
        const xml = await virsh('dumpxml', d).catch(() => '');
        if (!xml.includes(pool.dir)) continue;
        seeded.add(d);
        for (const mac of await domainMacs(d)) await arp.add(mac);
      }
    })()
      .catch(() => undefined)
      .finally(() => (busy = false));
  }, 200);
  return { root, sshd, pool, image, arp, noArp, poller };
}

async function stopEnv(env: Env | undefined): Promise<void> {
  if (env === undefined) return;
  clearInterval(env.poller);
  await env.arp.clear();
  await env.pool.destroy();
  await env.image.close();
  await env.sshd.stop();
  await rm(env.root, { recursive: true, force: true });
}

function capture(): { logger: pino.Logger; lines: string[] } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(chunk.toString('utf8'));
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}

function kvmConfig(env: Env, overrides: Record<string, unknown> = {}) {
  return kvmConfigSchema.parse({
    sshKeyFile: env.sshd.keyFile,
    knownHostsFile: env.sshd.knownHostsFile,
    diskSizeGb: 1,
    installGuestAgent: true,
    images: { tiny: { url: env.image.url, sha256: env.image.sha256, firmware: 'bios' } },
    machineTypes: { small: { vcpus: 1, memoryMiB: 64 } },
    hosts: [
      {
        name: HOST,
        address: env.sshd.address,
        user: 'root',
        pool: env.pool.name,
        domainType: 'qemu',
        network: 'user',
      },
    ],
    callTimeoutSeconds: 30,
    ...overrides,
  });
}

const live = () => new AbortController().signal;

function request(overrides: Partial<CreateRequest> = {}): CreateRequest {
  const uid = overrides.uid ?? randomUUID();
  return {
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'kvm',
    proxyName: `p-${uid.slice(0, 8)}`,
    placement: {},
    cloudInit: '#cloud-config\n',
    port: 3128,
    installation: 'kvm-test',
    ...overrides,
  };
}

async function rejection(p: Promise<unknown>): Promise<ProviderError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    return err as ProviderError;
  }
  throw new Error('expected a rejection');
}

/** A defined (never started) domain in the test pool, optionally with our metadata (and without a disk: one that can start). */
async function defineBare(
  env: Env,
  name: string,
  metadata: string | undefined,
  memoryMiB = 64,
  withDisk = true,
): Promise<string> {
  const xml = `<domain type="qemu"><name>${name}</name>${metadata === undefined ? '' : `<metadata>${metadata}</metadata>`}<memory unit="MiB">${memoryMiB}</memory><vcpu>1</vcpu><os><type arch="x86_64" machine="q35">hvm</type></os><devices>${withDisk ? `<disk type="file" device="disk"><driver name="qemu" type="raw"/><source file="${join(env.pool.dir, `${name}.absent`)}"/><target dev="vda" bus="virtio"/></disk>` : ''}</devices></domain>`;
  const file = join(env.root, `${name}.xml`);
  await writeFile(file, xml);
  await virsh('define', file);
  return formatProviderId(HOST, name);
}

let shared: Env | undefined;
const sharedEnv = async () => (shared ??= await startEnv());

describeProviderConformance('kvm', async () => {
  const env = await sharedEnv();
  const { logger, lines } = capture();
  const provider = createKvmProvider({ name: 'kvm-conformance', config: kvmConfig(env), logger });
  return {
    provider,
    logLines: () => lines,
    port: 3128,
    runningWithinMs: 60_000,
    malformedIds: ['hosts/lab/domains/UPPER', 'hosts/la b/domains/proxy-x', 'hosts/lab/vms/proxy-x'],
    hooks: {
      async setRunningWithoutIp(id) {
        const { domain } = parseProviderId(id)!;
        env.noArp.add(domain);
        for (const mac of await domainMacs(domain)) await env.arp.remove(mac);
      },
      createUnmarked: (name) => defineBare(env, name, undefined),
      createMarkedWithEmptyUid: (name) =>
        defineBare(
          env,
          name,
          marksElement({ managed: true, uid: '', installation: 'conformance', createdAt: new Date() }),
        ),
      async rewriteMarks(id, marks) {
        const { domain } = parseProviderId(id)!;
        const element = marksElement({
          managed: true,
          uid: marks.uid,
          installation: 'conformance',
          createdAt: marks.createdAt,
        });
        const inner = element
          .replace(/^<[^>]+>/, '<instance>')
          .replace(/<\/[^>]+>$/, '</instance>')
          .replace(/egress:/g, '');
        await virsh(
          'metadata',
          domain,
          METADATA_URI,
          '--key',
          METADATA_KEY,
          '--set',
          inner,
          '--live',
          '--config',
        );
      },
      // The stall is the SSH connection's own server process, stopped: every
      // call on that host hangs, nothing else on the machine notices.
      async stall() {
        await provider.listByTag(live());
        // Only the sshd processes serving this provider's connection (never the remote virsh: it must not hold libvirtd).
        const mine = (await descendants(env.sshd.pid)).filter((p) => {
          try {
            return readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'sshd';
          } catch {
            return false;
          }
        });
        expect(mine.length).toBeGreaterThan(0);
        for (const p of mine) process.kill(p, 'SIGSTOP');
        return () => {
          for (const p of mine) process.kill(p, 'SIGCONT');
          return Promise.resolve();
        };
      },
    },
    async cleanup() {
      await provider.close?.();
    },
  };
});

describe('kvm provider against libvirtd over sshd', () => {
  let env: Env;
  let provider: Provider;
  let log: { logger: pino.Logger; lines: string[] };

  beforeAll(async () => {
    env = await sharedEnv();
    log = capture();
    provider = createKvmProvider({ name: 'kvm-test', config: kvmConfig(env), logger: log.logger });
  });

  afterAll(async () => {
    await provider?.close?.();
    await stopEnv(shared);
  });

  it('a running domain without an address is Provisioning; the base image is fetched once; the marks come back', async () => {
    const reqs = [request(), request(), request()];
    for (const r of reqs) env.noArp.add(r.name);
    const ids = await Promise.all(reqs.map((r) => provider.create(r, live())));
    expect(env.image.hits.get('/tiny.qcow2')).toBe(1);
    for (const [i, id] of ids.entries()) {
      expect(id).toBe(`hosts/${HOST}/domains/${reqs[i]!.name}`);
      expect((await virsh('domstate', reqs[i]!.name)).trim()).toBe('running');
      const got = await provider.get(id, live());
      expect(got.state).toBe('Provisioning');
      expect(got.ip).toBeUndefined();
      expect(got.uid).toBe(reqs[i]!.uid);
    }
    const vols = await virsh('vol-list', '--pool', env.pool.name);
    expect(vols).toContain('base-tiny.qcow2.sha256');
    expect(vols).toContain(`${reqs[0]!.name}-seed.iso`);
    for (const id of ids) await provider.delete(id, live());
    const after = await virsh('vol-list', '--pool', env.pool.name);
    expect(after).not.toContain(reqs[0]!.name);
    expect(after).toContain('base-tiny.qcow2');
  });

  it('volumes left without a domain are listed with their marks, and delete collects them', async () => {
    const req = request();
    env.noArp.add(req.name);
    const id = await provider.create(req, live());
    // A crash between the volumes and the domain: the domain goes, the volumes stay.
    await virsh('destroy', req.name);
    await virsh('undefine', req.name, '--nvram');
    const orphan = (await provider.listByTag(live())).find((i) => i.id === id);
    expect(orphan).toMatchObject({ state: 'Terminated', uid: req.uid, installation: 'kvm-test' });
    expect((await provider.get(id, live())).uid).toBe(req.uid);
    await provider.delete(id, live());
    expect(classOf(await rejection(provider.get(id, live())))).toBe('NotFound');
    expect(await virsh('vol-list', '--pool', env.pool.name)).not.toContain(req.name);
  });

  it('a pool without room for the disk is QuotaExceeded, and nothing is defined', async () => {
    const big = createKvmProvider({
      name: 'kvm-big',
      config: kvmConfig(env, { diskSizeGb: 100_000_000 }),
      logger: log.logger,
    });
    try {
      const req = request();
      const err = await rejection(big.create(req, live()));
      expect(err.errorClass).toBe('QuotaExceeded');
      expect(err.message).toMatch(/GiB free/);
      expect(await virsh('list', '--all', '--name')).not.toContain(req.name);
    } finally {
      await big.close?.();
    }
  });

  it('a machine type bigger than the host is QuotaExceeded naming the host, before define; a start refused for memory too', async () => {
    const huge = createKvmProvider({
      name: 'kvm-huge',
      // 64 TiB: more than any host here has, so the check before define refuses it.
      config: kvmConfig(env, { machineTypes: { small: { vcpus: 1, memoryMiB: 64 * 1024 * 1024 } } }),
      logger: log.logger,
    });
    try {
      const req = request();
      const err = await rejection(huge.create(req, live()));
      expect(err.errorClass, err.message).toBe('QuotaExceeded');
      expect(err.message).toContain(`host "${HOST}"`);
      expect(err.message).toMatch(/MiB of memory/);
      expect(await virsh('list', '--all', '--name')).not.toContain(req.name);
    } finally {
      await huge.close?.();
    }
    // A domain of ours already defined (a create resumed) whose start QEMU refuses for memory.
    const req = request();
    env.noArp.add(req.name);
    await defineBare(
      env,
      req.name,
      marksElement({ managed: true, uid: req.uid, installation: 'kvm-test', createdAt: new Date() }),
      1024 * 1024,
      false,
    );
    const refused = await rejection(provider.create(req, live()));
    expect(refused.errorClass, refused.message).toBe('QuotaExceeded');
    expect(refused.message).toContain(`host "${HOST}"`);
    await provider.delete(formatProviderId(HOST, req.name), live());
    expect(await virsh('list', '--all', '--name')).not.toContain(req.name);
  });

  it('a domain with a managed save and a snapshot is deleted', async () => {
    const req = request();
    env.noArp.add(req.name);
    const id = await provider.create(req, live());
    await virsh('managedsave', req.name);
    await virsh('snapshot-create-as', req.name, 'before-delete');
    expect(await virsh('dominfo', req.name)).toMatch(/Managed save:\s+yes/);
    expect((await virsh('snapshot-list', req.name, '--name')).trim()).toBe('before-delete');
    await provider.delete(id, live());
    expect(await virsh('list', '--all', '--name')).not.toContain(req.name);
    expect(classOf(await rejection(provider.get(id, live())))).toBe('NotFound');
  });

  it('two providers (two workers) creating on a cold cache end with one intact base image', async () => {
    // A key no other test uses: its base is not in the pool yet.
    const images = { cold: { url: env.image.url, sha256: env.image.sha256, firmware: 'bios' } };
    const workers = ['kvm-worker-a', 'kvm-worker-b'].map((name) =>
      createKvmProvider({ name, config: kvmConfig(env, { images }), logger: log.logger }),
    );
    try {
      const reqs = [request(), request()];
      for (const r of reqs) env.noArp.add(r.name);
      const ids = await Promise.all(workers.map((w, i) => w.create(reqs[i]!, live())));
      const vols = (await virsh('vol-list', '--pool', env.pool.name))
        .split('\n')
        .map((l) => l.trim().split(/\s+/)[0] ?? '')
        .filter((v) => v.startsWith('base-cold.'));
      // The marker names the one copy that won; the loser dropped its own, and no candidate marker is left.
      const [digest, copy, ...rest] = readFileSync(join(env.pool.dir, 'base-cold.qcow2.sha256'), 'utf8')
        .trim()
        .split(/\s+/);
      expect(rest).toEqual([]);
      expect(digest).toBe(env.image.sha256);
      expect(copy).toMatch(/^base-cold\.qcow2\.[0-9a-f]{8}$/);
      expect(vols.sort()).toEqual([copy, 'base-cold.qcow2.sha256'].sort());
      expect(
        createHash('sha256')
          .update(readFileSync(join(env.pool.dir, copy!)))
          .digest('hex'),
      ).toBe(env.image.sha256);
      // Both domains boot from that copy.
      for (const r of reqs)
        expect(await virsh('vol-dumpxml', '--pool', env.pool.name, `${r.name}.qcow2`)).toContain(
          join(env.pool.dir, copy!),
        );
      for (const [i, id] of ids.entries()) await workers[i]!.delete(id, live());
    } finally {
      for (const w of workers) await w.close?.();
    }
  });

  it('an image whose digest does not match is Permanent and not cached', async () => {
    const bad = createKvmProvider({
      name: 'kvm-badsum',
      config: kvmConfig(env, {
        images: { wrong: { url: env.image.url, sha256: '0'.repeat(64), firmware: 'bios' } },
      }),
      logger: log.logger,
    });
    try {
      const err = await rejection(bad.create(request(), live()));
      expect(err.errorClass).toBe('Permanent');
      expect(err.message).toMatch(/sha256/);
      expect(await virsh('vol-list', '--pool', env.pool.name)).not.toContain('base-wrong');
    } finally {
      await bad.close?.();
    }
  });

  it('SSH auth and host-key failures are Permanent; check names them; no key material anywhere', async () => {
    const otherKey = join(env.root, 'other_key');
    const { execFileSync } = await import('node:child_process');
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', otherKey]);
    const wrongHosts = join(env.root, 'wrong_known_hosts');
    const otherPub = (await import('node:fs'))
      .readFileSync(`${otherKey}.pub`, 'utf8')
      .split(' ')
      .slice(0, 2)
      .join(' ');
    await writeFile(wrongHosts, `[127.0.0.1]:${env.sshd.port} ${otherPub}\n`);
    const cases = [
      { name: 'kvm-badkey', overrides: { sshKeyFile: otherKey } },
      { name: 'kvm-badhost', overrides: { knownHostsFile: wrongHosts } },
    ];
    const secret = (await import('node:fs')).readFileSync(otherKey, 'utf8').split('\n')[1]!;
    for (const c of cases) {
      const p = createKvmProvider({ name: c.name, config: kvmConfig(env, c.overrides), logger: log.logger });
      try {
        const err = await rejection(p.get(formatProviderId(HOST, 'proxy-aaaaaaaaaaaaaaaa'), live()));
        expect(err.errorClass).toBe('Permanent');
        expect(err.message).not.toContain(secret);
        const [target] = await p.check!(live());
        expect(target).toMatchObject({ name: HOST, ready: false, reason: 'SSHHandshakeFailed' });
      } finally {
        await p.close?.();
      }
    }
    const missing = createKvmProvider({
      name: 'kvm-nokey',
      config: kvmConfig(env, { sshKeyFile: join(env.root, 'absent') }),
      logger: log.logger,
    });
    const err = await rejection(missing.listByTag(live()));
    expect(err.errorClass).toBe('Transient');
    expect((await missing.check!(live()))[0]).toMatchObject({
      reason: 'SSHMaterialUnavailable',
      ready: false,
    });
    for (const line of log.lines) expect(line).not.toContain(secret);
  });

  it("a known_hosts listing only the host's ecdsa or rsa key is accepted (the host also has an ed25519 key)", async () => {
    for (const type of ['ecdsa', 'rsa'] as const) {
      const other = await startSshd(env.root, [type, 'ed25519']);
      expect(readFileSync(other.knownHostsFile, 'utf8')).toContain(
        type === 'rsa' ? 'ssh-rsa' : 'ecdsa-sha2-',
      );
      const p = createKvmProvider({
        name: `kvm-${type}`,
        config: kvmConfig(env, {
          sshKeyFile: other.keyFile,
          knownHostsFile: other.knownHostsFile,
          hosts: [
            {
              name: HOST,
              address: other.address,
              user: 'root',
              pool: env.pool.name,
              domainType: 'qemu',
              network: 'user',
            },
          ],
        }),
        logger: log.logger,
      });
      try {
        expect((await p.check!(live()))[0]).toMatchObject({ name: HOST, ready: true, reason: 'Reachable' });
      } finally {
        await p.close?.();
        await other.stop();
      }
    }
  });

  it('check reports the host, libvirt version and pool space; a missing pool is PoolNotFound', async () => {
    const [t] = await provider.check!(live());
    expect(t).toMatchObject({ name: HOST, ready: true, reason: 'Reachable' });
    expect(t!.details).toMatchObject({ user: 'root', pool: env.pool.name, poolState: 'running' });
    expect(t!.details!.libvirtVersion).toMatch(/^\d+\.\d+\.\d+$/);
    expect(Number(t!.details!.poolAvailable)).toBeGreaterThan(0);
    const p = createKvmProvider({
      name: 'kvm-nopool',
      config: kvmConfig(env, {
        hosts: [
          {
            name: HOST,
            address: env.sshd.address,
            user: 'root',
            pool: 'ep-absent-pool',
            domainType: 'qemu',
            network: 'user',
          },
        ],
      }),
      logger: log.logger,
    });
    try {
      expect((await p.check!(live()))[0]).toMatchObject({ ready: false, reason: 'PoolNotFound' });
    } finally {
      await p.close?.();
    }
  });

  it('a rotated SSH key is picked up without a restart', async () => {
    await provider.listByTag(live());
    await env.sshd.rotateClientKey();
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        await provider.listByTag(live());
        break;
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    const [t] = await provider.check!(live());
    expect(t!.ready).toBe(true);
  });

  it('cancelling one operation does not cut another on the same host', async () => {
    const req = request();
    env.noArp.add(req.name);
    const controller = new AbortController();
    const cancelled = provider.create(req, controller.signal);
    const other = provider.listByTag(live());
    setImmediate(() => controller.abort());
    const err = await rejection(cancelled);
    expect(err.errorClass).toBe('Transient');
    expect(Array.isArray(await other)).toBe(true);
    // and the connection is still good for the next call
    expect((await provider.check!(live()))[0]!.ready).toBe(true);
    await provider.delete(formatProviderId(HOST, req.name), live());
  });

  it('a host that is down: the other is listed, checked, created on and read; drift and GC leave the down host alone', async () => {
    // "down": a port nothing listens on.
    const downPort = await freePort();
    const lab = {
      name: HOST,
      address: env.sshd.address,
      user: 'root',
      pool: env.pool.name,
      domainType: 'qemu',
      network: 'user',
    };
    const two = createKvmProvider({
      name: 'kvm-two',
      config: kvmConfig(env, { hosts: [lab, { ...lab, name: 'down', address: `127.0.0.1:${downPort}` }] }),
      logger: log.logger,
    });
    const kc = kubeConfig();
    const namespace = await createNamespace(kc, 'kvm-two');
    const api = proxyClient(kc);
    try {
      const onLab = request({ placement: { zone: HOST } });
      const gone = request({ placement: { zone: HOST } });
      const labId = await two.create(onLab, live());
      const goneId = await two.create(gone, live());
      const downId = formatProviderId('down', instanceNameFromUid(randomUUID()));

      // Per-host answers: lab listed and Reachable, down named as unlisted and Unreachable.
      const listing = await two.listByTag(live());
      expect(listing.map((i) => i.id)).toEqual(expect.arrayContaining([labId, goneId]));
      expect(unlistedOf(listing).map((u) => [u.target, u.idPrefix])).toEqual([
        ['down', 'hosts/down/domains/'],
      ]);
      expect(unlistedOf(listing)[0]!.message).not.toBe('');
      expect((await two.check!(live())).map((t) => [t.name, t.ready, t.reason])).toEqual([
        [HOST, true, 'Reachable'],
        ['down', false, 'Unreachable'],
      ]);
      expect(classOf(await rejection(two.create(request({ placement: { zone: 'down' } }), live())))).toBe(
        'Transient',
      );
      // Unreachable is never NotFound: the workflow must not take the instance for gone.
      expect(classOf(await rejection(two.get(downId, live())))).toBe('Transient');
      await eventually('the lab instance Running with its address', async () =>
        (await two.get(labId, live())).state === 'Running' ? true : undefined,
      );

      // Three steady Proxies: one on lab (intact), one on lab whose domain goes away, one on the down host.
      const steady = async (name: string, providerID: string, ip: string) => {
        const p = await createProxy(api, namespace, name, {
          mode: 'Managed',
          provider: 'kvm-two',
          placement: {},
        } as never);
        await setProxyStatus(api, p, {
          providerID,
          ip,
          conditions: [
            {
              type: 'Provisioned',
              status: 'True',
              reason: 'Running',
              message: 'test',
              lastTransitionTime: new Date().toISOString(),
              observedGeneration: 1,
            },
          ],
        } as never);
      };
      const labIp = (await two.get(labId, live())).ip!;
      await steady('on-lab', labId, labIp);
      await steady('gone-lab', goneId, labIp);
      await steady('on-down', downId, '198.51.100.250');
      await two.delete(goneId, live());
      const signalled: string[] = [];
      const drift = createDriftActivities({
        registry: {
          get: (n) => (n === 'kvm-two' ? two : undefined),
          names: () => ['kvm-two'],
          close: async () => {},
        },
        kubeConfig: kc,
        logger: log.logger,
        circuits: createProviderCircuits(),
        namespaces: [namespace],
        signal: (workflowId) => {
          signalled.push(workflowId);
          return Promise.resolve('signalled');
        },
      });
      const report = await drift.sweepDrift({ listTimeoutMs: 60_000 });
      // on-lab compared and fine, gone-lab compared and drifted; on-down not compared at all.
      expect(report.providers).toEqual([
        expect.objectContaining({
          provider: 'kvm-two',
          compared: 2,
          drifted: 1,
          signalled: 1,
          unlisted: ['down'],
        }),
      ]);
      expect(signalled).toHaveLength(1);
      expect(signalled[0]).toContain('gone-lab');
      // GC's listing: the lab's instances, nothing of the down host, and the down host named in the log.
      const gc = createGcActivities({
        registry: {
          get: (n) => (n === 'kvm-two' ? two : undefined),
          names: () => ['kvm-two'],
          close: async () => {},
        },
        kubeConfig: kc,
        installation: 'kvm-test',
        logger: log.logger,
        namespaces: [namespace],
      });
      const listed = await gc.gcListInstances({ provider: 'kvm-two', timeoutMs: 60_000 });
      expect(listed.map((i) => i.id)).toContain(labId);
      expect(listed.filter((i) => i.id.startsWith('hosts/down/'))).toEqual([]);
      expect(log.lines.some((l) => l.includes('could not be listed') && l.includes('down'))).toBe(true);
      await two.delete(labId, live());
    } finally {
      await two.close?.();
      await kc
        .makeApiClient(CoreV1Api)
        .deleteNamespace({ name: namespace })
        .catch(() => undefined);
    }
  });

  it("the seed's kvm-home entry loads, and runs with its host pointed at this sshd", async () => {
    const yaml = `providers:
  - name: kvm-home
    type: kvm
    kvm:
      sshKeyFile: /etc/proxy-operator/kvm/id_ed25519
      knownHostsFile: /etc/proxy-operator/kvm/known_hosts
      images:
        debian-13:
          url: https://cloud.debian.org/images/cloud/trixie/latest/debian-13-generic-amd64.qcow2
        ubuntu-24.04:
          url: https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img
      machineTypes:
        small:  {vcpus: 1, memoryMiB: 1024}
        medium: {vcpus: 2, memoryMiB: 2048}
      hosts:
        - name: beelink
          address: beelink:22
          user: novakj
          bridge: br0
`;
    const seed = parseProvidersConfig(yaml, 'seed kvm-home');
    expect(seed.providers[0]).toMatchObject({ name: 'kvm-home', type: 'kvm' });
    // The same entry, with the test's sshd, key, image server, and a host that can run it (no KVM, no br0 here).
    const local = yaml
      .replace('/etc/proxy-operator/kvm/id_ed25519', env.sshd.keyFile)
      .replace('/etc/proxy-operator/kvm/known_hosts', env.sshd.knownHostsFile)
      .replace(
        'https://cloud.debian.org/images/cloud/trixie/latest/debian-13-generic-amd64.qcow2',
        env.image.url,
      )
      .replace('address: beelink:22', `address: ${env.sshd.address}`)
      .replace(
        'user: novakj',
        `user: root\n          pool: ${env.pool.name}\n          domainType: qemu\n          network: user`,
      )
      .replace('memoryMiB: 1024', 'memoryMiB: 128');
    const registry = buildProviders(parseProvidersConfig(local, 'kvm-home (test)'), {
      logger: log.logger,
      stateRoot: env.root,
    });
    try {
      const home = registry.get('kvm-home')!;
      expect(home.capabilities?.cheapListByTag).toBe(true);
      const req = request({ placement: { machineType: 'small', image: 'debian-13', zone: 'beelink' } });
      env.noArp.add(req.name);
      const id = await home.create(req, live());
      expect(id).toBe(`hosts/beelink/domains/${req.name}`);
      expect((await home.get(id, live())).state).toBe('Provisioning');
      // UEFI by default: the domain boots OVMF.
      expect(await virsh('dumpxml', req.name)).toMatch(/OVMF|firmware='efi'|<loader/);
      expect((await home.check!(live()))[0]).toMatchObject({ name: 'beelink', ready: true });
      await home.delete(id, live());
      expect(classOf(await rejection(home.get(id, live())))).toBe('NotFound');
    } finally {
      await registry.close();
    }
  });
});
