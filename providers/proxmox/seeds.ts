/**
 * The NoCloud seed of each VM: `<name>-cidata.iso` in its node's ISO
 * storage, uploaded once (a bounded number at a time per storage) and
 * removed with the VM.
 */
import { Semaphore } from '../concurrency.js';
import { buildSeedIso } from '../shared/seed.js';
import type { CreateRequest } from '../types.js';
import { PveHttpError, PveTaskError, type ProxmoxClient } from './client.js';
import type { ProxmoxConfig, ProxmoxNode } from './config.js';
import { seg } from './vms.js';

/** Uploads in flight per storage. */
const UPLOADS_PER_STORAGE = 2;

/** The seed's file name and its volume id on the node's ISO storage. */
export function seedVolume(node: ProxmoxNode, name: string): { file: string; volid: string } {
  const file = `${name}-cidata.iso`;
  return { file, volid: `${node.isoStorage}:iso/${file}` };
}

export class Seeds {
  private readonly uploadSlots = new Map<string, Semaphore>();

  constructor(
    private readonly client: ProxmoxClient,
    private readonly config: Pick<ProxmoxConfig, 'nodes' | 'installGuestAgent' | 'vendorData'>,
    private readonly taskMs: number,
  ) {}

  /** Uploads the request's seed unless the storage has it; its size in bytes, or undefined when it was there. */
  async ensure(req: CreateRequest, node: ProxmoxNode, signal: AbortSignal): Promise<number | undefined> {
    const { file, volid } = seedVolume(node, req.name);
    const present = await this.client.get<Array<{ volid: string }>>(
      '/nodes/{node}/storage/{storage}/content',
      `/nodes/${seg(node.name)}/storage/${seg(node.isoStorage)}/content`,
      { content: 'iso' },
      signal,
    );
    if ((present ?? []).some((v) => v.volid === volid)) return undefined;
    const iso = buildSeedIso({
      instanceName: req.name,
      cloudInit: req.cloudInit,
      credentials: req.credentials,
      installGuestAgent: this.config.installGuestAgent,
      vendorData: this.config.vendorData,
    });
    let slots = this.uploadSlots.get(node.isoStorage);
    if (slots === undefined)
      this.uploadSlots.set(node.isoStorage, (slots = new Semaphore(UPLOADS_PER_STORAGE)));
    await slots.run(signal, async () => {
      const upid = await this.client.upload(node.name, node.isoStorage, file, iso, signal);
      await this.client.waitTask(node.name, upid, this.taskMs, signal);
    });
    return iso.length;
  }

  /** Removes the seed from the node's ISO storage (every configured node's when unknown). */
  async remove(name: string, node: string | undefined, signal: AbortSignal): Promise<void> {
    const targets = this.config.nodes.filter((n) => node === undefined || n.name === node);
    for (const n of targets.length > 0 ? targets : this.config.nodes) {
      const { volid } = seedVolume(n, name);
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
}
