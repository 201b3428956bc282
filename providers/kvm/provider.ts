/**
 * The `kvm` provider: each instance is a libvirt domain on one of the
 * configured hosts, reached over SSH (ssh.ts) with `virsh` run on exec
 * channels (virsh.ts). Profile: providerID `hosts/<host>/domains/<name>`;
 * marks in the domain's `<metadata>` element plus a tiny `<name>.marks`
 * volume (so volumes left without a domain are still attributable and GC
 * can collect them); createdAt written at create; create synchronous and
 * resumable at every step; delete synchronous.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { Logger } from 'pino';
import { KeyedMutex } from '../concurrency.js';
import { operations, type OperationFrame, type Operations } from '../operation.js';
import {
  MARK_MANAGED,
  type CreateRequest,
  type ErrorClass,
  type Instance,
  type InstanceState,
  type Listing,
  type Provider,
  type ProviderOperation,
  type TargetStatus,
  type UnlistedScope,
} from '../types.js';
import { isHttpUrl, type KvmConfig, type KvmHost } from './config.js';
import {
  buildDomainXml,
  buildOverlayVolumeXml,
  buildRawVolumeXml,
  macAddresses,
  parseMarks,
  type InstanceMarks,
} from './domain-xml.js';
import {
  DOMAIN_NAME,
  baseVolume,
  domainOfVolume,
  formatProviderId,
  markerVolume,
  marksVolume,
  overlayVolume,
  parseProviderId,
  seedVolume,
  urlImageKey,
} from './ids.js';
import { buildSeedIso } from './seed.js';
import { ExecEnded, HostLink, SshError } from './ssh.js';
import { shellQuote, Virsh, VirshError } from './virsh.js';
import { timeoutSignal } from '../timeout-signal.js';

export const KVM_PROVIDER_TYPE = 'kvm';
const GiB = 1024 ** 3;

export interface KvmProviderOptions {
  name: string;
  config: KvmConfig;
  logger: Logger;
}

interface HostHandle {
  config: KvmHost;
  link: HostLink;
  virsh: Virsh;
}

/** Maps a libvirt state (virsh's words) and an address to ours: the seed's table. */
export function mapState(state: string, ip: string | undefined): InstanceState {
  const s = state.trim().toLowerCase();
  if (s === 'no state' || s === 'nostate') return 'Provisioning';
  if (s === 'running' || s === 'idle' || s === 'blocked') return ip ? 'Running' : 'Provisioning';
  return 'Stopped';
}

/** First routable IPv4 (not loopback, link-local or unspecified). */
export function firstRoutableIPv4(candidates: string[]): string | undefined {
  for (const c of candidates) {
    const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(c);
    if (m === null) continue;
    const [a, b] = [Number(m[1]), Number(m[2])];
    if (a === 127 || a === 0 || (a === 169 && b === 254)) continue;
    return c;
  }
  return undefined;
}

/** `/proc/net/arp` → addresses for the given MACs, in the table's order. */
export function arpLookup(table: string, macs: string[]): string[] {
  const want = new Set(macs.map((m) => m.toLowerCase()));
  const out: string[] = [];
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // flags 0x0 is an incomplete entry
    if (f.length >= 4 && want.has(f[3]!.toLowerCase()) && f[2] !== '0x0') out.push(f[0]!);
  }
  return out;
}

/**
 * A dnsmasq lease file (`<expiry> <mac> <ip> <hostname> <client-id>` per
 * line) → the IPv4 addresses leased to the given MACs, the latest expiry
 * first (a guest that renewed has one line; one re-leased keeps the newest).
 */
export function dnsmasqLeaseLookup(text: string, macs: string[]): string[] {
  const want = new Set(macs.map((m) => m.toLowerCase()));
  const found: Array<{ expiry: number; ip: string }> = [];
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 3 || !want.has(f[1]!.toLowerCase()) || !/^\d{1,3}(?:\.\d{1,3}){3}$/.test(f[2]!)) continue;
    found.push({ expiry: Number(f[0]) || 0, ip: f[2]! });
  }
  return found.sort((a, b) => b.expiry - a.expiry).map((l) => l.ip);
}

/** `virsh domifaddr` output → IPv4 addresses. */
export function parseDomIfAddr(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/\bipv4\s+(\d{1,3}(?:\.\d{1,3}){3})\/\d+/g)) out.push(m[1]!);
  return out;
}

/** `virsh nodeinfo` → CPUs and total memory (0 when a field is missing). */
export function parseNodeInfo(text: string): { cpus: number; memoryKiB: number } {
  const cpus = Number(/^CPU\(s\):\s+(\d+)/m.exec(text)?.[1] ?? 0);
  const memoryKiB = Number(/^Memory size:\s+(\d+)\s*KiB/m.exec(text)?.[1] ?? 0);
  return { cpus, memoryKiB };
}

/** `virsh nodememstats` → memory a new guest can have now (free + buffers + cached), or undefined. */
export function parseNodeMemStats(text: string): { availableKiB: number } | undefined {
  const values = new Map<string, number>();
  for (const m of text.matchAll(/^\s*(\w+)\s*:\s*(\d+)\s*KiB/gm)) values.set(m[1]!, Number(m[2]));
  if (!values.has('free')) return undefined;
  return {
    availableKiB: (values.get('free') ?? 0) + (values.get('buffers') ?? 0) + (values.get('cached') ?? 0),
  };
}

