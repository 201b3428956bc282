/**
 * The `proxmox` provider: every instance is a QEMU VM on a Proxmox VE
 * cluster, a linked clone of a per-node template, driven through the
 * cluster's REST API with an API token (client.ts).
 *
 * Profile (contract §4, docs/providers/proxmox.md): readiness
 * provisioning-window; create-return blocking (clone, seed upload, config,
 * start, every task followed to its exit status; every step found done on a
 * retry); delete-return waits (bounded); ip-source discovered (guest agent,
 * net0's MAC); gc-mark native-labels (PVE tags) with the same marks in the
 * clone's description for the window before the tags are written;
 * created-at written-at-create; list-partial fail-whole (one
 * /cluster/resources for the whole cluster, after /access/permissions
 * confirms the token can see VMs at all); quota detected (storage full);
 * not-found error-code confirmed by the cluster list; primary-key
 * allocated-id (VMIDs walked in a sequence keyed on the name);
 * provisioning-state create-blocks; async-ops task-handle and backend-lock;
 * secondary-resources explicit (the seed ISO); credentials mounted-files
 * with a ca-file and an optional fingerprint pin; client-kind thin-client.
 */
import type { Logger } from 'pino';
import { buildSeedIso } from '../kvm/seed.js';
import { KeyedMutex } from '../concurrency.js';
import { operations, type OperationFrame, type Operations } from '../operation.js';
import type {
  CreateRequest,
  Instance,
  InstanceState,
  Listing,
  Provider,
  ProviderOperation,
  TargetStatus,
} from '../types.js';
import { classify, isAgentNotRunning, isAlreadyRunning, isConfigMissing, isVmidTaken } from './classify.js';
import { ProxmoxClient, PveHttpError, PveTaskError } from './client.js';
import type { ProxmoxConfig, ProxmoxNode } from './config.js';
import {
  candidateVmids,
  descriptionMark,
  formatProviderId,
  INSTANCE_NAME,
  ipFromTags,
  withIpTag,
  markTags,
  marksFromDescription,
  marksFromTags,
  mergeTags,
  parseProviderId,
  splitTags,
  taggable,
  TAG_PREFIX,
  TAG_UID,
  type Marks,
} from './marks.js';

export const PROXMOX_PROVIDER_TYPE = 'proxmox';
/** VMIDs one create tries before giving up for this attempt. */
const CANDIDATES = 16;
/** Configs read per listing to name VMs the cluster list shows without a name or tags. */
const LIST_CONFIG_READS = 20;
/** How long a permission answer stands for listings (check() always asks). */
const PERMISSIONS_TTL_MS = 60_000;
/** Uploads in flight per storage. */
const UPLOADS_PER_STORAGE = 2;

/** Privileges the token needs on /vms (or the pool), by PVE major version for the agent's. */
export function requiredVmPrivileges(pveMajor: number): string[] {
  return [
    'VM.Audit',
    'VM.Allocate',
    'VM.Clone',
    'VM.Config.CDROM',
    'VM.Config.CPU',
    'VM.Config.Memory',
    'VM.Config.Options',
    'VM.PowerMgmt',
    pveMajor >= 9 ? 'VM.GuestAgent.Audit' : 'VM.Monitor',
  ];
}
export const REQUIRED_STORAGE_PRIVILEGES = ['Datastore.Audit', 'Datastore.AllocateTemplate'];

export interface ProxmoxProviderOptions {
  name: string;
  config: ProxmoxConfig;
  logger: Logger;
}

/** One row of `GET /cluster/resources?type=vm`. */
interface Resource {
  type: string;
  vmid?: number;
  node?: string;
  name?: string;
  tags?: string;
  lock?: string;
  template?: boolean | number;
  status?: string;
}

interface VmConfig {
  name?: string;
  tags?: string;
  lock?: string;
  description?: string;
  net0?: string;
  [key: string]: unknown;
}

