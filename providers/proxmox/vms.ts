/**
 * The cluster's VMs as the provider reads them: the cluster list, one VM's
 * config and status, where a VMID is now (VMs migrate: the node last seen
 * is a hint, re-read from the cluster list when wrong), and stopping and
 * destroying one.
 */
import type { Operations } from '../shared/operation.js';
import type { Instance, InstanceState, ProviderOperation } from '../types.js';
import { isConfigMissing } from './classify.js';
import type { ProxmoxClient } from './client.js';
import type { Marks } from './marks.js';
import type { Permissions } from './permissions.js';

/** One row of `GET /cluster/resources?type=vm`. */
export interface Resource {
  type: string;
  vmid?: number;
  node?: string;
  name?: string;
  tags?: string;
  lock?: string;
  template?: boolean | number;
  status?: string;
}

export interface VmConfig {
  name?: string;
  tags?: string;
  lock?: string;
  description?: string;
  net0?: string;
  [key: string]: unknown;
}

export interface VmStatus {
  status: 'running' | 'stopped';
  qmpstatus?: string;
  lock?: string;
  name?: string;
  tags?: string;
}

/** A URL path segment. */
export const seg = encodeURIComponent;
export const vmPath = (node: string, vmid: number) => `/nodes/${seg(node)}/qemu/${vmid}`;

/** A string field of PVE's loosely typed answers, or ''. */
export function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** The contract's instance: the address only when Running, the marks as read. */
export function toInstance(id: string, state: InstanceState, ip: string | undefined, marks: Marks): Instance {
  return {
    id,
    state,
    ...(state === 'Running' ? { ip } : {}),
    uid: marks.uid,
    installation: marks.installation,
    ...(marks.createdAt === undefined ? {} : { createdAt: marks.createdAt }),
  };
}

export class Vms {
  /** Where each VMID was last seen: a hint, re-read from the cluster list when wrong. */
  private readonly nodeHint = new Map<number, string>();

  constructor(
    private readonly client: ProxmoxClient,
    private readonly ops: Operations,
    private readonly permissions: Permissions,
    private readonly taskMs: number,
  ) {}

  /** Every QEMU VM the token sees (one cluster-wide call); remembers where each is. */
  async resources(signal: AbortSignal): Promise<Resource[]> {
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

  /** A VM is (about to be) on `node`. */
  placed(vmid: number, node: string): void {
    this.nodeHint.set(vmid, node);
  }

  async config(node: string, vmid: number, signal: AbortSignal): Promise<VmConfig> {
    return this.client.get<VmConfig>(
      '/nodes/{node}/qemu/{vmid}/config',
      `${vmPath(node, vmid)}/config`,
      {},
      signal,
    );
  }

  async status(node: string, vmid: number, signal: AbortSignal): Promise<VmStatus> {
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
  async locate(
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
    await this.permissions.requireVisibility(operation, signal);
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

  /** Stops the VM when `running`, then destroys it with its disks; each PVE task followed to its end. */
  async destroy(node: string, vmid: number, running: boolean, signal: AbortSignal): Promise<void> {
    if (running) {
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
  }
}
