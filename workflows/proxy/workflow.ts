/**
 * The per-Proxy entity workflow: the single writer of a Proxy's status.
 *
 * One loop: derive the next step from the state (state.ts), act through an
 * activity, then wait on a durable timer or a signal. Signals only change
 * state and wake the loop; they never call activities themselves, so there
 * is one actor and no interleaving to reason about.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { KubeActivities, ProviderActivities } from '../../activities/types.js';
import { FailureType, NON_RETRYABLE_FAILURES } from './failure-types.js';
import { deletionRequestedSignal, healthChangedSignal, specChangedSignal, stateQuery } from './messages.js';
import { ProxyPhaseKey } from './search-attributes.js';
import {
  applyDeletion,
  applyHealth,
  applySpec,
  beginReplacement,
  buildStatus,
  initialState,
  latch,
  nextStep,
  observe,
  view,
  type Rules,
} from './state.js';
import { DEFAULT_TIMING, type ProxyState, type ProxyTiming, type ProxyWorkflowInput } from './types.js';

// Provider calls: Transient failures retry here with capped exponential
// backoff; after a few attempts the workflow itself takes over (records the
// error in status, waits, re-evaluates), so a deletion or spec change is
// never stuck behind an activity retrying forever.
// The activities heartbeat every few seconds while a provider call runs
// (provider-activities.ts): a worker killed mid-call is then noticed after
// heartbeatTimeout and the call retried elsewhere, instead of only after
// startToCloseTimeout (2 minutes).
const provider = proxyActivities<ProviderActivities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '15 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 5,
    nonRetryableErrorTypes: NON_RETRYABLE_FAILURES,
  },
});

// Status writes: transition-only, so each one matters; retried through an
// apiserver restart, then given up (the next transition writes again).
const kube = proxyActivities<KubeActivities>({
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 10,
  },
});

// The same status writes as local activities: they run in the worker that
// runs the workflow task, so a write costs no extra workflow task round trip
// (a provisioning drops from 6 workflow tasks to 3). Safe because a write is
// short, idempotent and transition-only. Gated by STATUS_WRITES_AS_LOCAL so
// histories recorded before it replay on the old path.
const kubeLocal = proxyLocalActivities<KubeActivities>({
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 10,
  },
});
const STATUS_WRITES_AS_LOCAL = 'status-writes-as-local-activities';
/** Rules.keepInstanceOnCloudInitProblem. */
const KEEP_INSTANCE_ON_CLOUD_INIT_PROBLEM = 'keep-instance-on-cloud-init-problem';
/** A status write or cloud-init read that finds the Proxy gone ends the run as a deletion. */
const PROXY_GONE_IS_DELETION = 'proxy-gone-is-deletion';
/** Rules.retryLatchedCloudInitError. */
const RETRY_LATCHED_CLOUD_INIT_ERROR = 'retry-latched-cloud-init-error';
/** A deletion by a run that never recorded its instance ID looks the instance up by UID first. */
const FIND_INSTANCE_BEFORE_RELEASE = 'find-instance-before-release';

// Finalizer removal must eventually happen or the Proxy stays Terminating:
// retry without limit.
const finalizer = proxyActivities<KubeActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

const DEFAULT_MAX_HISTORY_EVENTS = 4_000;

function failureOf(error: unknown): { type: string; message: string } {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  if (cause instanceof ApplicationFailure) {
    return { type: cause.type ?? FailureType.Transient, message: cause.message };
  }
  // Timeouts and anything else the SDK raises: retryable by nature.
  return { type: FailureType.Transient, message: cause instanceof Error ? cause.message : String(cause) };
}

