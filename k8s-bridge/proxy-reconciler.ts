/**
 * The Proxy reconciler: turns a Proxy key (namespace/name) into what its
 * workflow is told, from the latest cached Proxy and the cloud-init Secret
 * it names. It never computes status. A Managed Proxy gets the finalizer; a
 * changed desired spec becomes a start or a `specChanged` signal, and a
 * status-only update (new resourceVersion, same generation) changes nothing
 * it sends and is dropped: the workflow's own status writes cannot feed it a
 * storm. A Proxy gone from the cache is told to delete, never started.
 */
import type { V1Secret } from '@kubernetes/client-node';
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  type Client,
  type WorkflowStartOptions,
} from '@temporalio/client';
import type { Logger } from 'pino';
import { FINALIZER, type Proxy, type ProxyPhase } from '../resources/proxy-schema.js';
import type { ResilientInformer } from '../kube/informer.js';
import { proxyKey, refOf, type ProxyClient, type ProxyRef } from '../kube/proxies.js';
import { secretViewOf, type SecretView } from '../kube/cloud-init.js';
import { credentialsFromSecret } from '../kube/proxy-credentials.js';
import {
  credentialsDigest,
  GENERATED_SUFFIX,
  generatedCredentialsRef,
} from '../credentials/proxy-credentials.js';
import { recordedStatusOf } from '../kube/recorded-status.js';
import { proxyWorkflowId } from '../workflows/proxy/ids.js';
import { deletionRequestedSignal, specChangedSignal } from '../workflows/proxy/messages.js';
import {
  ProxyModeKey,
  ProxyNameKey,
  ProxyNamespaceKey,
  ProxyPhaseKey,
  ProxyProviderKey,
} from '../workflows/proxy/search-attributes.js';
import type { DesiredSpec, ProxyWorkflowInput } from '../workflows/proxy/types.js';
import { PROXY_WORKFLOW_TYPE, signalProxy, type ProxyWorkflow } from '../workflows/proxy/client.js';
import { withSpan, type SpanHandle } from '../tracing/seam.js';
import { desiredSpecOf, type ManagedCredentials, type SecretLookup } from './desired.js';
import type { KindQueue } from './kind-queue.js';
import type { BridgeMetrics } from './metrics.js';
import { createSentLog, type SentLog } from './sent-log.js';
import type { WorkQueue } from './workqueue.js';

/** The ProxyPhase search attribute a run starts with (its status says Pending until its first write). */
const START_PHASE: ProxyPhase = 'Pending';

export interface ProxyReconcilerSettings {
  taskQueue: string;
  /** Proxy keys reconciled at once. */
  concurrency: number;
  /** Passed to every run it starts (the workflow's default otherwise). */
  maxHistoryEvents?: number;
}

export interface ProxyReconcilerDeps {
  settings: ProxyReconcilerSettings;
  client: Client;
  proxyClient: Pick<ProxyClient, 'addFinalizer'>;
  proxies: ResilientInformer<Proxy>;
  /** The labelled cloud-init Secrets: their content is hashed into the desired spec. */
  secrets: ResilientInformer<V1Secret>;
  /** The labelled credentials Secrets: a Managed Proxy's is made when missing, and its digest hashed. */
  credentialSecrets: ResilientInformer<V1Secret>;
  /** Creates a Managed Proxy's generated Secret (an existing one is read back). */
  createCredentialsSecret: (ref: ProxyRef) => Promise<SecretView | undefined>;
  queue: KindQueue;
  metrics: BridgeMetrics;
  log: Logger;
}

export interface ProxyReconciler {
  /** Queues a Proxy by key (namespace/name). */
  enqueue(key: string): void;
  /** Queues the cached Proxies whose cloud-init is in this Secret. */
  enqueueUsersOf(secret: V1Secret): void;
  /** Queues the Managed Proxy whose generated credentials this Secret holds. */
  enqueueOwnerOf(secret: V1Secret): void;
  /**
   * Queues every cached Proxy with what was sent forgotten, so each is
   * signalled again (the workflow dedupes by generation and hash).
   */
  resync(): void;
  /** Its lane of the work queue: failures per key, depth. */
  readonly queue: WorkQueue;
  /** What it sent per key, and when. */
  readonly sent: SentLog;
}

interface Context extends ProxyReconcilerDeps {
  lane: WorkQueue;
  sent: SentLog;
  /** The last UID seen per key, to address the workflow after the object is gone. */
  lastRef: Map<string, ProxyRef>;
  lookupSecret: SecretLookup;
}

