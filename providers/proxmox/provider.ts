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
 *
 * This file is the wiring point: the client, the token's permissions
 * (permissions.ts), the cluster's VMs (vms.ts), create's steps (create.ts),
 * the seeds (seeds.ts), the agent's addresses (addresses.ts), the listing
 * (listing.ts) and the check (check.ts) are built here once, in this
 * provider's operation frame.
 */
import type { Logger } from 'pino';
import { KeyedMutex } from '../concurrency.js';
import { parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Operations } from '../shared/operation.js';
import { pickPlacement } from '../shared/placement.js';
import type { CreateRequest, Instance, InstanceState, Listing, Provider, TargetStatus } from '../types.js';
import { AgentAddresses, net0Mac } from './addresses.js';
import { checkCluster } from './check.js';
import { classify } from './classify.js';
import { ProxmoxClient } from './client.js';
import type { ProxmoxConfig } from './config.js';
import { VmCreation } from './create.js';
import { listManagedVms } from './listing.js';
import {
  INSTANCE_NAME,
  ipFromTags,
  marksFromDescription,
  marksFromTags,
  parseProviderId,
  taggable,
} from './marks.js';
import { Permissions } from './permissions.js';
import { Seeds } from './seeds.js';
import { toInstance, Vms, type VmConfig } from './vms.js';

export const PROXMOX_PROVIDER_TYPE = 'proxmox';

export interface ProxmoxProviderOptions {
  name: string;
  config: ProxmoxConfig;
  logger: Logger;
}

export function createProxmoxProvider(options: ProxmoxProviderOptions): ProxmoxProvider {
  return new ProxmoxProvider(options);
}

export class ProxmoxProvider implements Provider {
  readonly name: string;
  readonly type = PROXMOX_PROVIDER_TYPE;
  /** listByTag is two calls whatever the fleet size (and at most LIST_CONFIG_READS more). */
  readonly capabilities = { cheapListByTag: true } as const;
  private readonly cfg: ProxmoxConfig;
  private readonly ops: Operations;
  private readonly client: ProxmoxClient;
  private readonly permissions: Permissions;
  private readonly vms: Vms;
  private readonly seeds: Seeds;
  private readonly creation: VmCreation;
  private readonly addresses: AgentAddresses;
  private readonly nameLocks = new KeyedMutex();

  constructor(options: ProxmoxProviderOptions) {
    const config = options.config;
    this.name = options.name;
    this.cfg = config;
    this.ops = providerOperations({
      name: options.name,
      type: PROXMOX_PROVIDER_TYPE,
      logger: options.logger,
      classify,
    });
    this.client = new ProxmoxClient({
      url: config.url,
      tokenId: config.tokenId,
      tokenSecretFile: config.tokenSecretFile,
      caFile: config.caFile,
      ...(config.fingerprint === undefined ? {} : { fingerprint: config.fingerprint }),
      callTimeoutMs: config.callTimeoutSeconds * 1000,
      taskPollMs: config.taskPollMillis,
      provider: { type: PROXMOX_PROVIDER_TYPE, name: options.name },
    });
    const taskMs = config.taskTimeoutSeconds * 1000;
    const { client, ops } = this;
    this.permissions = new Permissions(client, ops, config);
    this.vms = new Vms(client, ops, this.permissions, taskMs);
    this.seeds = new Seeds(client, config, taskMs);
    this.creation = new VmCreation({
      client,
      ops,
      vms: this.vms,
      permissions: this.permissions,
      seeds: this.seeds,
      config,
    });
    this.addresses = new AgentAddresses(client, ops.log);
  }

  private parseId(operation: 'get' | 'delete', id: string): { vmid: number; name: string } {
    return parseIdOrFail(this.ops, operation, id, parseProviderId, 'qemu/<vmid>/<name>');
  }

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = String(req.name);
    return this.ops.run('create', instance, signal, async () => {
      const fail = (message: string) => this.ops.fail('Permanent', 'create', instance, message);
      if (!INSTANCE_NAME.test(req.name)) throw fail('name is not an instance name (proxy-<16 base32>)');
      if (typeof req.uid !== 'string' || req.uid === '') throw fail('uid is empty');
      if (!taggable(req.uid)) throw fail('uid cannot be written as a PVE tag (a-z, 0-9, _ - + .)');
      if (req.installation !== '' && !taggable(req.installation))
        throw fail('installation id cannot be written as a PVE tag (a-z, 0-9, _ - + .)');
      const nodes = this.cfg.nodes.map((n) => n.name);
      const nodeName = pickPlacement(this.ops, instance, 'zone', req.placement.zone, nodes);
      const node = this.cfg.nodes.find((n) => n.name === nodeName)!;
      const templates = Object.keys(node.templates);
      const imageKey = pickPlacement(this.ops, instance, 'image', req.placement.image, templates);
      const machineTypes = Object.keys(this.cfg.machineTypes);
      const machineKey = pickPlacement(
        this.ops,
        instance,
        'machineType',
        req.placement.machineType,
        machineTypes,
      );
      return this.nameLocks.run(req.name, () =>
        this.creation.create(req, node, node.templates[imageKey]!, machineKey, signal),
      );
    });
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id).slice(0, 200), signal, async () => {
      const { vmid, name } = this.parseId('get', id);
      const found = await this.vms.locate('get', vmid, signal);
      const gone = () => this.ops.fail('NotFound', 'get', id, 'no such VM in the cluster');
      if (found === undefined) throw gone();
      const { node, status } = found;
      // PVE reuses VMIDs: another name at our VMID means ours is gone. A fresh clone there has no name yet.
      if (status.name !== name) throw gone();
      let marks = marksFromTags(status.tags);
      let conf: VmConfig | undefined;
      if (!marks.managed || marks.uid === '') {
        conf = await this.vms.config(node, vmid, signal);
        marks = marksFromDescription(conf.description) ?? marks;
      }
      let state: InstanceState;
      let ip: string | undefined;
      if (status.lock !== undefined) state = 'Provisioning';
      else if (status.status === 'stopped') state = 'Stopped';
      else if (status.qmpstatus !== undefined && status.qmpstatus !== 'running') state = 'Stopped';
      else {
        conf ??= await this.vms.config(node, vmid, signal);
        const agent = await this.addresses.read(node, vmid, net0Mac(conf.net0), signal);
        ip = agent.ip;
        state = ip === undefined ? 'Provisioning' : 'Running';
        if (agent.answered && ipFromTags(status.tags) !== ip)
          await this.addresses.record(node, vmid, status.tags, ip, signal);
      }
      return toInstance(id, state, ip, marks);
    });
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id).slice(0, 200), signal, async () => {
      const { vmid, name } = this.parseId('delete', id);
      await this.nameLocks.run(name, async () => {
        const found = await this.vms.locate('delete', vmid, signal);
        if (found === undefined || found.status.name !== name) {
          // Gone, or the VMID holds another VM now: only our seed may be left.
          await this.seeds.remove(name, undefined, signal);
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
        await this.vms.destroy(node, vmid, status.status === 'running', signal);
        await this.seeds.remove(name, node, signal);
      });
    });
  }

  listByTag(signal: AbortSignal): Promise<Listing> {
    const deps = {
      vms: this.vms,
      permissions: this.permissions,
      log: this.ops.log,
      vmidRange: this.cfg.vmidRange,
    };
    return this.ops.run('list', '', signal, () => listManagedVms(deps, signal));
  }

  check(signal: AbortSignal): Promise<TargetStatus[]> {
    return checkCluster({ client: this.client, permissions: this.permissions, config: this.cfg }, signal);
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}