/** `virsh pool-info --bytes` → fields. */
export function parsePoolInfo(text: string): { state: string; capacity: number; available: number } {
  const field = (name: string) => new RegExp(`^${name}:\\s+(.*)$`, 'm').exec(text)?.[1]?.trim() ?? '';
  return {
    state: field('State'),
    capacity: Number(field('Capacity').split(/\s/)[0]) || 0,
    available: Number(field('Available').split(/\s/)[0]) || 0,
  };
}

/** Why this error has this class. Also used by tests. */
export function classify(
  err: unknown,
  operation: ProviderOperation,
): { errorClass: ErrorClass; summary: string } {
  if (err instanceof ExecEnded) return { errorClass: 'Transient', summary: err.message };
  if (err instanceof SshError) {
    switch (err.stage) {
      case 'material-invalid':
      case 'host-key':
      case 'auth':
        return { errorClass: 'Permanent', summary: err.message };
      default:
        return { errorClass: 'Transient', summary: err.message };
    }
  }
  if (err instanceof VirshError) {
    const what = `virsh ${err.subcommand}`;
    switch (err.kind) {
      case 'no-domain':
      case 'no-volume':
        // Something vanished mid-create (a concurrent delete): retry, never "gone".
        return {
          errorClass: operation === 'create' ? 'Transient' : 'NotFound',
          summary: `${what}: not found`,
        };
      case 'no-pool':
        return { errorClass: 'Permanent', summary: `${what}: storage pool not found` };
      case 'invalid':
        return { errorClass: 'Permanent', summary: `${what}: rejected as invalid or unsupported` };
      case 'auth':
        return { errorClass: 'Permanent', summary: `${what}: libvirt denied access` };
      case 'no-space':
        return { errorClass: 'QuotaExceeded', summary: `${what}: no space left in the storage pool` };
      case 'no-memory':
        return { errorClass: 'QuotaExceeded', summary: `${what}: the host has not enough memory` };
      case 'connect':
        return { errorClass: 'Transient', summary: `${what}: cannot connect to libvirtd` };
      default:
        return { errorClass: 'Transient', summary: `${what} failed (exit ${err.exitCode})` };
    }
  }
  return { errorClass: 'Transient', summary: 'unexpected failure' };
}

const LIST_SCRIPT = `uri=$1; pool=$2; leases=$3
names=$(virsh -q -c "$uri" list --all --name) || exit 1
printf '%s\\n' "$names" | while IFS= read -r d; do
  [ -n "$d" ] || continue
  s=$(virsh -q -c "$uri" domstate "$d" 2>/dev/null) || { echo "@@SKIP $d"; continue; }
  x=$(virsh -q -c "$uri" dumpxml "$d" 2>/dev/null) || { echo "@@SKIP $d"; continue; }
  case "$x" in *crawl.example.com/egress-proxies/kvm*) ;; *) continue ;; esac
  a=""
  case "$s" in running|idle|blocked) a=$(virsh -q -c "$uri" domifaddr "$d" --source agent 2>/dev/null) ;; esac
  printf '@@DOMAIN %s\\n@@STATE %s\\n%s\\n@@ADDR\\n%s\\n@@END\\n' "$d" "$s" "$x" "$a"
done
vols=$(virsh -q -c "$uri" vol-list --pool "$pool" 2>/dev/null | awk '{print $1}')
for v in $vols; do
  printf '@@VOL %s\\n' "$v"
  case "$v" in
    proxy-*.marks) virsh -q -c "$uri" domstate "\${v%.marks}" >/dev/null 2>&1 || { printf '@@MARKS %s\\n' "$v"; virsh -q -c "$uri" vol-download --pool "$pool" "$v" /dev/stdout 2>/dev/null; echo; } ;;
  esac
done
echo "@@LEASES"
[ -z "$leases" ] || cat "$leases" 2>/dev/null
echo "@@ARP"
cat /proc/net/arp
`;

export function createKvmProvider(options: KvmProviderOptions): Provider {
  return new KvmProvider(options);
}

class KvmProvider implements Provider {
  readonly name: string;
  readonly type = KVM_PROVIDER_TYPE;
  readonly capabilities = { cheapListByTag: true } as const;
  private readonly cfg: KvmConfig;
  private readonly log: Logger;
  private readonly frame: OperationFrame;
  /** fail() and run() in this provider's frame. */
  private readonly ops: Operations;
  private readonly hosts = new Map<string, HostHandle>();
  // In-process: concurrent creates of one name, and one download per image per host.
  private readonly nameLocks = new KeyedMutex();
  private readonly imageLocks = new KeyedMutex();

  constructor(options: KvmProviderOptions) {
    this.name = options.name;
    this.cfg = options.config;
    this.log = options.logger.child({ provider: options.name, providerType: KVM_PROVIDER_TYPE });
    this.frame = {
      provider: this.name,
      log: this.log,
      classify: (operation, instance, err, signal) => {
        if (signal.aborted)
          return this.ops.fail('Transient', operation, instance, 'aborted by the caller', err);
        const c = classify(err, operation);
        return this.ops.fail(c.errorClass, operation, instance, c.summary, err);
      },
      callerCaused: (_err, signal) => signal.aborted,
    };
    this.ops = operations(this.frame);

    for (const h of options.config.hosts) {
      const link = new HostLink({
        address: h.address,
        user: h.user,
        keyFile: options.config.sshKeyFile,
        ...(options.config.knownHostsFile === undefined
          ? {}
          : { knownHostsFile: options.config.knownHostsFile }),
        insecureIgnoreHostKey: options.config.insecureIgnoreHostKey,
        dialTimeoutMs: options.config.callTimeoutSeconds * 1000,
        provider: { type: KVM_PROVIDER_TYPE, name: options.name },
        hostName: h.name,
      });
      this.hosts.set(h.name, { config: h, link, virsh: new Virsh(link, h.socket) });
    }
  }

