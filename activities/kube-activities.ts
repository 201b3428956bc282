/**
 * Activities that read and write Kubernetes objects: Proxy status (the
 * workflow is its single writer), the finalizer, and cloud-init resolution.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { ANNOTATION_SKIP_CLEANUP, FINALIZER, type ProxyStatus } from '../resources/proxy-schema.js';
import type { EventRecorder } from '../kube/events.js';
import { apiErrorLine, httpCode } from '../kube/errors.js';
import { readCloudInitSecret, readSecretView, type SecretView } from '../kube/cloud-init.js';
import { credentialsFromSecret } from '../kube/proxy-credentials.js';
import { generatedCredentialsRef, type ProxyCredentials } from '../credentials/proxy-credentials.js';
import { createProxyClient, type ProxyClient, type ProxyRef } from '../kube/proxies.js';
import { FailureType } from '../workflows/proxy/failure-types.js';
import type { CloudInitRef } from '../workflows/proxy/types.js';
import { recordedStatusOf } from '../kube/recorded-status.js';
import { activityAttempt } from './deadline.js';
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
  proxies: Pick<ProxyClient, 'read'>,
  ref: ProxyRef,
  cloudInit: CloudInitRef | undefined,
): Promise<string | undefined> {
  if (!cloudInit) return undefined;
  if (cloudInit.source === 'inline') {
    const proxy = await proxies.read(ref);
    if (!proxy)
      throw nonRetryable(
        FailureType.ProxyGone,
        `Proxy ${ref.namespace}/${ref.name} (uid ${ref.uid}) is gone`,
      );
    return proxy.spec.cloudInit?.inline;
  }
  const read = await readCloudInitSecret(kc, {
    namespace: ref.namespace,
    name: cloudInit.name,
    key: cloudInit.key,
  });
  if ('problem' in read) throw nonRetryable(FailureType.CloudInitError, read.problem);
  return read.text;
}

/**
 * A Managed proxy's generated credentials, read inside the activity so they
 * never enter history. Missing or unusable: retried (the bridge makes the
 * Secret before it starts the run, and makes it again if it goes), with a
 * message naming the Secret, never a value.
 */
export async function resolveCredentials(
  kc: KubeConfig,
  ref: ProxyRef,
  secret: string | undefined,
): Promise<{ credentials: ProxyCredentials; secret: SecretView } | undefined> {
  if (secret === undefined) return undefined;
  const where = { ...generatedCredentialsRef(ref.name), secret };
  const view = await readSecretView(kc, ref.namespace, secret);
  const read = credentialsFromSecret(ref.namespace, where, view);
  if ('problem' in read) throw new Error(`the proxy's credentials: ${read.problem}`);
  return { credentials: read.credentials, secret: view! };
}

export function createKubeActivities(deps: {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** Where the Events a status write stands for go; none when absent. */
  events?: EventRecorder;
}): KubeActivities {
  const log = deps.logger.child({ component: 'kube-activities' });
  const proxies = createProxyClient(deps.kubeConfig);

  /** The status as the apiserver has it, for the Events of the transition; 'unknown' when it cannot be read. */
  const statusNow = async (ref: ProxyRef): Promise<ProxyStatus | undefined | 'unknown'> => {
    if (!deps.events) return 'unknown';
    try {
      return (await proxies.read(ref))?.status;
    } catch {
      return 'unknown';
    }
  };

  return {
    async writeProxyStatus({ ref, status, previous, resourceVersion }) {
      // Events report what changed from what people saw. The workflow, the
      // single writer, knows that and sends it; when it does not (a run that
      // could not read its start), or on a retry (the last attempt may have
      // landed), the status is read first: one GET.
      const before = previous !== undefined && activityAttempt() === 1 ? previous : await statusNow(ref);
      let written: 'written' | 'gone' | 'stale';
      try {
        written = await proxies.writeStatus(ref, status, resourceVersion ? { resourceVersion } : undefined);
      } catch (error) {
        const code = httpCode(error);
        // Said here, at each attempt: the workflow hears of a failure only
        // once the local activity's retries are spent (minutes), and a
        // denied write (a missing RBAC rule) should be seen at once.
        log.warn(
          { proxy: `${ref.namespace}/${ref.name}`, code, error: apiErrorLine(error) },
          code === 403 ? 'status write forbidden' : 'status write failed',
        );
        throw error;
      }
      if (written === 'written' && deps.events && before !== 'unknown') {
        for (const event of statusEvents(before, status)) await deps.events.record(ref, event);
      }
      return written;
    },

    async readRecordedStatus({ ref }) {
      return recordedStatusOf((await proxies.read(ref))?.status);
    },

    async removeProxyFinalizer({ ref }) {
      // Optimistic concurrency: the patch names the resourceVersion it read;
      // on 409 the activity fails and Temporal retries with a fresh read.
      const { result, proxy } = await proxies.removeFinalizer(ref, FINALIZER);
      if (result !== 'removed' || !proxy) return result;
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