export function createProxyReconciler(deps: ProxyReconcilerDeps): ProxyReconciler {
  const { metrics, log, proxies } = deps;
  const lane: WorkQueue = deps.queue.lane({
    concurrency: deps.settings.concurrency,
    // One span per reconcile: the root of the trace a Proxy change starts
    // (the Temporal client plugin carries it into the signal's headers).
    process: (k) =>
      withSpan('bridge reconcile', { 'proxy.key': k, attempt: lane.failures(k) + 1 }, (span) =>
        reconcile(ctx, k, span),
      ),
    onFailure(k, error, failures, delayMs) {
      metrics.retries.inc();
      metrics.errors.inc({ stage: 'reconcile' });
      log.warn(
        {
          proxy: k,
          attempt: failures,
          retryInMs: delayMs,
          depth: lane.depth(),
          waitingRetry: lane.waitingRetry(),
          err: error instanceof Error ? error.message : String(error),
        },
        'reconcile failed; retrying after backoff',
      );
    },
    onProcessed(_k, ok) {
      metrics.reconciles.inc({ result: ok ? 'ok' : 'error' });
      metrics.depth.set(lane.depth());
      metrics.waitingRetry.set(lane.waitingRetry());
    },
  });
  const ctx: Context = {
    ...deps,
    lane,
    sent: createSentLog(),
    lastRef: new Map(),
    lookupSecret: (namespace, name) => {
      const s = deps.secrets.get(name, namespace);
      return s && secretViewOf(s);
    },
  };
  const enqueue = (k: string) => {
    lane.add(k);
    metrics.depth.set(lane.depth());
  };
  return {
    enqueue,
    enqueueUsersOf(secret) {
      const namespace = secret.metadata?.namespace ?? 'default';
      const name = secret.metadata?.name;
      for (const p of proxies.list(namespace)) {
        if (p.spec.cloudInit?.secretRef?.name === name)
          enqueue(proxyKey({ namespace, name: p.metadata.name }));
      }
    },
    enqueueOwnerOf(secret) {
      const namespace = secret.metadata?.namespace ?? 'default';
      for (const owner of secret.metadata?.ownerReferences ?? []) {
        if (owner.kind === 'Proxy') enqueue(proxyKey({ namespace, name: owner.name }));
      }
      // One someone made under the generated name (no owner): the Proxy it is named for.
      const name = secret.metadata?.name ?? '';
      if (name.endsWith(GENERATED_SUFFIX))
        enqueue(proxyKey({ namespace, name: name.slice(0, -GENERATED_SUFFIX.length) }));
    },
    resync() {
      ctx.sent.forgetAll();
      for (const p of proxies.list()) enqueue(proxyKey(refOf(p)));
    },
    queue: lane,
    sent: ctx.sent,
  };
}

async function reconcile(ctx: Context, k: string, span: SpanHandle): Promise<void> {
  const [namespace, name] = k.split('/') as [string, string];
  ctx.log.debug({ proxy: k, attempt: ctx.lane.failures(k) + 1 }, 'reconciling');
  const proxy = ctx.proxies.get(name, namespace);
  if (!proxy) return signalGone(ctx, k, span);
  const ref = refOf(proxy);
  ctx.lastRef.set(k, ref);
  // The version the status below was read at: this bridge's own finalizer
  // patch moves it on.
  const recordedVersion = (await ensureFinalizer(ctx, proxy)) ?? proxy.metadata.resourceVersion;
  const desired = desiredSpecOf(proxy, ctx.lookupSecret, await managedCredentials(ctx, proxy));
  const fingerprint = JSON.stringify([ref.uid, desired]);
  if (ctx.sent.unchanged(k, fingerprint)) {
    ctx.metrics.unchanged.inc();
    span.setAttributes({ action: 'unchanged' });
    return;
  }
  span.setAttributes({ action: 'signal-with-start', 'proxy.mode': desired.mode });
  // A Proxy no run has written a status to, that this bridge has sent
  // nothing for, most likely has no run yet: a plain start carries the spec
  // in its input, where a signal beside it would be one more history event
  // and one more job in the run's first activation. A run that does exist
  // (a bridge restarted before the first status write) refuses the start,
  // and gets the signal.
  const firstSend = !ctx.sent.has(k) && proxy.status === undefined;
  await send(ctx, k, startOf(ctx.settings, proxy, desired, recordedVersion), firstSend);
  ctx.sent.record(k, fingerprint);
}

/**
 * Gone from the cache: External proxies (no finalizer) and Managed ones
 * whose finalizer was just removed. Signal only: never start a workflow.
 */