  private get callMs(): number {
    return this.cfg.callTimeoutSeconds * 1000;
  }

  private hostFor(operation: ProviderOperation, instance: string, hostName: string): HostHandle {
    const h = this.hosts.get(hostName);
    if (h === undefined)
      throw this.ops.fail('Permanent', operation, instance, `host "${hostName}" is not configured`);
    return h;
  }

  private parseId(operation: ProviderOperation, id: string): { host: string; domain: string } {
    const parsed = parseProviderId(id);
    if (parsed === undefined)
      throw this.ops.fail(
        'Permanent',
        operation,
        String(id).slice(0, 200),
        'not a kvm providerID (hosts/<host>/domains/<name>)',
      );
    return parsed;
  }

  private call(
    h: HostHandle,
    args: string[],
    signal: AbortSignal,
    stdin?: Buffer | Readable,
    timeoutMs?: number,
  ) {
    return h.virsh.run(args, {
      signal,
      timeoutMs: timeoutMs ?? this.callMs,
      ...(stdin === undefined ? {} : { stdin }),
    });
  }

  /** Runs `fn`; a VirshError of one of `kinds` resolves to `fallback`. */
  private async tolerate<T>(p: Promise<T>, kinds: string[], fallback: T): Promise<T> {
    try {
      return await p;
    } catch (err) {
      if (err instanceof VirshError && kinds.includes(err.kind)) return fallback;
      throw err;
    }
  }

