/**
 * providerIDs and the pod-to-instance mapping. Pure.
 *
 * providerID: `<namespace>/<pod name>` (the seed's shape). It carries the
 * namespace, so `get` and `delete` keep working for pods made before a
 * change of the configured namespace.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { MARK_INSTALLATION, MARK_UID, type Instance, type InstanceState } from '../types.js';
import { DNS1123_LABEL } from './config.js';

export function formatProviderId(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/** Namespace and name of a providerID, or undefined when it is malformed. */
export function parseProviderId(id: string): { namespace: string; name: string } | undefined {
  const parts = id.split('/');
  if (parts.length !== 2) return undefined;
  const [namespace, name] = parts as [string, string];
  if (!DNS1123_LABEL.test(namespace) || !DNS1123_LABEL.test(name)) return undefined;
  return { namespace, name };
}

function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
}

/**
 * The contract's state for a pod (the seed's table, plus two rules the seed
 * lacked):
 *
 * | deletionTimestamp | phase                      | podIP, Ready      | state        |
 * |-------------------|----------------------------|-------------------|--------------|
 * | set               | any                        | any               | Terminated   |
 * | unset             | Pending                    | any               | Provisioning |
 * | unset             | Running                    | IP and Ready=True | Running      |
 * | unset             | Running                    | otherwise         | Provisioning |
 * | unset             | Succeeded, Failed, Unknown | any               | Terminated   |
 * | unset             | anything else              | any               | Stopped      |
 *
 * A pod being deleted is still returned (get answers NotFound only once the
 * object is gone), but it is Terminated: it will not recover by itself, and
 * reporting its last phase would read a dying Squid as Running (a gap the
 * seed listed). Running needs Ready as well as an IP: the readiness probe is
 * what says Squid listens on the port. A crash-looping Squid keeps phase
 * Running with Ready=False, so it reads Provisioning while the kubelet
 * restarts it, and keeps its IP when it comes back.
 */
export function stateFromPod(pod: V1Pod): InstanceState {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null) {
    return 'Terminated';
  }
  switch (pod.status?.phase) {
    case 'Pending':
      return 'Provisioning';
    case 'Running':
      return pod.status.podIP && isReady(pod) ? 'Running' : 'Provisioning';
    case 'Succeeded':
    case 'Failed':
    case 'Unknown':
      return 'Terminated';
    default:
      return 'Stopped';
  }
}

/** UID and installation from the labels, CreatedAt from metadata.creationTimestamp: read back every time. */
export function instanceFromPod(pod: V1Pod, fallbackNamespace: string): Instance {
  const state = stateFromPod(pod);
  const labels = pod.metadata?.labels ?? {};
  const instance: Instance = {
    id: formatProviderId(pod.metadata?.namespace ?? fallbackNamespace, pod.metadata?.name ?? ''),
    state,
    uid: labels[MARK_UID] ?? '',
    installation: labels[MARK_INSTALLATION] ?? '',
  };
  if (state === 'Running' && pod.status?.podIP) instance.ip = pod.status.podIP;
  const created = toDate(pod.metadata?.creationTimestamp);
  if (created !== undefined) instance.createdAt = created;
  return instance;
}

/** client-node deserialises timestamps to Date; a string or an invalid date is tolerated. */
function toDate(value: unknown): Date | undefined {
  if (value === undefined || value === null) return undefined;
  const date =
    value instanceof Date
      ? value
      : typeof value === 'string' || typeof value === 'number'
        ? new Date(value)
        : undefined;
  if (date === undefined) return undefined;
  return Number.isNaN(date.getTime()) ? undefined : date;
}
