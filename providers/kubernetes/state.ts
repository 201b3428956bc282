/**
 * providerIDs and the pod-to-instance mapping. Pure.
 *
 * providerID: `<namespace>/<pod name>` (the seed's shape). It carries the
 * namespace, so `get` and `delete` keep working for pods made before a
 * change of the configured namespace.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { MARK_INSTALLATION, MARK_UID, type ErrorClass, type Instance, type InstanceState } from '../types.js';
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

/** A failure the kubelet or the scheduler reports for a pod: `get` throws it instead of answering Provisioning. */
export interface PodFailure {
  errorClass: Extract<ErrorClass, 'Permanent' | 'Transient' | 'QuotaExceeded'>;
  message: string;
}

/**
 * A container that crashes sooner than this after starting, while the
 * kubelet backs off restarting it, is crash-looping on what it was given
 * (the image, the command, the memory limit): Permanent. One that ran longer
 * crashed on something else (a load spike): it is restarted, and reads
 * Provisioning meanwhile.
 */
export const CRASH_LOOP_RUN_SECONDS = 60;

/** Registry answers that mean the image reference itself is wrong, as opposed to a registry that cannot be reached. */
const IMAGE_ABSENT =
  /not found|manifest unknown|name unknown|repository does not exist|pull access denied|404/i;

/** Kubelet waiting reasons that no retry fixes: the pod spec or the image must change. */
const CONFIG_WAITING_REASONS = new Set([
  'InvalidImageName',
  'ErrImageNeverPull',
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
]);

/** Kubelet and scheduler messages quoted in errors: one line, bounded. */
function quote(message: string | undefined): string {
  const line = (message ?? '').replace(/\s+/g, ' ').trim();
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}

/** A crashed container's last log lines (its termination message): the end says why, so the end is kept. */
function quoteTail(message: string | undefined): string {
  const line = (message ?? '').replace(/\s+/g, ' ').trim();
  return line.length > 300 ? `...${line.slice(-297)}` : line;
}

/** 128 + SIGKILL: what the kernel's OOM killer leaves, among other kills. */
const SIGKILL_EXIT = 137;
/** How runc and containerd word an OOM kill in a message when the reason is not OOMKilled. */
const OOM_KILLED_MESSAGE = /\bOOM[- ]?kill/i;
/**
 * containerd's start of a task whose process had already exited: killed
 * between the runtime's create and its start, which under a memory limit
 * is the OOM killer at the container's first allocations (seen here with
 * a 5Mi limit, in the race the runc "init was OOM-killed" message loses).
 */
const STOPPED_BEFORE_START = /cannot start a stopped process/i;

function memoryLimitOf(pod: V1Pod, container: string): string | undefined {
  const limit = pod.spec?.containers.find((c) => c.name === container)?.resources?.limits?.memory;
  return limit === undefined ? undefined : String(limit);
}

/**
 * What the kubelet and the scheduler say is wrong with the pod, classified
 * by the contract's taxonomy (§5), or undefined when nothing is (the pod is
 * starting, running, or being restarted after a crash it may recover from):
 *
 * | Reported                                              | Class         |
 * |-------------------------------------------------------|---------------|
 * | PodScheduled=False, reason Unschedulable               | QuotaExceeded (no node has room: capacity) |
 * | ErrImagePull / ImagePullBackOff, registry says absent   | Permanent (the image reference is wrong)   |
 * | ErrImagePull / ImagePullBackOff, anything else         | Transient (the registry may come back)     |
 * | InvalidImageName, ErrImageNeverPull, Create/RunContainerError, CreateContainerConfigError | Permanent; an OOM kill at start names the limit |
 * | CrashLoopBackOff after a run shorter than CRASH_LOOP_RUN_SECONDS | Permanent; OOMKilled, or exit 137 under a memory limit, names the limit |
 *
 * Only a pod that is not being deleted and has not ended is judged (those
 * are Terminated already).
 */