interface VmStatus {
  status: 'running' | 'stopped';
  qmpstatus?: string;
  lock?: string;
  name?: string;
  tags?: string;
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** First IPv4 that is not loopback, link-local, unspecified or multicast. */
export function routableIPv4(addresses: string[]): string | undefined {
  for (const a of addresses) {
    const m = /^(\d{1,3})\.(\d{1,3})\.\d{1,3}\.\d{1,3}$/.exec(a);
    if (m === null) continue;
    const [x, y] = [Number(m[1]), Number(m[2])];
    if (x === 127 || x === 0 || x >= 224 || (x === 169 && y === 254)) continue;
    return a;
  }
  return undefined;
}

/** net0's MAC (`virtio=BC:24:11:00:00:01,bridge=vmbr0` or `macaddr=...`), lowercase. */
export function net0Mac(net0: string | undefined): string | undefined {
  const m = /(?:^|,)(?:[a-z0-9-]+|macaddr)=([0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5})(?:,|$)/.exec(net0 ?? '');
  return m?.[1]?.toLowerCase();
}

/** The agent's interfaces → the routable IPv4 of the NIC with `mac`. */
export function agentAddress(result: unknown, mac: string | undefined): string | undefined {
  if (mac === undefined) return undefined;
  const list = (result as { result?: unknown } | null)?.result;
  if (!Array.isArray(list)) return undefined;
  for (const nic of list as Array<Record<string, unknown>>) {
    if (str(nic['hardware-address']).toLowerCase() !== mac) continue;
    const addrs = Array.isArray(nic['ip-addresses'])
      ? (nic['ip-addresses'] as Array<Record<string, unknown>>)
      : [];
    const ip = routableIPv4(
      addrs.filter((a) => a['ip-address-type'] === 'ipv4').map((a) => str(a['ip-address'])),
    );
    if (ip !== undefined) return ip;
  }
  return undefined;
}

/** A counting semaphore (per node for clones, per storage for uploads); a waiter leaves on abort. */
class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];
  constructor(size: number) {
    this.free = size;
  }
  async run<T>(signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else
      await new Promise<void>((resolve, reject) => {
        const wake = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          const i = this.waiting.indexOf(wake);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(signal.reason as Error);
        };
        if (signal.aborted) {
          onAbort();
          return;
        }
        this.waiting.push(wake);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.free++;
    }
  }
}

const seg = encodeURIComponent;
const vmPath = (node: string, vmid: number) => `/nodes/${seg(node)}/qemu/${vmid}`;

export function createProxmoxProvider(options: ProxmoxProviderOptions): ProxmoxProvider {
  return new ProxmoxProvider(options);
}

export class ProxmoxProvider implements Provider {
  readonly name: string;
  readonly type = PROXMOX_PROVIDER_TYPE;
  /** listByTag is two calls whatever the fleet size (and at most LIST_CONFIG_READS more). */
  readonly capabilities = { cheapListByTag: true } as const;
  private readonly cfg: ProxmoxConfig;
  private readonly log: Logger;
  private readonly frame: OperationFrame;
  private readonly ops: Operations;
  private readonly client: ProxmoxClient;
  private readonly nameLocks = new KeyedMutex();
  private readonly cloneSlots = new Map<string, Slots>();
  private readonly uploadSlots = new Map<string, Slots>();
  /** Where each VMID was last seen: a hint, re-read from the cluster list when wrong. */
  private readonly nodeHint = new Map<number, string>();
  private visibility: { at: number; missing: string[] } | undefined;

  constructor(options: ProxmoxProviderOptions) {
    this.name = options.name;
    this.cfg = options.config;
    this.log = options.logger.child({ provider: options.name, providerType: PROXMOX_PROVIDER_TYPE });
    this.frame = {
      provider: this.name,
      log: this.log,
      classify: (operation, instance, err, signal) => {
        if (signal.aborted)
          return this.ops.fail('Transient', operation, instance, 'aborted by the caller', err);
        const c = classify(err);
        return this.ops.fail(c.errorClass, operation, instance, c.summary, err);
      },
      callerCaused: (_err, signal) => signal.aborted,
    };
    this.ops = operations(this.frame);
    this.client = new ProxmoxClient({
      url: options.config.url,
      tokenId: options.config.tokenId,
      tokenSecretFile: options.config.tokenSecretFile,
      caFile: options.config.caFile,
      ...(options.config.fingerprint === undefined ? {} : { fingerprint: options.config.fingerprint }),
      callTimeoutMs: options.config.callTimeoutSeconds * 1000,
      taskPollMs: options.config.taskPollMillis,
      provider: { type: PROXMOX_PROVIDER_TYPE, name: options.name },
    });
    for (const n of options.config.nodes) this.cloneSlots.set(n.name, new Slots(n.maxConcurrentClones));
  }

  private get taskMs(): number {
    return this.cfg.taskTimeoutSeconds * 1000;
  }

  private nodeConfig(name: string): ProxmoxNode | undefined {
    return this.cfg.nodes.find((n) => n.name === name);
  }