  // ---- create ----

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = String(req.name);
    return this.ops.run('create', instance, signal, async () => {
      if (!DOMAIN_NAME.test(req.name) || !req.name.startsWith('proxy-'))
        throw this.ops.fail(
          'Permanent',
          'create',
          instance,
          'name is not an instance name (proxy-<16 base32>)',
        );
      if (typeof req.uid !== 'string' || req.uid === '')
        throw this.ops.fail('Permanent', 'create', instance, 'uid is empty');
      const hostName = this.pick(
        'create',
        instance,
        'zone',
        req.placement.zone,
        this.cfg.hosts.map((h) => h.name),
      );
      const h = this.hostFor('create', instance, hostName);
      const mtKey = this.pick(
        'create',
        instance,
        'machineType',
        req.placement.machineType,
        Object.keys(this.cfg.machineTypes),
      );
      const machine = this.cfg.machineTypes[mtKey]!;
      const image = this.resolveImage(instance, req.placement.image);
      const id = formatProviderId(hostName, req.name);
      return this.nameLocks.run(id, async () => {
        const log = this.log.child({ host: hostName, name: req.name });
        const existing = await this.tolerate(
          this.call(h, ['dumpxml', req.name], signal),
          ['no-domain'],
          undefined,
        );
        if (existing !== undefined) {
          const marks = parseMarks(existing);
          if (marks?.uid !== req.uid)
            throw this.ops.fail(
              'Permanent',
              'create',
              id,
              `a domain with this name belongs to another owner (uid mark "${(marks?.uid ?? '').slice(0, 64)}", want "${req.uid}"); not adopting it`,
            );
          await this.ensureRunning(h, req.name, signal);
          log.debug('domain exists; ensured running');
          return id;
        }
        await this.checkCapacity(h, machine, signal, id);
        const marks: InstanceMarks = {
          managed: true,
          uid: req.uid,
          installation: req.installation,
          createdAt: new Date(Math.floor(Date.now() / 1000) * 1000),
          namespace: req.namespace,
          proxyName: req.proxyName,
        };
        // 1. marks first: whatever a crash leaves behind stays attributable.
        const marksText = Buffer.from(JSON.stringify({ [MARK_MANAGED]: 'true', ...marks }) + '\n', 'utf8');
        const prior = await this.readMarksVolume(h, req.name, signal);
        if (prior !== undefined && prior.uid !== req.uid)
          throw this.ops.fail(
            'Permanent',
            'create',
            id,
            'volumes with this name belong to another owner; not adopting them',
          );
        if (prior === undefined) await this.upload(h, marksVolume(req.name), marksText, signal);
        // 2. base image, 3. overlay (reused), 4. seed (always rebuilt), 5. domain, 6. running.
        const basePath = await this.ensureImage(h, image, log, signal);
        const overlayPath = await this.ensureOverlay(h, req.name, basePath, image.format, signal);
        const iso = buildSeedIso({
          instanceName: req.name,
          cloudInit: req.cloudInit,
          installGuestAgent: this.cfg.installGuestAgent,
          vendorData: this.cfg.vendorData,
        });
        await this.checkSpace(h, iso.length, signal, id);
        const seedPath = await this.upload(h, seedVolume(req.name), iso, signal);
        const xml = buildDomainXml({
          name: req.name,
          domainType: h.config.domainType,
          vcpus: machine.vcpus,
          memoryMiB: machine.memoryMiB,
          firmware: image.firmware,
          overlayPath,
          seedPath,
          network:
            h.config.network === 'user'
              ? { kind: 'user' }
              : { kind: 'bridge', bridge: h.config.bridge ?? '' },
          marks: { ...(prior ?? marks), managed: true },
        });
        await this.call(h, ['define', '/dev/stdin'], signal, Buffer.from(xml, 'utf8'));
        log.debug('domain defined');
        await this.ensureRunning(h, req.name, signal);
        log.info('domain created and running');
        return id;
      });
    });
  }

  /** zone/machineType: the given key, or the only one configured. */
  private pick(
    op: ProviderOperation,
    instance: string,
    field: string,
    value: string | undefined,
    keys: string[],
  ): string {
    if (value === undefined || value === '') {
      if (keys.length === 1) return keys[0]!;
      throw this.ops.fail(
        'Permanent',
        op,
        instance,
        `placement.${field} is required (${keys.length} configured)`,
      );
    }
    if (!keys.includes(value))
      throw this.ops.fail(
        'Permanent',
        op,
        instance,
        `placement.${field} "${value.slice(0, 64)}" is not configured`,
      );
    return value;
  }

  private resolveImage(instance: string, value: string | undefined) {
    const keys = Object.keys(this.cfg.images);
    if ((value === undefined || value === '') && keys.length === 1) value = keys[0]!;
    if (value === undefined || value === '')
      throw this.ops.fail(
        'Permanent',
        'create',
        instance,
        `placement.image is required (${keys.length} configured)`,
      );
    const img = this.cfg.images[value];
    if (img !== undefined) return { key: value, ...img };
    if (isHttpUrl(value))
      return {
        key: urlImageKey(value),
        url: value,
        format: 'qcow2' as const,
        firmware: 'uefi' as const,
        sha256: undefined,
      };
    throw this.ops.fail(
      'Permanent',
      'create',
      instance,
      `placement.image "${value.slice(0, 64)}" is neither a configured image nor an http(s) URL`,
    );
  }

  private async ensureRunning(h: HostHandle, name: string, signal: AbortSignal): Promise<void> {
    const id = formatProviderId(h.config.name, name);
    const state = (await this.call(h, ['domstate', name], signal)).trim();
    if (state === 'running' || state === 'idle' || state === 'blocked') return;
    try {
      await this.call(h, ['start', name], signal);
    } catch (err) {
      // A start refused for memory is the host's capacity, not a passing fault (the seed retried it forever).
      if (err instanceof VirshError && err.kind === 'no-memory')
        throw this.ops.fail(
          'QuotaExceeded',
          'create',
          id,
          `host "${h.config.name}" has not enough memory to start the domain`,
          err,
        );
      if (!(err instanceof VirshError && err.kind === 'other')) throw err;
    }
    const after = (await this.call(h, ['domstate', name], signal)).trim();
    if (after !== 'running' && after !== 'idle' && after !== 'blocked')
      throw this.ops.fail('Transient', 'create', id, `domain did not start (state "${after.slice(0, 32)}")`);
  }

  /**
   * QuotaExceeded, naming the host, when the machine type cannot run there:
   * more vCPUs than the host has, more memory than it has in all, or more
   * than it has free now (free, buffers and page cache; `virsh nodememstats`).
   */
  private async checkCapacity(
    h: HostHandle,
    machine: { vcpus: number; memoryMiB: number },
    signal: AbortSignal,
    instance: string,
  ): Promise<void> {
    const node = parseNodeInfo(await this.call(h, ['nodeinfo'], signal));
    const stats = parseNodeMemStats(
      await this.tolerate(this.call(h, ['nodememstats'], signal), ['other', 'invalid'], ''),
    );
    const wantKiB = machine.memoryMiB * 1024;
    const host = `host "${h.config.name}"`;
    let problem: string | undefined;
    if (node.cpus > 0 && machine.vcpus > node.cpus)
      problem = `${host} has ${node.cpus} CPUs, the machine type asks for ${machine.vcpus} vCPUs`;
    else if (node.memoryKiB > 0 && wantKiB > node.memoryKiB)
      problem = `${host} has ${Math.floor(node.memoryKiB / 1024)} MiB of memory, the machine type asks for ${machine.memoryMiB} MiB`;
    else if (stats !== undefined && wantKiB > stats.availableKiB)
      problem = `${host} has ${Math.floor(stats.availableKiB / 1024)} MiB of memory free, the machine type asks for ${machine.memoryMiB} MiB`;
    if (problem !== undefined) throw this.ops.fail('QuotaExceeded', 'create', instance, problem);
  }

  private async poolInfo(h: HostHandle, signal: AbortSignal) {
    return parsePoolInfo(await this.call(h, ['pool-info', '--bytes', h.config.pool], signal));
  }

  /** QuotaExceeded when the pool cannot take `bytes` more (a seed gap: libvirt reports it as an ordinary error). */
  private async checkSpace(
    h: HostHandle,
    bytes: number,
    signal: AbortSignal,
    instance: string,
  ): Promise<void> {
    const info = await this.poolInfo(h, signal);
    if (info.available < bytes)
      throw this.ops.fail(
        'QuotaExceeded',
        'create',
        instance,
        `storage pool "${h.config.pool}" on host "${h.config.name}" has ${(info.available / GiB).toFixed(2)} GiB free, needs ${(bytes / GiB).toFixed(2)} GiB`,
      );
  }

  /** Creates (replacing) a raw volume and streams `data` into it; returns its path. */
  private async upload(h: HostHandle, vol: string, data: Buffer, signal: AbortSignal): Promise<string> {
    const pool = h.config.pool;
    await this.tolerate(this.call(h, ['vol-delete', '--pool', pool, vol], signal), ['no-volume'], '');
    await this.call(
      h,
      ['vol-create', '--pool', pool, '/dev/stdin'],
      signal,
      Buffer.from(buildRawVolumeXml(vol, data.length), 'utf8'),
    );
    await this.call(h, ['vol-upload', '--pool', pool, vol, '/dev/stdin'], signal, data);
    return (await this.call(h, ['vol-path', '--pool', h.config.pool, vol], signal)).trim();
  }

  private async readMarksVolume(
    h: HostHandle,
    name: string,
    signal: AbortSignal,
  ): Promise<InstanceMarks | undefined> {
    const text = await this.tolerate(
      this.call(h, ['vol-download', '--pool', h.config.pool, marksVolume(name), '/dev/stdout'], signal),
      ['no-volume'],
      undefined,
    );
    return text === undefined ? undefined : parseMarksJson(text);
  }

  private async ensureImage(
    h: HostHandle,
    image: { key: string; url: string; sha256?: string | undefined; format: 'qcow2' | 'raw' },
    log: Logger,
    signal: AbortSignal,
  ): Promise<string> {
    const pool = h.config.pool;
    const base = baseVolume(image.key, image.format);
    const marker = markerVolume(base);
    return this.imageLocks.run(`${h.config.name}/${base}`, async () => {
      const published = await this.publishedBase(h, base, marker, image.sha256, signal);
      if (published !== undefined) return published;
      // No complete copy: fetch, streaming through the operator, into a volume
      // of this call's own; nothing another worker may be writing is touched.
      const copy = `${base}.${randomBytes(4).toString('hex')}`;
      const started = Date.now();
      log.info({ image: image.key }, 'fetching base image into host pool');
      const download = timeoutSignal(signal, this.cfg.downloadTimeoutSeconds * 1000);
      const bound = download.signal;
      try {
        let res: Response;
        try {
          res = await fetch(image.url, { signal: bound });
        } catch (err) {
          throw this.ops.fail('Transient', 'create', image.key, 'image download failed', err);
        }
        if (!res.ok || res.body === null) {
          void res.body?.cancel();
          throw this.ops.fail(
            res.status >= 400 && res.status < 500 && res.status !== 429 ? 'Permanent' : 'Transient',
            'create',
            image.key,
            `image download answered HTTP ${res.status}`,
          );
        }
        const length = Number(res.headers.get('content-length') ?? '0') || 0;
        const need = length + this.cfg.diskSizeGb * GiB;
        try {
          await this.checkSpace(h, need, signal, image.key);
        } catch (err) {
          void res.body.cancel();
          throw err;
        }
        await this.call(
          h,
          ['vol-create', '--pool', pool, '/dev/stdin'],
          signal,
          Buffer.from(buildRawVolumeXml(copy, 0), 'utf8'),
        );
        const dropCopy = () =>
          this.tolerate(this.call(h, ['vol-delete', '--pool', pool, copy], signal), ['no-volume'], '');
        const hash = createHash('sha256');
        let bytes = 0;
        const hashing = new Transform({
          transform(chunk: Buffer, _enc, cb) {
            hash.update(chunk);
            bytes += chunk.length;
            cb(null, chunk);
          },
        });
        const body = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>).pipe(hashing);
        try {
          await this.call(
            h,
            ['vol-upload', '--pool', pool, copy, '/dev/stdin'],
            bound,
            body,
            this.cfg.downloadTimeoutSeconds * 1000,
          );
        } catch (err) {
          await dropCopy().catch(() => undefined);
          throw err;
        }
        const got = hash.digest('hex');
        if (image.sha256 !== undefined && got !== image.sha256) {
          await dropCopy();
          throw this.ops.fail(
            'Permanent',
            'create',
            image.key,
            `downloaded image sha256 ${got} does not match the configured sha256`,
          );
        }
        const path = await this.publishBase(h, base, marker, copy, got, signal, image.key);
        if (path === undefined) {
          // Another worker published first: use its copy, drop ours.
          await dropCopy();
          const theirs = await this.publishedBase(h, base, marker, image.sha256, signal);
          if (theirs !== undefined) return theirs;
          throw this.ops.fail(
            'Transient',
            'create',
            image.key,
            'another worker is publishing this base image; retried',
          );
        }
        log.info({ image: image.key, bytes, durationMs: Date.now() - started }, 'base image cached');
        return path;
      } finally {
        download.clear();
      }
    });
  }

  /**
   * The path of the base image the marker names, when the marker is complete
   * and its digest is the one wanted. A marker holds `<sha256> <volume>`, or
   * only `<sha256>` when an earlier version wrote it (the base then has the
   * fixed name).
   */
  private async publishedBase(
    h: HostHandle,
    base: string,
    marker: string,
    sha256: string | undefined,
    signal: AbortSignal,
  ): Promise<string | undefined> {
    const named = await this.readBaseMarker(h, base, marker, signal);
    if (named === undefined || (sha256 !== undefined && sha256 !== named.digest)) return undefined;
    const path = await this.tolerate(
      this.call(h, ['vol-path', '--pool', h.config.pool, named.volume], signal),
      ['no-volume'],
      undefined,
    );
    return path?.trim();
  }

  /** The marker's digest and copy; undefined when it is absent or unreadable. */
  private async readBaseMarker(
    h: HostHandle,
    base: string,
    marker: string,
    signal: AbortSignal,
  ): Promise<{ digest: string; volume: string } | undefined> {
    const text = await this.tolerate(
      this.call(h, ['vol-download', '--pool', h.config.pool, marker, '/dev/stdout'], signal),
      ['no-volume'],
      undefined,
    );
    return parseBaseMarker(text, base);
  }

  /**
   * Publishes `copy` as the base by creating the marker: libvirt refuses a
   * second volume of one name, so of two workers that fetched the same image
   * one wins and the other uses the winner's copy. Only libvirt calls, no
   * file operations: the SSH user needs no write access to the pool's
   * directory (a user in the `libvirt` group has none on a stock host). The
   * marker is made whole with its text by cloning a volume of this call's own
   * that already holds it. Returns the copy's path, or undefined when the
   * marker was there first (a marker left unreadable by a worker that died
   * between its creation and its text is removed, so the next try publishes).
   */
  private async publishBase(
    h: HostHandle,
    base: string,
    marker: string,
    copy: string,
    digest: string,
    signal: AbortSignal,
    imageKey: string,
  ): Promise<string | undefined> {
    const pool = h.config.pool;
    const candidate = `${marker}.${randomBytes(4).toString('hex')}`;
    await this.upload(h, candidate, Buffer.from(`${digest} ${copy}\n`, 'utf8'), signal);
    const createMarker = () =>
      this.call(
        h,
        ['vol-create-from', '--pool', pool, '--inputpool', pool, '/dev/stdin', candidate],
        signal,
        Buffer.from(buildRawVolumeXml(marker, 0), 'utf8'),
      ).then(
        () => true,
        (err: unknown) => {
          if (err instanceof VirshError && err.kind === 'exists') return false;
          throw err;
        },
      );
    const dropMarker = () =>
      this.tolerate(this.call(h, ['vol-delete', '--pool', pool, marker], signal), ['no-volume'], '');
    try {
      if (!(await createMarker())) {
        const theirs = await this.readBaseMarker(h, base, marker, signal);
        if (theirs?.digest === digest) return undefined;
        if (theirs === undefined) {
          // Unreadable: a worker died between the marker's creation and its text (or is in it now).
          this.log.warn({ image: imageKey }, 'base image marker unreadable; removed for the next try');
          await dropMarker();
          return undefined;
        }
        // A marker for other bytes: the image under this key changed. The old
        // copy stays (overlays made from it still read it); the marker moves on.
        this.log.info({ image: imageKey }, 'base image changed; publishing the new one');
        await dropMarker();
        if (!(await createMarker())) return undefined;
      }
    } finally {
      await this.tolerate(
        this.call(h, ['vol-delete', '--pool', pool, candidate], signal),
        ['no-volume', 'other'],
        '',
      ).catch(() => undefined);
    }
    return (await this.call(h, ['vol-path', '--pool', pool, copy], signal)).trim();
  }

  private async ensureOverlay(
    h: HostHandle,
    name: string,
    basePath: string,
    baseFormat: 'qcow2' | 'raw',
    signal: AbortSignal,
  ): Promise<string> {
    const vol = overlayVolume(name);
    const path = await this.tolerate(
      this.call(h, ['vol-path', '--pool', h.config.pool, vol], signal),
      ['no-volume'],
      undefined,
    );
    if (path !== undefined) return path.trim();
    await this.checkSpace(h, this.cfg.diskSizeGb * GiB, signal, formatProviderId(h.config.name, name));
    const xml = buildOverlayVolumeXml({
      name: vol,
      capacityBytes: this.cfg.diskSizeGb * GiB,
      basePath,
      baseFormat,
    });
    await this.call(
      h,
      ['vol-create', '--pool', h.config.pool, '/dev/stdin'],
      signal,
      Buffer.from(xml, 'utf8'),
    );
    return (await this.call(h, ['vol-path', '--pool', h.config.pool, vol], signal)).trim();
  }

  // ---- get ----

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id), signal, async () => {
      const { host, domain } = this.parseId('get', id);
      const h = this.hostFor('get', id, host);
      const xml = await this.tolerate(this.call(h, ['dumpxml', domain], signal), ['no-domain'], undefined);
      if (xml === undefined) {
        // No domain: volumes left by a create that never finished are still ours to report (and collect).
        const marks = await this.readMarksVolume(h, domain, signal);
        if (marks === undefined) throw this.ops.fail('NotFound', 'get', id, 'no such domain');
        return toInstance(id, 'Terminated', undefined, marks);
      }
      const state = await this.call(h, ['domstate', domain], signal);
      let ip: string | undefined;
      if (mapState(state, '1.1.1.1') === 'Running') ip = await this.address(h, domain, xml, signal);
      return toInstance(id, mapState(state, ip), ip, parseMarks(xml));
    });
  }

  /**
   * ARP table first (the host's, matched by the domain's MACs), then the
   * guest agent, then the bridge's DHCP leases when the host names its lease
   * file (a guest without the agent, on a bridge the host has no address on).
   */
  private async address(
    h: HostHandle,
    domain: string,
    xml: string,
    signal: AbortSignal,
  ): Promise<string | undefined> {
    const arp = await h.link.exec('cat /proc/net/arp', {
      signal,
      timeoutMs: this.callMs,
      label: 'cat /proc/net/arp',
    });
    const fromArp = firstRoutableIPv4(arpLookup(arp.stdout.toString('utf8'), macAddresses(xml)));
    if (fromArp !== undefined) return fromArp;
    const agent = await this.tolerate(
      this.call(h, ['domifaddr', domain, '--source', 'agent'], signal),
      ['other', 'not-running', 'invalid'],
      '',
    );
    const fromAgent = firstRoutableIPv4(parseDomIfAddr(agent));
    const leasesFile = h.config.dhcpLeasesFile;
    if (fromAgent !== undefined || leasesFile === undefined) return fromAgent;
    const leases = await h.link.exec(`cat ${shellQuote(leasesFile)}`, {
      signal,
      timeoutMs: this.callMs,
      label: 'cat dhcpLeasesFile',
    });
    // A missing file is no lease yet (dnsmasq writes it at the first one), not an error.
    return firstRoutableIPv4(dnsmasqLeaseLookup(leases.stdout.toString('utf8'), macAddresses(xml)));
  }

  // ---- delete ----

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id), signal, async () => {
      const { host, domain } = this.parseId('delete', id);
      const h = this.hosts.get(host);
      if (h === undefined) {
        // The seed's rule: a host removed from the config must not pin the Proxy's finalizer.
        this.log.warn({ host, name: domain }, 'delete for a host that is not configured; nothing to do');
        return;
      }
      await this.nameLocks.run(id, async () => {
        await this.tolerate(
          this.call(h, ['destroy', domain], signal),
          ['no-domain', 'not-running', 'other'],
          '',
        );
        // A managed-save image or snapshot metadata makes a bare undefine fail for ever.
        await this.tolerate(
          this.call(h, ['undefine', domain, '--nvram', '--managed-save', '--snapshots-metadata'], signal),
          ['no-domain'],
          '',
        );
        const pool = h.config.pool;
        for (const vol of [overlayVolume(domain), seedVolume(domain), marksVolume(domain)])
          await this.tolerate(
            this.call(h, ['vol-delete', '--pool', pool, vol], signal),
            ['no-volume', 'no-pool'],
            '',
          );
        // destroy may have failed for a reason other than "not running": make sure it is gone.
        const still = await this.tolerate(
          this.call(h, ['domstate', domain], signal),
          ['no-domain'],
          undefined,
        );
        if (still !== undefined)
          throw this.ops.fail('Transient', 'delete', id, 'domain still exists after undefine');
        this.log.info({ host, name: domain }, 'domain and volumes deleted');
      });
    });
  }

  // ---- list ----

  /**
   * Every host listed at once; a host that cannot be listed does not hold up
   * or fail the others: its instances are left out and the host is named in
   * `unlisted` (so GC and the drift sweep leave them alone). Only when no
   * host answers is the listing an error.
   */
  listByTag(signal: AbortSignal): Promise<Listing> {
    return this.ops.run('list', '', signal, async () => {
      const hosts = [...this.hosts.values()];
      const settled = await Promise.allSettled(hosts.map((h) => this.listHost(h, signal)));
      const listing: Listing = [];
      const unlisted: UnlistedScope[] = [];
      let firstError: unknown;
      settled.forEach((r, i) => {
        const h = hosts[i]!;
        if (r.status === 'fulfilled') {
          listing.push(...r.value);
          return;
        }
        firstError ??= r.reason;
        const summary = signal.aborted ? 'aborted by the caller' : classify(r.reason, 'list').summary;
        unlisted.push({
          target: h.config.name,
          idPrefix: formatProviderId(h.config.name, ''),
          message: summary.slice(0, 512),
        });
        this.log.warn({ host: h.config.name, error: summary }, 'list: host could not be listed; left out');
      });
      if (unlisted.length === hosts.length) throw firstError;
      if (unlisted.length > 0) listing.unlisted = unlisted;
      return listing;
    });
  }

  private async listHost(h: HostHandle, signal: AbortSignal): Promise<Instance[]> {
    const out = await h.virsh.script(LIST_SCRIPT, [h.config.pool, h.config.dhcpLeasesFile ?? ''], {
      signal,
      timeoutMs: this.callMs * 4,
    });
    const instances: Instance[] = [];
    const domains = new Set<string>();
    const arpAt = out.lastIndexOf('\n@@ARP\n');
    const arp = arpAt < 0 ? '' : out.slice(arpAt + 7);
    const leasesAt = out.lastIndexOf('\n@@LEASES\n');
    const leases = leasesAt < 0 || arpAt < leasesAt ? '' : out.slice(leasesAt + 10, arpAt);
    for (const block of out.split('@@DOMAIN ').slice(1)) {
      const name = block.slice(0, block.indexOf('\n'));
      domains.add(name);
      const state = /@@STATE (.*)\n/.exec(block)?.[1] ?? '';
      const end = block.indexOf('\n@@END');
      const addrAt = block.indexOf('\n@@ADDR\n');
      const xml = block.slice(block.indexOf('\n', block.indexOf('@@STATE')) + 1, addrAt);
      const marks = parseMarks(xml);
      if (marks === undefined || !marks.managed || !DOMAIN_NAME.test(name)) continue;
      let ip: string | undefined;
      if (mapState(state, '1.1.1.1') === 'Running')
        ip =
          firstRoutableIPv4(arpLookup(arp, macAddresses(xml))) ??
          firstRoutableIPv4(parseDomIfAddr(block.slice(addrAt, end))) ??
          firstRoutableIPv4(dnsmasqLeaseLookup(leases, macAddresses(xml)));
      instances.push(toInstance(formatProviderId(h.config.name, name), mapState(state, ip), ip, marks));
    }
    for (const m of out.matchAll(/^@@SKIP (.*)$/gm)) {
      domains.add(m[1]!);
      this.log.warn(
        { host: h.config.name, name: m[1]!.slice(0, 64) },
        'list: domain could not be read; skipped',
      );
    }
    // Volumes of ours with no domain (a create that crashed before define): report them so GC collects them.
    const marksBlocks = out.split('@@MARKS ').slice(1);
    for (const block of marksBlocks) {
      const vol = block.slice(0, block.indexOf('\n'));
      const domain = domainOfVolume(vol);
      if (domain === undefined || domains.has(domain)) continue;
      const marks = parseMarksJson(
        block.slice(block.indexOf('\n') + 1, block.indexOf('@@', 1) > 0 ? block.indexOf('@@', 1) : undefined),
      );
      if (marks === undefined || !marks.managed) continue;
      instances.push(toInstance(formatProviderId(h.config.name, domain), 'Terminated', undefined, marks));
    }
    return instances;
  }

  // ---- check ----

  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    return Promise.all(this.cfg.hosts.map((h) => this.checkHost(this.hosts.get(h.name)!, signal)));
  }

  private async checkHost(h: HostHandle, signal: AbortSignal): Promise<TargetStatus> {
    const ts: TargetStatus = {
      name: h.config.name,
      address: h.config.address,
      ready: false,
      reason: 'Timeout',
      details: { user: h.config.user, pool: h.config.pool },
    };
    const started = Date.now();
    try {
      if (signal.aborted) throw new ExecEnded('caller');
      const hostname = (await this.call(h, ['hostname'], signal)).trim();
      const version = /libvirt ([\d.]+)/.exec(await this.call(h, ['version', '--daemon'], signal))?.[1] ?? '';
      const pool = await this.poolInfo(h, signal);
      Object.assign(ts.details!, {
        hostname: hostname.slice(0, 253),
        libvirtVersion: version,
        poolState: pool.state,
        poolCapacity: (pool.capacity / GiB).toFixed(2),
        poolAvailable: (pool.available / GiB).toFixed(2),
      });
      if (pool.state !== 'running') {
        ts.reason = 'PoolNotActive';
        ts.message = `storage pool "${h.config.pool}" is ${pool.state.slice(0, 32)}`;
      } else {
        ts.ready = true;
        ts.reason = 'Reachable';
      }
    } catch (err) {
      ts.reason = checkReason(err);
      ts.message = (err instanceof VirshError ? err.firstLine() : ((err as Error).message ?? 'failed')).slice(
        0,
        1024,
      );
    }
    ts.latencyMillis = Date.now() - started;
    return ts;
  }

  close(): Promise<void> {
    for (const h of this.hosts.values()) h.link.close();
    return Promise.resolve();
  }
}

