/**
 * create's steps once the request is checked and its placement chosen: a
 * VMID (a walk of the range keyed on the name, so every attempt for one
 * Proxy finds its own VM), the linked clone of the node's template (a
 * bounded number at a time per node), then the seed, the config and the
 * start, each found done on a retry.
 */
import { Semaphore } from '../concurrency.js';
import { foreignOwner } from '../shared/identity.js';
import type { Operations } from '../shared/operation.js';
import type { CreateRequest } from '../types.js';
import { isAlreadyRunning, isConfigMissing, isVmidTaken } from './classify.js';
import type { ProxmoxClient } from './client.js';
import type { ProxmoxConfig, ProxmoxNode } from './config.js';
import {
  candidateVmids,
  descriptionMark,
  formatProviderId,
  markTags,
  marksFromDescription,
  marksFromTags,
  mergeTags,
  splitTags,
  TAG_PREFIX,
  TAG_UID,
  type Marks,
} from './marks.js';
import type { Permissions } from './permissions.js';
import { seedVolume, type Seeds } from './seeds.js';
import { str, vmPath, type Resource, type VmConfig, type Vms } from './vms.js';

/** VMIDs one create tries before giving up for this attempt. */
const CANDIDATES = 16;

type CreateMarks = { uid: string; installation: string; createdAt: Date };

export interface CreateDeps {
  client: ProxmoxClient;
  ops: Operations;
  vms: Vms;
  permissions: Permissions;
  seeds: Seeds;
  config: ProxmoxConfig;
}

export class VmCreation {
  private readonly cloneSlots = new Map<string, Semaphore>();
  private readonly taskMs: number;

  constructor(private readonly deps: CreateDeps) {
    this.taskMs = deps.config.taskTimeoutSeconds * 1000;
    for (const n of deps.config.nodes) this.cloneSlots.set(n.name, new Semaphore(n.maxConcurrentClones));
  }

  /** The request's VM made (or found) and started; its providerID. */
  async create(
    req: CreateRequest,
    node: ProxmoxNode,
    template: number,
    machineKey: string,
    signal: AbortSignal,
  ): Promise<string> {
    const { client, ops, vms, config } = this.deps;
    await this.deps.permissions.requireVisibility('create', signal);
    const marks = {
      uid: req.uid,
      installation: req.installation,
      createdAt: new Date(Math.floor(Date.now() / 1000) * 1000),
    };
    let rows = await vms.resources(signal);
    for (const vmid of candidateVmids(req.name, config.vmidRange, CANDIDATES)) {
      const log = ops.log.child({ name: req.name, vmid });
      let row = rows.find((r) => r.vmid === vmid);
      if (row === undefined) {
        // Free as far as the token sees: nextid asserts it against the whole cluster's VM list.
        try {
          await client.get<number>('/cluster/nextid', '/cluster/nextid', { vmid }, signal);
        } catch (err) {
          if (!isVmidTaken(err)) throw err;
          log.debug('VMID taken by a VM the token cannot see; next');
          continue;
        }
        try {
          await this.cloneSlots.get(node.name)!.run(signal, async () => {
            const upid = await client.call<string>(
              'POST',
              '/nodes/{node}/qemu/{vmid}/clone',
              `${vmPath(node.name, template)}/clone`,
              {
                newid: vmid,
                name: req.name,
                full: false,
                description: descriptionMark(marks),
                ...(config.pool === undefined ? {} : { pool: config.pool }),
              },
              signal,
            );
            vms.placed(vmid, node.name);
            log.debug({ node: node.name, template }, 'clone submitted');
            await client.waitTask(node.name, upid, this.taskMs, signal);
          });
          return await this.finish(req, vmid, node, machineKey, marks, signal);
        } catch (err) {
          if (!isVmidTaken(err)) throw err;
          // Someone else took it between nextid and the clone: look again at who (ours from another worker?).
          log.debug('VMID collision at clone; re-examining');
          rows = await vms.resources(signal);
          row = rows.find((r) => r.vmid === vmid);
          if (row === undefined) continue;
        }
      }
      const owner = await this.ownerOf(row, req, signal);
      if (owner.kind === 'taken') continue;
      if (owner.kind === 'busy')
        throw ops.fail(
          'Transient',
          'create',
          req.name,
          `VM ${vmid} is being cloned and has no name yet (possibly this Proxy's cut-off attempt); retried`,
        );
      if (owner.kind === 'foreign')
        throw foreignOwner(ops, formatProviderId(vmid, req.name), 'a VM', owner.uid, req.uid);
      const listedOn = row.node ?? '';
      const nodeCfg = config.nodes.find((n) => n.name === listedOn) ?? node;
      return this.finish(
        req,
        vmid,
        nodeCfg,
        machineKey,
        { ...marks, createdAt: owner.createdAt ?? marks.createdAt },
        signal,
      );
    }
    throw ops.fail(
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
      conf = await this.deps.vms.config(row.node, row.vmid!, signal);
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
    marks: CreateMarks,
    signal: AbortSignal,
  ): Promise<string> {
    const { client, ops, vms, config } = this.deps;
    const id = formatProviderId(vmid, req.name);
    const log = ops.log.child({ name: req.name, vmid, node: node.name });
    const conf = await vms.config(node.name, vmid, signal);
    if (conf.lock !== undefined)
      throw ops.fail('Transient', 'create', id, `VM is locked (${conf.lock.slice(0, 32)}); retried`);
    const uploaded = await this.deps.seeds.ensure(req, node, signal);
    if (uploaded !== undefined) log.debug({ bytes: uploaded }, 'seed uploaded');
    const machine = config.machineTypes[machineKey]!;
    const tags = mergeTags(conf.tags, markTags(marks));
    const drive = `${seedVolume(node, req.name).volid},media=cdrom`;
    const done =
      splitTags(conf.tags).includes(TAG_UID + req.uid) &&
      str(conf[config.seedDrive]) === drive &&
      !splitTags(conf.tags).some((t) => t.startsWith(TAG_PREFIX) && !tags.split(';').includes(t));
    if (!done)
      await client.call(
        'PUT',
        '/nodes/{node}/qemu/{vmid}/config',
        `${vmPath(node.name, vmid)}/config`,
        {
          cores: machine.cores,
          memory: String(machine.memoryMiB),
          tags,
          description: descriptionMark(marks),
          [config.seedDrive]: drive,
          ...(config.ipconfig0 === undefined ? {} : { ipconfig0: config.ipconfig0 }),
        },
        signal,
      );
    const st = await vms.status(node.name, vmid, signal);
    if (st.status !== 'running') {
      const upid = await client.call<string>(
        'POST',
        '/nodes/{node}/qemu/{vmid}/status/start',
        `${vmPath(node.name, vmid)}/status/start`,
        {},
        signal,
      );
      try {
        await client.waitTask(node.name, upid, this.taskMs, signal);
      } catch (err) {
        if (!isAlreadyRunning(err)) throw err;
      }
    }
    log.debug('created and started');
    return id;
  }
}