  private parseId(operation: ProviderOperation, id: string): { vmid: number; name: string } {
    const parsed = parseProviderId(id);
    if (parsed === undefined)
      throw this.ops.fail(
        'Permanent',
        operation,
        String(id).slice(0, 200),
        'not a proxmox providerID (qemu/<vmid>/<name>)',
      );
    return parsed;
  }

  /** A placement value: the given key, or the only one; Permanent naming the field otherwise. */
  private pick(instance: string, field: string, value: string | undefined, keys: string[]): string {
    if (value === undefined || value === '') {
      if (keys.length === 1) return keys[0]!;
      throw this.ops.fail(
        'Permanent',
        'create',
        instance,
        `placement.${field} is required (one of: ${keys.join(', ')})`,
      );
    }
    if (!keys.includes(value))
      throw this.ops.fail(
        'Permanent',
        'create',
        instance,
        `placement.${field} "${value.slice(0, 64)}" is not configured (one of: ${keys.join(', ')})`,
      );
    return value;
  }

  // ---- shared reads ----

  private async resources(signal: AbortSignal): Promise<Resource[]> {
    const rows = await this.client.get<Resource[]>(
      '/cluster/resources',
      '/cluster/resources',
      { type: 'vm' },
      signal,
    );
    const out = (rows ?? []).filter((r) => r.type === 'qemu' && typeof r.vmid === 'number');
    for (const r of out) if (r.node !== undefined) this.nodeHint.set(r.vmid!, r.node);
    return out;
  }

  private permissionScope(): string {
    return this.cfg.pool === undefined ? '/vms' : `/pool/${this.cfg.pool}`;
  }

  private async privilegesOn(path: string, signal: AbortSignal): Promise<Set<string>> {
    const data = await this.client.get<Record<string, Record<string, number>>>(
      '/access/permissions',
      '/access/permissions',
      { path },
      signal,
    );
    const privs = data?.[path] ?? {};
    return new Set(Object.keys(privs));
  }

  /**
   * The token can see VMs in its scope (VM.Audit): without it
   * /cluster/resources silently answers an empty list, which must never
   * reach GC as "no instances". Cached for listings; refused as Permanent.
   */
  private async requireVisibility(operation: ProviderOperation, signal: AbortSignal): Promise<void> {
    const now = Date.now();
    if (this.visibility === undefined || now - this.visibility.at > PERMISSIONS_TTL_MS) {
      const privs = await this.privilegesOn(this.permissionScope(), signal);
      this.visibility = { at: now, missing: privs.has('VM.Audit') ? [] : ['VM.Audit'] };
    }
    if (this.visibility.missing.length > 0) {
      const missing = this.visibility.missing;
      this.visibility = undefined; // ask again next time: a fixed ACL takes effect at once
      throw this.ops.fail(
        'Permanent',
        operation,
        '',
        `the token lacks ${missing.join(', ')} on ${this.permissionScope()}: it would see no VMs (a privilege-separated token needs its own ACL)`,
      );
    }
  }

  private async config(node: string, vmid: number, signal: AbortSignal): Promise<VmConfig> {
    return this.client.get<VmConfig>(
      '/nodes/{node}/qemu/{vmid}/config',
      `${vmPath(node, vmid)}/config`,
      {},
      signal,
    );
  }

  private async status(node: string, vmid: number, signal: AbortSignal): Promise<VmStatus> {
    return this.client.get<VmStatus>(
      '/nodes/{node}/qemu/{vmid}/status/current',
      `${vmPath(node, vmid)}/status/current`,
      {},
      signal,
    );
  }

  /**
   * The VM's node and status. "Config does not exist" on the remembered node
   * is believed only after the cluster list agrees (a migrated VM reads so
   * on its old node); undefined means gone.
   */
  private async locate(
    operation: ProviderOperation,
    vmid: number,
    signal: AbortSignal,
  ): Promise<{ node: string; status: VmStatus } | undefined> {
    const hint = this.nodeHint.get(vmid);
    if (hint !== undefined) {
      try {
        return { node: hint, status: await this.status(hint, vmid, signal) };
      } catch (err) {
        if (!isConfigMissing(err)) throw err;
      }
    }
    await this.requireVisibility(operation, signal);
    const row = (await this.resources(signal)).find((r) => r.vmid === vmid);
    if (row?.node === undefined) {
      this.nodeHint.delete(vmid);
      return undefined;
    }
    try {
      return { node: row.node, status: await this.status(row.node, vmid, signal) };
    } catch (err) {
      // Listed but its node says it does not exist: a migration in flight; ask again later.
      if (isConfigMissing(err))
        throw this.ops.fail(
          'Transient',
          operation,
          String(vmid),
          'VM listed by the cluster but not on its node (migrating?)',
        );
      throw err;
    }
  }