export function podFailure(pod: V1Pod): PodFailure | undefined {
  if (pod.metadata?.deletionTimestamp) return undefined;
  const phase = pod.status?.phase;
  if (phase !== 'Pending' && phase !== 'Running') return undefined;
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (scheduled?.status === 'False' && scheduled.reason === 'Unschedulable') {
    return { errorClass: 'QuotaExceeded', message: `no node can take the pod: ${quote(scheduled.message)}` };
  }
  for (const status of [
    ...(pod.status?.initContainerStatuses ?? []),
    ...(pod.status?.containerStatuses ?? []),
  ]) {
    const waiting = status.state?.waiting;
    const reason = waiting?.reason;
    if (!reason) continue;
    const what = `container ${status.name} (image ${status.image || '?'})`;
    if (reason === 'ErrImagePull' || reason === 'ImagePullBackOff') {
      const absent = IMAGE_ABSENT.test(waiting.message ?? '');
      return {
        errorClass: absent ? 'Permanent' : 'Transient',
        message: `${what}: ${reason}${absent ? ', the registry has no such image' : ''}: ${quote(waiting.message)}`,
      };
    }
    // The pod's own htpasswd Secret is made right after the pod (it is
    // owned by it): a kubelet that saw the pod first waits for it, and
    // retries by itself.
    if (reason === 'CreateContainerConfigError' && ownSecretMissing(pod, waiting.message)) continue;
    if (CONFIG_WAITING_REASONS.has(reason)) {
      // runc's "container init was OOM-killed (memory limit too low?)": the limit is below what the runtime itself needs.
      const limit = memoryLimitOf(pod, status.name);
      const hint = OOM_KILLED_MESSAGE.test(waiting.message ?? '')
        ? `; its memory limit${limit ? ` ${limit}` : ''} is too low: raise the provider's resources.memoryLimit`
        : STOPPED_BEFORE_START.test(waiting.message ?? '') && limit
          ? `; the process was gone before it started, most likely killed by the kernel's OOM killer at its memory limit ${limit}: raise the provider's resources.memoryLimit`
          : '';
      return { errorClass: 'Permanent', message: `${what}: ${reason}: ${quote(waiting.message)}${hint}` };
    }
    if (reason === 'CrashLoopBackOff') {
      const last = status.lastState?.terminated;
      if (!last) continue;
      const started = toDate(last.startedAt)?.getTime();
      const finished = toDate(last.finishedAt)?.getTime();
      const ranSeconds = started !== undefined && finished !== undefined ? (finished - started) / 1000 : 0;
      if (ranSeconds >= CRASH_LOOP_RUN_SECONDS) continue;
      const exit = `exited ${last.exitCode}${last.reason ? ` (${last.reason})` : ''} after ${Math.round(ranSeconds)} s, ${status.restartCount} restart(s)`;
      const limit = memoryLimitOf(pod, status.name);
      const oomKilled = last.reason === 'OOMKilled' || OOM_KILLED_MESSAGE.test(last.message ?? '');
      const hint = oomKilled
        ? `: killed for exceeding its memory limit${limit ? ` ${limit}` : ''}; raise the provider's resources.memoryLimit`
        : last.exitCode === SIGKILL_EXIT && limit
          ? `: killed by SIGKILL, most likely the kernel's OOM killer at its memory limit ${limit} (the runtime does not always report OOMKilled for a container killed right after start); raise the provider's resources.memoryLimit`
          : last.message
            ? `: ${quoteTail(last.message)}`
            : '';
      return { errorClass: 'Permanent', message: `${what} keeps crashing: ${exit}${hint}` };
    }
  }
  return undefined;
}

/** The kubelet's `secret "<name>" not found` about the Secret named after the pod (auth-secret.ts). */
function ownSecretMissing(pod: V1Pod, message: string | undefined): boolean {
  const name = pod.metadata?.name;
  return name !== undefined && (message ?? '').includes(`secret "${name}" not found`);
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