/** The seed's check reasons, chosen by where the check broke. */
export function checkReason(err: unknown): string {
  if (err instanceof SshError) {
    switch (err.stage) {
      case 'material-missing':
      case 'material-invalid':
        return 'SSHMaterialUnavailable';
      case 'host-key':
      case 'auth':
        return 'SSHHandshakeFailed';
      case 'timeout':
        return 'Timeout';
      default:
        return 'Unreachable';
    }
  }
  if (err instanceof ExecEnded) return 'Timeout';
  if (err instanceof VirshError) {
    if (err.kind === 'connect') return 'LibvirtConnectFailed';
    if (err.kind === 'no-pool') return 'PoolNotFound';
    return 'LibvirtError';
  }
  return 'Unreachable';
}

/**
 * A base image's marker: `<sha256> <volume>`, or `<sha256>` alone as earlier
 * versions wrote it (the base then has its fixed name). The volume must be
 * one of this base's copies; anything else is unreadable.
 */
export function parseBaseMarker(
  text: string | undefined,
  base: string,
): { digest: string; volume: string } | undefined {
  const words = (text ?? '').trim().split(/\s+/);
  const [digest, volume = base, ...rest] = words;
  if (digest === undefined || !/^[0-9a-f]{64}$/.test(digest) || rest.length > 0) return undefined;
  if (
    volume !== base &&
    !(volume.startsWith(`${base}.`) && /^[0-9a-f]{8}$/.test(volume.slice(base.length + 1)))
  )
    return undefined;
  return { digest, volume };
}

function parseMarksJson(text: string): InstanceMarks | undefined {
  try {
    const j = JSON.parse(text.trim()) as Record<string, unknown>;
    const created = typeof j.createdAt === 'string' ? new Date(j.createdAt) : undefined;
    return {
      managed: j.managed === true,
      uid: typeof j.uid === 'string' ? j.uid : '',
      installation: typeof j.installation === 'string' ? j.installation : '',
      ...(created !== undefined && !Number.isNaN(created.getTime()) ? { createdAt: created } : {}),
    };
  } catch {
    return undefined;
  }
}

function toInstance(
  id: string,
  state: InstanceState,
  ip: string | undefined,
  marks: InstanceMarks | undefined,
): Instance {
  return {
    id,
    state,
    ...(state === 'Running' && ip !== undefined ? { ip } : {}),
    uid: marks?.uid ?? '',
    installation: marks?.installation ?? '',
    ...(marks?.createdAt === undefined ? {} : { createdAt: marks.createdAt }),
  };
}
