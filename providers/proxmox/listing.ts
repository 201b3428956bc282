/**
 * listByTag for the proxmox provider: one /cluster/resources for the whole
 * cluster, after /access/permissions confirms the token can see VMs at
 * all. The cluster list names VMs from RRD data (a new VM has none yet)
 * and has no description, so a VM without a name or tags costs a config
 * read, at most LIST_CONFIG_READS of them per listing.
 */
import type { Logger } from 'pino';
import type { Instance, InstanceState } from '../types.js';
import { isConfigMissing } from './classify.js';
import type { ProxmoxConfig } from './config.js';
import {
  formatProviderId,
  INSTANCE_NAME,
  ipFromTags,
  marksFromDescription,
  marksFromTags,
  type Marks,
} from './marks.js';
import type { Permissions } from './permissions.js';
import { toInstance, type VmConfig, type Vms } from './vms.js';

/** Configs read per listing to name VMs the cluster list shows without a name or tags. */
const LIST_CONFIG_READS = 20;

export async function listManagedVms(
  deps: { vms: Vms; permissions: Permissions; log: Logger; vmidRange: ProxmoxConfig['vmidRange'] },
  signal: AbortSignal,
): Promise<Instance[]> {
  await deps.permissions.requireVisibility('list', signal);
  const rows = await deps.vms.resources(signal);
  const out: Instance[] = [];
  let reads = 0;
  let skipped = 0;
  const { min, max } = deps.vmidRange;
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
      if (reads >= LIST_CONFIG_READS) {
        skipped++;
        continue;
      }
      reads++;
      let conf: VmConfig;
      try {
        conf = await deps.vms.config(r.node, vmid, signal);
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
    out.push(toInstance(formatProviderId(vmid, name), state, ip, marks));
  }
  if (skipped > 0)
    deps.log.info({ skipped }, 'listByTag: VMs left out this time (config reads per listing exhausted)');
  return out;
}