async function signalGone(ctx: Context, k: string, span: SpanHandle): Promise<void> {
  const ref = ctx.lastRef.get(k);
  ctx.lastRef.delete(k);
  ctx.sent.drop(k);
  if (!ref) return;
  span.setAttributes({ action: 'signal-deletion' });
  try {
    await signalProxy(ctx.client, ref, deletionRequestedSignal, { skipCleanup: false });
    ctx.metrics.signals.inc({ signal: 'deletionRequested' });
  } catch (error) {
    if (!(error instanceof WorkflowNotFoundError)) throw error;
  }
}

/**
 * A Managed Proxy's generated credentials: the Secret in the cache, or one
 * made now (before any instance exists, so the instance is made with them).
 * A Proxy being deleted gets none made. A Secret of that name that is not
 * usable (a user's, unlabelled, or without the keys) is a problem the
 * workflow shows (Provisioned False, CredentialsError): its instance is not
 * made open to everyone instead. A change to the Secret queues the Proxy.
 */
async function managedCredentials(ctx: Context, proxy: Proxy): Promise<ManagedCredentials | undefined> {
  if (proxy.spec.mode !== 'Managed') return undefined;
  const ref = refOf(proxy);
  const where = generatedCredentialsRef(ref.name);
  const cached = ctx.credentialSecrets.get(where.secret, ref.namespace);
  let view = cached && secretViewOf(cached);
  if (!view) {
    if (proxy.metadata.deletionTimestamp) return undefined;
    view = await ctx.createCredentialsSecret(ref);
  }
  const read = credentialsFromSecret(ref.namespace, where, view);
  if ('problem' in read) return { secret: where.secret, problem: `the proxy's credentials: ${read.problem}` };
  return { secret: where.secret, sha256: credentialsDigest(read.credentials) };
}

/** Adds the finalizer to a Managed Proxy without it: its resourceVersion after the patch, undefined when none was made. */
async function ensureFinalizer(ctx: Context, proxy: Proxy): Promise<string | undefined> {
  if (
    proxy.spec.mode !== 'Managed' ||
    proxy.metadata.deletionTimestamp ||
    (proxy.metadata.finalizers ?? []).includes(FINALIZER)
  )
    return undefined;
  // A conflict (another bridge changed it) or a Proxy already gone: its next event brings us back.
  const { result, resourceVersion } = await ctx.proxyClient.addFinalizer(proxy, FINALIZER);
  if (result !== 'added') return undefined;
  ctx.metrics.finalizers.inc();
  return resourceVersion;
}

type ProxyStart = WorkflowStartOptions<ProxyWorkflow> & { args: [ProxyWorkflowInput] };

/** How a run of this Proxy starts. */
function startOf(
  settings: ProxyReconcilerSettings,
  proxy: Proxy,
  desired: DesiredSpec,
  recordedVersion: string | undefined,
): ProxyStart {
  const ref = refOf(proxy);
  // The status as this bridge last saw it: the run starts from it without
  // a read of its own, and knows the ProxyPhase set here.
  const input: ProxyWorkflowInput = {
    ref,
    desired,
    recorded: recordedStatusOf(proxy.status),
    indexedPhase: START_PHASE,
    ...(recordedVersion ? { recordedVersion } : {}),
  };
  if (settings.maxHistoryEvents) input.maxHistoryEvents = settings.maxHistoryEvents;
  return {
    workflowId: proxyWorkflowId(ref),
    taskQueue: settings.taskQueue,
    args: [input],
    // A run that completed (the Proxy was deleted) is never restarted by
    // a late event; one that failed or was terminated by an operator is.
    workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
    typedSearchAttributes: [
      { key: ProxyNamespaceKey, value: ref.namespace },
      { key: ProxyNameKey, value: ref.name },
      { key: ProxyProviderKey, value: desired.provider ?? '' },
      { key: ProxyModeKey, value: desired.mode },
      { key: ProxyPhaseKey, value: START_PHASE },
    ],
  };
}

/** A plain start on the first send (a run that exists refuses it and gets the signal), else signalWithStart. */
async function send(ctx: Context, k: string, start: ProxyStart, firstSend: boolean): Promise<void> {
  const desired = start.args[0].desired;
  const signalWithStart = () =>
    ctx.client.workflow.signalWithStart<ProxyWorkflow, [DesiredSpec]>(PROXY_WORKFLOW_TYPE, {
      ...start,
      signal: specChangedSignal,
      signalArgs: [desired],
    });
  try {
    if (!firstSend) await signalWithStart();
    else {
      try {
        await ctx.client.workflow.start<ProxyWorkflow>(PROXY_WORKFLOW_TYPE, start);
      } catch (error) {
        if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
        await signalWithStart();
      }
    }
    ctx.metrics.signals.inc({ signal: 'specChanged' });
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    ctx.log.debug({ proxy: k }, 'workflow already completed; not restarting');
  }
}