export async function proxyWorkflow(input: ProxyWorkflowInput): Promise<void> {
  const timing: ProxyTiming = { ...DEFAULT_TIMING, ...input.timing };
  const maxHistoryEvents = input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS;
  const state: ProxyState = input.carried ?? initialState(input);
  // Read once per run, before the first command: a run recorded before a
  // rule changed replays on the old rule until its next continue-as-new.
  const rules: Rules = {
    keepInstanceOnCloudInitProblem: patched(KEEP_INSTANCE_ON_CLOUD_INIT_PROBLEM),
    retryLatchedCloudInitError: patched(RETRY_LATCHED_CLOUD_INIT_ERROR),
  };
  const proxyGoneIsDeletion = patched(PROXY_GONE_IS_DELETION);
  let woken = false;

  // The Proxy with this UID no longer exists (deleted while no bridge was
  // watching, or its finalizer was removed by hand): nobody will signal the
  // deletion, so the run cleans up and ends by itself.
  const onProxyGone = (): void => {
    if (proxyGoneIsDeletion && applyDeletion(state, { skipCleanup: false })) {
      log.warn('the Proxy is gone; deleting its instance and ending', { proxy: state.ref });
      woken = true;
    }
  };

  setHandler(specChangedSignal, (desired) => {
    if (applySpec(state, desired)) woken = true;
  });
  setHandler(deletionRequestedSignal, (request) => {
    if (applyDeletion(state, request)) woken = true;
  });
  setHandler(healthChangedSignal, (report) => {
    if (applyHealth(state, report)) woken = true;
  });
  setHandler(stateQuery, () => view(state));

  const publish = async (): Promise<void> => {
    const status = buildStatus(state, new Date(), rules);
    const serialised = JSON.stringify(status);
    if (serialised !== state.lastWrittenStatus) {
      try {
        const write = patched(STATUS_WRITES_AS_LOCAL) ? kubeLocal : kube;
        const outcome = await write.writeProxyStatus({ ref: state.ref, status });
        state.lastWrittenStatus = serialised;
        if (outcome === 'gone') onProxyGone();
      } catch (error) {
        log.warn('status write failed; will retry on the next change', { error: failureOf(error).message });
      }
    }
    if (state.phase !== state.indexedPhase) {
      upsertSearchAttributes([{ key: ProxyPhaseKey, value: state.phase }]);
      state.indexedPhase = state.phase;
    }
  };

  /** Publishes, then waits for a signal or `ms` (forever when undefined). */
  const pause = async (ms?: number): Promise<void> => {
    state.nextPollAt = ms === undefined ? undefined : new Date(Date.now() + ms).toISOString();
    await publish();
    if (woken) {
      woken = false;
      return;
    }
    if (ms === undefined) await condition(() => woken);
    else await condition(() => woken, ms);
    woken = false;
    state.nextPollAt = undefined;
  };

  /** One provider Get, the state moved by its answer, then the wait that answer calls for. */
  const lookThenWait = async (): Promise<void> => {
    const seen = await provider.getInstance({
      provider: state.desired.provider ?? '',
      id: state.instanceId!,
    });
    const next = observe(state, seen);
    if (next !== 'now') await pause(timing[next]);
  };

  const maybeContinueAsNew = async (): Promise<void> => {
    const info = workflowInfo();
    if (!info.continueAsNewSuggested && info.historyLength < maxHistoryEvents) return;
    // Handlers only mutate state, but wait for any in flight so nothing is lost.
    await condition(allHandlersFinished);
    state.nextPollAt = undefined;
    await continueAsNew<typeof proxyWorkflow>({ ...input, desired: state.desired, carried: state });
  };

  for (;;) {
    await maybeContinueAsNew();
    if (state.desired.deletionRequested) {
      await runDeletion(state, timing, publish, pause, maybeContinueAsNew);
      return;
    }
    // Date.now() is workflow time here: deterministic on replay.
    const step = nextStep(state, rules, { nowMs: Date.now(), errorRetryMs: timing.errorRetryMs });
    switch (step.kind) {
      case 'wait-for-signal':
        await pause();
        break;
      case 'wait':
        await pause(timing[step.ms]);
        break;
      case 'create': {
        await publish();
        try {
          const created = await provider.createInstance({
            ref: state.ref,
            provider: state.desired.provider ?? '',
            placement: state.desired.placement,
            port: state.desired.port,
            cloudInit: state.desired.cloudInit,
          });
          state.instanceId = created.id;
          state.instanceSpecHash = created.specHash;
          state.instanceState = 'Provisioning';
          if (state.failure?.type !== FailureType.Permanent) state.failure = undefined;
        } catch (error) {
          if (failureOf(error).type === FailureType.ProxyGone) onProxyGone();
          await handleFailure(state, timing, error, pause);
        }
        break;
      }
      case 'delete': {
        if (!state.replacing) beginReplacement(state, 'spec-changed');
        await publish();
        try {
          await provider.deleteInstance({ provider: state.desired.provider ?? '', id: state.instanceId! });
          await lookThenWait();
        } catch (error) {
          await handleFailure(state, timing, error, pause);
        }
        break;
      }
      case 'get': {
        try {
          await lookThenWait();
        } catch (error) {
          await handleFailure(state, timing, error, pause);
        }
        break;
      }
    }
  }
}