  // ---- create ----

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = String(req.name);
    return this.ops.run('create', instance, signal, async () => {
      if (!INSTANCE_NAME.test(req.name))
        throw this.ops.fail(
          'Permanent',
          'create',
          instance,
          'name is not an instance name (proxy-<16 base32>)',
        );
      if (typeof req.uid !== 'string' || req.uid === '')
        throw this.ops.fail('Permanent', 'create', instance, 'uid is empty');
      if (!taggable(req.uid))
        throw this.ops.fail(
          'Permanent',
          'create',
          instance,
          'uid cannot be written as a PVE tag (a-z, 0-9, _ - + .)',
        );
      if (req.installation !== '' && !taggable(req.installation))
        throw this.ops.fail(
          'Permanent',
          'create',
          instance,
          'installation id cannot be written as a PVE tag (a-z, 0-9, _ - + .)',
        );
      const nodeName = this.pick(
        instance,
        'zone',
        req.placement.zone,
        this.cfg.nodes.map((n) => n.name),
      );
      const node = this.nodeConfig(nodeName)!;
      const imageKey = this.pick(instance, 'image', req.placement.image, Object.keys(node.templates));
      const machineKey = this.pick(
        instance,
        'machineType',
        req.placement.machineType,
        Object.keys(this.cfg.machineTypes),
      );
      return this.nameLocks.run(req.name, () =>
        this.createLocked(req, node, node.templates[imageKey]!, machineKey, signal),
      );
    });
  }

  private async createLocked(
    req: CreateRequest,
    node: ProxmoxNode,
    template: number,
    machineKey: string,
    signal: AbortSignal,
  ): Promise<string> {
    await this.requireVisibility('create', signal);
    const marks = {
      uid: req.uid,
      installation: req.installation,
      createdAt: new Date(Math.floor(Date.now() / 1000) * 1000),
    };
    let rows = await this.resources(signal);
    for (const vmid of candidateVmids(req.name, this.cfg.vmidRange, CANDIDATES)) {
      const log = this.log.child({ name: req.name, vmid });
      let row = rows.find((r) => r.vmid === vmid);
      if (row === undefined) {
        // Free as far as the token sees: nextid asserts it against the whole cluster's VM list.
        try {
          await this.client.get<number>('/cluster/nextid', '/cluster/nextid', { vmid }, signal);
        } catch (err) {
          if (!isVmidTaken(err)) throw err;
          log.debug('VMID taken by a VM the token cannot see; next');
          continue;
        }
        try {
          await this.cloneSlots.get(node.name)!.run(signal, async () => {
            const upid = await this.client.call<string>(
              'POST',
              '/nodes/{node}/qemu/{vmid}/clone',
              `${vmPath(node.name, template)}/clone`,
              {
                newid: vmid,
                name: req.name,
                full: false,
                description: descriptionMark(marks),
                ...(this.cfg.pool === undefined ? {} : { pool: this.cfg.pool }),
              },
              signal,
            );
            this.nodeHint.set(vmid, node.name);
            log.debug({ node: node.name, template }, 'clone submitted');
            await this.client.waitTask(node.name, upid, this.taskMs, signal);
          });
          return await this.finish(req, vmid, node, machineKey, marks, signal);
        } catch (err) {
          if (!isVmidTaken(err)) throw err;
          // Someone else took it between nextid and the clone: look again at who (ours from another worker?).
          log.debug('VMID collision at clone; re-examining');
          rows = await this.resources(signal);
          row = rows.find((r) => r.vmid === vmid);
          if (row === undefined) continue;
        }
      }
      const owner = await this.ownerOf(row, req, signal);
      if (owner.kind === 'taken') continue;
      if (owner.kind === 'busy')
        throw this.ops.fail(
          'Transient',
          'create',
          req.name,
          `VM ${vmid} is being cloned and has no name yet (possibly this Proxy's cut-off attempt); retried`,
        );
      if (owner.kind === 'foreign')
        throw this.ops.fail(
          'Permanent',
          'create',
          formatProviderId(vmid, req.name),
          `a VM with this name belongs to another owner (uid mark "${owner.uid.slice(0, 64)}", want "${req.uid}"); not adopting it`,
        );
      const nodeCfg = this.nodeConfig(row.node ?? '') ?? node;
      return this.finish(
        req,
        vmid,
        nodeCfg,
        machineKey,
        { ...marks, createdAt: owner.createdAt ?? marks.createdAt },
        signal,
      );
    }
    throw this.ops.fail(
      'Transient',
      'create',
      req.name,
      `no free VMID among ${CANDIDATES} candidates in vmidRange; retried`,
    );
  }

  /** Whose VM this listed VMID is, for create's walk. */
  private async ownerOf(
    row: Resource,
    req: CreateRequest,
    signal: AbortSignal,
  ): Promise<{ kind: 'ours' | 'foreign' | 'taken' | 'busy'; uid: string; createdAt?: Date }> {
    if (row.template === true || row.template === 1 || row.node === undefined)
      return { kind: 'taken', uid: '' };
    const tagMarks = marksFromTags(row.tags);
    if (tagMarks.managed && tagMarks.uid === req.uid)
      return { kind: 'ours', uid: req.uid, ...(tagMarks.createdAt ? { createdAt: tagMarks.createdAt } : {}) };
    let conf: VmConfig;
    try {
      conf = await this.config(row.node, row.vmid!, signal);
    } catch (err) {
      if (isConfigMissing(err)) return { kind: 'busy', uid: '' };
      throw err;
    }
    if (conf.name === undefined && conf.lock === 'clone') return { kind: 'busy', uid: '' };
    if (conf.name !== req.name) return { kind: 'taken', uid: '' };
    const marks: Marks | undefined = tagMarks.managed ? tagMarks : marksFromDescription(conf.description);
    if (marks?.uid === req.uid)
      return { kind: 'ours', uid: req.uid, ...(marks.createdAt ? { createdAt: marks.createdAt } : {}) };
    return { kind: 'foreign', uid: marks?.uid ?? '' };
  }

  /** The steps after the clone, each found done on a retry: seed, config, start. */
  private async finish(
    req: CreateRequest,
    vmid: number,
    node: ProxmoxNode,
    machineKey: string,
    marks: { uid: string; installation: string; createdAt: Date },
    signal: AbortSignal,
  ): Promise<string> {
    const id = formatProviderId(vmid, req.name);
    const log = this.log.child({ name: req.name, vmid, node: node.name });
    const conf = await this.config(node.name, vmid, signal);
    if (conf.lock !== undefined)
      throw this.ops.fail('Transient', 'create', id, `VM is locked (${conf.lock.slice(0, 32)}); retried`);
    const file = `${req.name}-cidata.iso`;
    const volid = `${node.isoStorage}:iso/${file}`;
    const storagePath = `/nodes/${seg(node.name)}/storage/${seg(node.isoStorage)}`;
    const present = await this.client.get<Array<{ volid: string }>>(
      '/nodes/{node}/storage/{storage}/content',
      `${storagePath}/content`,
      { content: 'iso' },
      signal,
    );
    if (!(present ?? []).some((v) => v.volid === volid)) {
      const iso = buildSeedIso({
        instanceName: req.name,
        cloudInit: req.cloudInit,
        installGuestAgent: this.cfg.installGuestAgent,
        vendorData: this.cfg.vendorData,
      });
      let slots = this.uploadSlots.get(node.isoStorage);
      if (slots === undefined)
        this.uploadSlots.set(node.isoStorage, (slots = new Slots(UPLOADS_PER_STORAGE)));
      await slots.run(signal, async () => {
        const upid = await this.client.upload(node.name, node.isoStorage, file, iso, signal);
        await this.client.waitTask(node.name, upid, this.taskMs, signal);
      });
      log.debug({ bytes: iso.length }, 'seed uploaded');
    }
    const machine = this.cfg.machineTypes[machineKey]!;
    const tags = mergeTags(conf.tags, markTags(marks));
    const drive = `${volid},media=cdrom`;
    const done =
      splitTags(conf.tags).includes(TAG_UID + req.uid) &&
      str(conf[this.cfg.seedDrive]) === drive &&
      !splitTags(conf.tags).some((t) => t.startsWith(TAG_PREFIX) && !tags.split(';').includes(t));
    if (!done)
      await this.client.call(
        'PUT',
        '/nodes/{node}/qemu/{vmid}/config',
        `${vmPath(node.name, vmid)}/config`,
        {
          cores: machine.cores,
          memory: String(machine.memoryMiB),
          tags,
          description: descriptionMark(marks),
          [this.cfg.seedDrive]: drive,
          ...(this.cfg.ipconfig0 === undefined ? {} : { ipconfig0: this.cfg.ipconfig0 }),
        },
        signal,
      );
    const st = await this.status(node.name, vmid, signal);
    if (st.status !== 'running') {
      const upid = await this.client.call<string>(
        'POST',
        '/nodes/{node}/qemu/{vmid}/status/start',
        `${vmPath(node.name, vmid)}/status/start`,
        {},
        signal,
      );
      try {
        await this.client.waitTask(node.name, upid, this.taskMs, signal);
      } catch (err) {
        if (!isAlreadyRunning(err)) throw err;
      }
    }
    log.debug('created and started');
    return id;
  }

  // ---- get ----

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id).slice(0, 200), signal, async () => {
      const { vmid, name } = this.parseId('get', id);
      const found = await this.locate('get', vmid, signal);
      const gone = () => this.ops.fail('NotFound', 'get', id, 'no such VM in the cluster');
      if (found === undefined) throw gone();
      const { node, status } = found;
      // PVE reuses VMIDs: another name at our VMID means ours is gone. A fresh clone there has no name yet.
      if (status.name !== name) throw gone();
      let marks = marksFromTags(status.tags);
      let conf: VmConfig | undefined;
      if (!marks.managed || marks.uid === '') {
        conf = await this.config(node, vmid, signal);
        marks = marksFromDescription(conf.description) ?? marks;
      }
      let state: InstanceState;
      let ip: string | undefined;
      if (status.lock !== undefined) state = 'Provisioning';
      else if (status.status === 'stopped') state = 'Stopped';
      else if (status.qmpstatus !== undefined && status.qmpstatus !== 'running') state = 'Stopped';
      else {
        conf ??= await this.config(node, vmid, signal);
        const agent = await this.agentIp(node, vmid, net0Mac(conf.net0), signal);
        ip = agent.ip;
        state = ip === undefined ? 'Provisioning' : 'Running';
        if (agent.answered && ipFromTags(status.tags) !== ip)
          await this.recordIp(node, vmid, status.tags, ip, signal);
      }
      return {
        id,
        state,
        ...(state === 'Running' ? { ip } : {}),
        uid: marks.uid,
        installation: marks.installation,
        ...(marks.createdAt === undefined ? {} : { createdAt: marks.createdAt }),
      };
    });
  }

  private async agentIp(
    node: string,
    vmid: number,
    mac: string | undefined,
    signal: AbortSignal,
  ): Promise<{ answered: boolean; ip?: string }> {
    try {
      const result = await this.client.get<unknown>(
        '/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces',
        `${vmPath(node, vmid)}/agent/network-get-interfaces`,
        {},
        signal,
      );
      const ip = agentAddress(result, mac);
      return { answered: true, ...(ip === undefined ? {} : { ip }) };
    } catch (err) {
      // No agent yet (booting, not installed): no address, not an error.
      if (isAgentNotRunning(err)) return { answered: false };
      throw err;
    }
  }

  /**
   * Writes the agent's answer into the `egress-ip-` tag, so that listByTag
   * (one cluster list, no agent calls) can give the drift sweep the address.
   * Best effort: a refusal (a lock, say) only delays it to the next get.
   */
  private async recordIp(
    node: string,
    vmid: number,
    tags: string | undefined,
    ip: string | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    try {
      await this.client.call(
        'PUT',
        '/nodes/{node}/qemu/{vmid}/config',
        `${vmPath(node, vmid)}/config`,
        { tags: withIpTag(tags, ip) },
        signal,
      );
    } catch (err) {
      if (signal.aborted) throw err;
      this.log.debug(
        { vmid, error: classify(err).summary },
        'recording the address tag failed; next get retries',
      );
    }
  }

  // ---- delete ----

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id).slice(0, 200), signal, async () => {
      const { vmid, name } = this.parseId('delete', id);
      await this.nameLocks.run(name, async () => {
        const found = await this.locate('delete', vmid, signal);
        if (found === undefined || found.status.name !== name) {
          // Gone, or the VMID holds another VM now: only our seed may be left.
          await this.deleteSeed(name, undefined, signal);
          return;
        }
        const { node, status } = found;
        if (status.lock === 'destroyed') return; // a delete is already running: success, cheaply
        if (status.lock !== undefined)
          throw this.ops.fail(
            'Transient',
            'delete',
            id,
            `VM is locked (${status.lock.slice(0, 32)}); retried`,
          );
        if (status.status === 'running') {
          const upid = await this.client.call<string>(
            'POST',
            '/nodes/{node}/qemu/{vmid}/status/stop',
            `${vmPath(node, vmid)}/status/stop`,
            {},
            signal,
          );
          await this.client.waitTask(node, upid, this.taskMs, signal);
        }
        const upid = await this.client.call<string>(
          'DELETE',
          '/nodes/{node}/qemu/{vmid}',
          vmPath(node, vmid),
          { purge: true, 'destroy-unreferenced-disks': true },
          signal,
        );
        await this.client.waitTask(node, upid, this.taskMs, signal);
        this.nodeHint.delete(vmid);
        await this.deleteSeed(name, node, signal);
      });
    });
  }

  /** Removes `<name>-cidata.iso` from the node's ISO storage (every configured node's when unknown). */
  private async deleteSeed(name: string, node: string | undefined, signal: AbortSignal): Promise<void> {
    const targets = this.cfg.nodes.filter((n) => node === undefined || n.name === node);
    for (const n of targets.length > 0 ? targets : this.cfg.nodes) {
      const volid = `${n.isoStorage}:iso/${name}-cidata.iso`;
      try {
        const upid = await this.client.call<string | null>(
          'DELETE',
          '/nodes/{node}/storage/{storage}/content/{volume}',
          `/nodes/${seg(n.name)}/storage/${seg(n.isoStorage)}/content/${seg(volid)}`,
          {},
          signal,
        );
        if (typeof upid === 'string' && upid.startsWith('UPID:'))
          await this.client.waitTask(n.name, upid, this.taskMs, signal);
      } catch (err) {
        // Absent already: that is what we want.
        if (
          err instanceof PveHttpError &&
          err.status === 500 &&
          /does not exist|no such volume|not found/i.test(err.reason)
        )
          continue;
        if (err instanceof PveTaskError && /does not exist|no such/i.test(err.exitStatus)) continue;
        throw err;
      }
    }
  }

  // ---- listByTag ----

  listByTag(signal: AbortSignal): Promise<Listing> {
    return this.ops.run('list', '', signal, async () => {
      await this.requireVisibility('list', signal);
      const rows = await this.resources(signal);
      const out: Instance[] = [];
      let reads = 0;
      let skipped = 0;
      const { min, max } = this.cfg.vmidRange;
      for (const r of rows) {
        if (r.template === true || r.template === 1 || r.node === undefined) continue;
        const vmid = r.vmid!;
        const tagMarks = marksFromTags(r.tags);
        const untaggedInRange =
          !tagMarks.managed &&
          vmid >= min &&
          vmid <= max &&
          r.lock !== 'clone' &&
          (r.name === undefined || INSTANCE_NAME.test(r.name));
        if (!tagMarks.managed && !untaggedInRange) continue;
        let name = r.name !== undefined && INSTANCE_NAME.test(r.name) ? r.name : undefined;
        let marks: Marks | undefined = tagMarks.managed ? tagMarks : undefined;
        if (name === undefined || marks === undefined) {
          // The cluster list names VMs from RRD data (a new VM has none yet) and has no description.
          if (reads >= LIST_CONFIG_READS) {
            skipped++;
            continue;
          }
          reads++;
          let conf: VmConfig;
          try {
            conf = await this.config(r.node, vmid, signal);
          } catch (err) {
            if (isConfigMissing(err)) continue; // deleted since the list
            throw err;
          }
          name = conf.name !== undefined && INSTANCE_NAME.test(conf.name) ? conf.name : undefined;
          marks ??= marksFromDescription(conf.description);
        }
        if (name === undefined || marks === undefined) continue;
        // For the drift sweep: the cluster list's status (RRD, ~10 s behind) and the address get recorded.
        const ip = ipFromTags(r.tags);
        let state: InstanceState = 'Provisioning';
        if (r.lock === undefined && r.status === 'running' && ip !== undefined) state = 'Running';
        else if (r.lock === undefined && r.status === 'stopped') state = 'Stopped';
        out.push({
          id: formatProviderId(vmid, name),
          state,
          ...(state === 'Running' ? { ip } : {}),
          uid: marks.uid,
          installation: marks.installation,
          ...(marks.createdAt === undefined ? {} : { createdAt: marks.createdAt }),
        });
      }
      if (skipped > 0)
        this.log.info({ skipped }, 'listByTag: VMs left out this time (config reads per listing exhausted)');
      return out;
    });
  }

  // ---- check ----

  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const address = this.cfg.url;
    const failed = (name: string, err: unknown, started: number): TargetStatus => {
      const c = signal.aborted
        ? { errorClass: 'Transient', summary: 'aborted by the caller' }
        : classify(err);
      let reason = 'APIError';
      if (signal.aborted) reason = 'Timeout';
      else if (err instanceof PveHttpError && err.status === 401) reason = 'Unauthorized';
      else if (err instanceof PveHttpError && err.status === 403) reason = 'Forbidden';
      else if (c.summary.includes('timed out')) reason = 'Timeout';
      else if (!(err instanceof PveHttpError)) reason = 'Unreachable';
      return { name, address, ready: false, reason, message: c.summary, latencyMillis: Date.now() - started };
    };
    const started = Date.now();
    let version: { version: string; release?: string } | undefined;
    const api: TargetStatus = await this.client
      .get<{ version: string; release: string }>('/version', '/version', {}, signal)
      .then((v): TargetStatus => {
        version = v;
        return {
          name: 'api',
          address,
          ready: true,
          reason: 'Reachable',
          latencyMillis: Date.now() - started,
          details: { version: v.version },
        };
      })
      .catch((err: unknown) => failed('api', err, started));
    const quorum: TargetStatus = await this.client
      .get<Array<{ type: string; quorate?: boolean | number }>>(
        '/cluster/status',
        '/cluster/status',
        {},
        signal,
      )
      .then((rows): TargetStatus => {
        const cluster = (rows ?? []).find((r) => r.type === 'cluster');
        // A single node without a cluster has no cluster row: it is its own quorum.
        const quorate = cluster === undefined || cluster.quorate === true || cluster.quorate === 1;
        return quorate
          ? { name: 'quorum', address, ready: true, reason: 'Reachable' }
          : {
              name: 'quorum',
              address,
              ready: false,
              reason: 'NoQuorum',
              message: 'the cluster has lost quorum: no VM can be created or changed',
            };
      })
      .catch((err: unknown) => failed('quorum', err, started));
    const nodes: TargetStatus[] = await this.client
      .get<Array<{ node: string; status: string }>>('/nodes', '/nodes', {}, signal)
      .then((rows) =>
        this.cfg.nodes.map((n): TargetStatus => {
          const row = (rows ?? []).find((r) => r.node === n.name);
          if (row === undefined)
            return {
              name: `node/${n.name}`,
              address,
              ready: false,
              reason: 'APIError',
              message: 'node not in the cluster (or not visible to the token)',
            };
          return row.status === 'online'
            ? { name: `node/${n.name}`, address, ready: true, reason: 'Reachable' }
            : {
                name: `node/${n.name}`,
                address,
                ready: false,
                reason: 'Unreachable',
                message: `node is ${row.status}`,
              };
        }),
      )
      .catch((err: unknown) => this.cfg.nodes.map((n) => failed(`node/${n.name}`, err, started)));
    const token = await this.checkToken(
      Number(/^(\d+)/.exec(version?.version ?? '')?.[1] ?? 9),
      signal,
    ).catch((err: unknown) => failed('token', err, started));
    return [api, quorum, ...nodes, token];
  }

  private async checkToken(major: number, signal: AbortSignal): Promise<TargetStatus> {
    const scope = this.permissionScope();
    const missing: string[] = [];
    const vmPrivs = await this.privilegesOn(scope, signal);
    for (const p of requiredVmPrivileges(major)) if (!vmPrivs.has(p)) missing.push(`${p} on ${scope}`);
    for (const storage of [...new Set(this.cfg.nodes.map((n) => n.isoStorage))]) {
      const privs = await this.privilegesOn(`/storage/${storage}`, signal);
      for (const p of REQUIRED_STORAGE_PRIVILEGES)
        if (!privs.has(p)) missing.push(`${p} on /storage/${storage}`);
    }
    this.visibility = { at: Date.now(), missing: vmPrivs.has('VM.Audit') ? [] : ['VM.Audit'] };
    if (missing.length === 0)
      return { name: 'token', address: this.cfg.url, ready: true, reason: 'Reachable' };
    const blind = !vmPrivs.has('VM.Audit');
    return {
      name: 'token',
      address: this.cfg.url,
      ready: false,
      reason: 'Forbidden',
      message: (
        (blind
          ? `the token lacks VM.Audit on ${scope}: it sees no VMs, so orphan GC skips this provider (a privilege-separated token needs ACLs of its own). `
          : '') + `missing: ${missing.join(', ')}`
      ).slice(0, 1024),
      details: { missing: String(missing.length) },
    };
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}
