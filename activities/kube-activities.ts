/**
 * Activities that read and write Kubernetes objects: Proxy status (the
 * workflow is its single writer), the finalizer, and cloud-init resolution.
 */
import {
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import {
  ANNOTATION_SKIP_CLEANUP,
  FINALIZER,
  GROUP,
  LABEL_CLOUD_INIT,
  PROXY_PLURAL,
  VERSION,
  type ProxyStatus,
} from '../resources/proxy-schema.js';
import type { EventRecorder } from '../kube/events.js';
import { FailureType } from '../workflows/proxy/failure-types.js';
import type { CloudInitRef, ProxyRef, RecordedStatus } from '../workflows/proxy/types.js';
import {
  apiErrorLine,
  createProxyReader,
  httpCode,
  isProxyNotFound,
  type ProxyReader,
} from '../kube/proxy-reader.js';
import { nonRetryable } from './failures.js';
import { statusEvents } from './proxy-events.js';
import type { KubeActivities } from './types.js';

/**
 * Resolves cloud-init text inside the activity, so it never enters workflow
 * history. Problems are CloudInitError failures that name the Secret and
 * key, never the content.
 */
export async function resolveCloudInit(
  kc: KubeConfig,
  reader: ProxyReader,
  ref: ProxyRef,
  cloudInit: CloudInitRef | undefined,
): Promise<string | undefined> {
  if (!cloudInit) return undefined;
  if (cloudInit.source === 'inline') {
    const proxy = await reader.readProxy(ref);
    if (!proxy)
      throw nonRetryable(
        FailureType.ProxyGone,
        `Proxy ${ref.namespace}/${ref.name} (uid ${ref.uid}) is gone`,
      );
    return proxy.spec.cloudInit?.inline;
  }
  const where = `Secret ${ref.namespace}/${cloudInit.name}`;
  let secret;
  try {
    secret = await kc
      .makeApiClient(CoreV1Api)
      .readNamespacedSecret({ namespace: ref.namespace, name: cloudInit.name });
  } catch (error) {
    if (httpCode(error) === 404) throw nonRetryable(FailureType.CloudInitError, `${where} not found`);
    throw error;
  }
  if (secret.metadata?.labels?.[LABEL_CLOUD_INIT] !== 'true') {
    throw nonRetryable(FailureType.CloudInitError, `${where} lacks the label ${LABEL_CLOUD_INIT}: "true"`);
  }
  const encoded = secret.data?.[cloudInit.key];
  if (encoded === undefined)
    throw nonRetryable(FailureType.CloudInitError, `${where} has no key "${cloudInit.key}"`);
  return Buffer.from(encoded, 'base64').toString('utf8');
}

/**
 * The instance fields of a Proxy's status, as a fresh run seeds itself from
 * them. Only what the workflow writes is taken; a field of the wrong shape
 * (a status written by hand) is left out rather than trusted.
 */
export function recordedStatusOf(status: ProxyStatus | undefined): RecordedStatus {
  if (!status) return {};
  const text = (v: unknown): v is string => typeof v === 'string' && v !== '';
  const out: RecordedStatus = {};
  if (text(status.providerID)) out.providerID = status.providerID;
  if (text(status.specHash)) out.specHash = status.specHash;
  if (text(status.ip)) out.ip = status.ip;
  if (Array.isArray(status.conditions)) out.conditions = status.conditions;
  if (typeof status.latencyMillis === 'number') out.latencyMillis = status.latencyMillis;
  if (text(status.lastHealthReportTime)) out.lastHealthReportTime = status.lastHealthReportTime;
  return out;
}

export function createKubeActivities(deps: {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** Where the Events a status write stands for go; none when absent. */
  events?: EventRecorder;
}): KubeActivities {
  const api = deps.kubeConfig.makeApiClient(CustomObjectsApi);
  const log = deps.logger.child({ component: 'kube-activities' });
  const reader = createProxyReader(deps.kubeConfig);

  /** The status as the apiserver has it, for the Events of the transition; 'unknown' when it cannot be read. */
  const statusNow = async (ref: ProxyRef): Promise<ProxyStatus | undefined | 'unknown'> => {
    if (!deps.events) return 'unknown';
    try {
      return (await reader.readProxy(ref))?.status;
    } catch {
      return 'unknown';
    }
  };

  return {
    async writeProxyStatus({ ref, status }) {
      // Read before the write: Events report what changed from what people
      // saw, whichever run of the workflow wrote it last. One GET per status
      // write, and status writes are transition-only.
      const before = await statusNow(ref);
      // The UID test makes the write fail (422) instead of landing on a
      // recreated Proxy of the same name.
      try {
        await api.patchNamespacedCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            namespace: ref.namespace,
            plural: PROXY_PLURAL,
            name: ref.name,
            body: [
              { op: 'test', path: '/metadata/uid', value: ref.uid },
              { op: 'add', path: '/status', value: status },
            ],
          },
          setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
        );
        if (deps.events && before !== 'unknown') {
          for (const event of statusEvents(before, status)) await deps.events.record(ref, event);
        }
        return 'written';
      } catch (error) {
        const code = httpCode(error);
        if (isProxyNotFound(error, ref.name)) return 'gone';
        // 422 is both a failed UID test and a status the schema rejects: only
        // a fresh read tells them apart, and 'gone' ends the Proxy's workflow.
        if (code === 422 && (await reader.readProxy(ref)) === undefined) return 'gone';
        // Said here, at each attempt: the workflow hears of a failure only
        // once the local activity's retries are spent (minutes), and a
        // denied write (a missing RBAC rule) should be seen at once.
        log.warn(
          { proxy: `${ref.namespace}/${ref.name}`, code, error: apiErrorLine(error) },
          code === 403 ? 'status write forbidden' : 'status write failed',
        );
        throw error;
      }
    },

    async readRecordedStatus({ ref }) {
      return recordedStatusOf((await reader.readProxy(ref))?.status);
    },

    async removeProxyFinalizer({ ref }) {
      // Optimistic concurrency: the patch names the resourceVersion it read;
      // on 409 the activity fails and Temporal retries with a fresh read.
      const proxy = await reader.readProxy(ref);
      if (!proxy) return 'gone';
      const finalizers = proxy.metadata.finalizers ?? [];
      if (!finalizers.includes(FINALIZER)) return 'absent';
      try {
        await api.patchNamespacedCustomObject(
          {
            group: GROUP,
            version: VERSION,
            namespace: ref.namespace,
            plural: PROXY_PLURAL,
            name: ref.name,
            body: {
              metadata: {
                resourceVersion: proxy.metadata.resourceVersion,
                finalizers: finalizers.filter((f) => f !== FINALIZER),
              },
            },
          },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        );
      } catch (error) {
        if (isProxyNotFound(error, ref.name)) return 'gone';
        throw error;
      }
      log.info({ proxy: `${ref.namespace}/${ref.name}`, uid: ref.uid }, 'finalizer removed');
      const instance = proxy.status?.providerID;
      const note =
        proxy.metadata.annotations?.[ANNOTATION_SKIP_CLEANUP] === 'true'
          ? `finalizer removed; instance ${instance ?? '(none recorded)'} left in place (skip-cleanup)`
          : instance
            ? `instance ${instance} deleted; finalizer removed`
            : 'no instance to delete; finalizer removed';
      await deps.events?.record(ref, { type: 'Normal', reason: 'Deleted', action: 'Delete', note });
      return 'removed';
    },
  };
}
