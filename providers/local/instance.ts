/**
 * A local instance's identity (providerID `local/<name>`) and what the
 * contract sees of it: its record's state, Running only while this process
 * serves its address and port and its start delay has passed.
 */
import { MARK_INSTALLATION, MARK_UID, type Instance, type InstanceState } from '../types.js';
import type { LocalInstanceRecord } from './store.js';

const ID_PREFIX = 'local/';
/** Instance names: a DNS-1123 label. */
export const NAME_RE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export function formatLocalProviderId(name: string): string {
  return ID_PREFIX + name;
}

/** The instance name in a providerID, or undefined when the ID is malformed. */
export function parseLocalProviderId(id: string): string | undefined {
  if (!id.startsWith(ID_PREFIX)) return undefined;
  const name = id.slice(ID_PREFIX.length);
  return NAME_RE.test(name) ? name : undefined;
}

/** The record as the contract's instance; `serving`: this process listens on its address and port. */
export function toInstance(record: LocalInstanceRecord, serving: boolean): Instance {
  const createdAt = new Date(record.createdAt);
  const readyAt = Date.parse(record.readyAt);
  let state: InstanceState;
  switch (record.state) {
    case 'running':
      state = record.address !== '' && serving && !(Date.now() < readyAt) ? 'Running' : 'Provisioning';
      break;
    case 'terminated':
      state = 'Terminated';
      break;
    default:
      // 'stopped' and anything this version does not recognise.
      state = 'Stopped';
  }
  const instance: Instance = {
    id: formatLocalProviderId(record.name),
    state,
    uid: record.labels[MARK_UID] ?? '',
    installation: record.labels[MARK_INSTALLATION] ?? '',
  };
  if (state === 'Running') instance.ip = record.address;
  if (!Number.isNaN(createdAt.getTime())) instance.createdAt = createdAt;
  return instance;
}