async function handleFailure(
  state: ProxyState,
  timing: ProxyTiming,
  error: unknown,
  pause: (ms?: number) => Promise<void>,
): Promise<void> {
  const failure = failureOf(error);
  latch(state, failure.type, failure.message, new Date());
  switch (failure.type) {
    case FailureType.Permanent:
      log.warn('permanent provider error; latched until the spec changes', { message: failure.message });
      await pause();
      return;
    case FailureType.QuotaExceeded:
      await pause(timing.quotaRetryMs);
      return;
    case FailureType.ProviderNotConfigured:
    case FailureType.CloudInitError:
    case FailureType.ProxyGone:
      await pause(timing.errorRetryMs);
      return;
    default:
      await pause(timing.provisioningPollMs);
  }
}

/**
 * Deletion: delete, poll until the provider says NotFound, remove the
 * finalizer, complete. Never latches a permanent failure; skip-cleanup
 * (which may arrive while this loop runs) releases the Proxy without
 * provider calls.
 */
async function runDeletion(
  state: ProxyState,
  timing: ProxyTiming,
  publish: () => Promise<void>,
  pause: (ms?: number) => Promise<void>,
  maybeContinueAsNew: () => Promise<void>,
): Promise<void> {
  const providerName = state.desired.provider ?? '';
  if (
    state.desired.mode === 'Managed' &&
    !state.desired.skipCleanup &&
    !state.instanceId &&
    patched(FIND_INSTANCE_BEFORE_RELEASE)
  ) {
    // A run started after an operator terminated the one that created the
    // instance (or a create that succeeded at the provider but was never
    // recorded): without this the finalizer would go and the instance stay
    // until orphan GC's second sighting.
    try {
      const found = await provider.findInstanceByUid({ provider: providerName, uid: state.ref.uid });
      if (found.id) {
        log.info('found the instance of a Proxy being deleted by its UID mark', { id: found.id });
        state.instanceId = found.id;
      }
    } catch (error) {
      log.warn('could not look the instance up by UID; releasing, orphan GC collects any left behind', {
        message: failureOf(error).message,
      });
    }
  }
  while (state.desired.mode === 'Managed' && !state.desired.skipCleanup && state.instanceId) {
    await maybeContinueAsNew();
    await publish();
    const id = state.instanceId;
    try {
      const seen = await provider.getInstance({ provider: providerName, id });
      if (!seen.found) break;
      await provider.deleteInstance({ provider: providerName, id });
      await pause(timing.deletionPollMs);
    } catch (error) {
      const failure = failureOf(error);
      if (failure.type === FailureType.Permanent || failure.type === FailureType.ProviderNotConfigured) {
        // A permanent Get (malformed id, location gone): try Delete anyway
        // and release the finalizer if that works (the seed's rule).
        try {
          await provider.deleteInstance({ provider: providerName, id });
          log.warn('released a Proxy whose instance cannot be read', { id, message: failure.message });
          break;
        } catch (deleteError) {
          state.failure = {
            ...failureOf(deleteError),
            generation: state.desired.generation,
            at: new Date().toISOString(),
          };
          await pause(timing.errorRetryMs);
          continue;
        }
      }
      state.failure = { ...failure, generation: state.desired.generation, at: new Date().toISOString() };
      await pause(failure.type === FailureType.QuotaExceeded ? timing.quotaRetryMs : timing.deletionPollMs);
    }
  }
  if (state.desired.skipCleanup && state.instanceId) {
    log.warn('skip-cleanup: releasing the Proxy and leaving its instance to the administrator', {
      id: state.instanceId,
    });
  }
  if (state.desired.mode === 'Managed') await finalizer.removeProxyFinalizer({ ref: state.ref });
}
