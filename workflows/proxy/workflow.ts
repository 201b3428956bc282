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
  CancellationScope,
  condition,
  continueAsNew,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type {
  CreateInstanceInput,
  CreateInstanceResult,
  KubeActivities,
  ProviderActivities,
  ProxyTimingInput,
  TimingActivities,
} from '../../activities/types.js';
import { FailureType } from './failure-types.js';
import { PROXY_ACTIVITY_OPTIONS } from './activity-options.js';
import {
  deletionRequestedSignal,
  driftDetectedSignal,
  healthChangedSignal,
  leasesDrainedSignal,
  specChangedSignal,
  stateQuery,
} from './messages.js';
import { ProxyPhaseKey } from './search-attributes.js';
import { deletionFailureAction, failureWait, scheduleLook } from './scheduling.js';
import { buildStatus, view } from './status.js';
import { deletionStep, nextStep } from './steps.js';
import {
  applyCreated,
  applyDeletion,
  applyDrift,
  applyHealth,
  applyLeasesDrained,
  applySpec,
  beginDrain,
  beginReplacement,
  drainDone,
  initialState,
  latch,
  needsDrain,
  observe,
  resumeFromStatus,
} from './transitions.js';
import type { ProxyStatus } from '../../resources/proxy-schema.js';
import type { HealthReport, ProxyState, ProxyWorkflowInput, RecordedStatus, WorkerTiming } from './types.js';

const provider = proxyActivities<ProviderActivities>(PROXY_ACTIVITY_OPTIONS.provider);
// A quick provider's create in the workflow task that decided on it: the
// create and the status write after it need no second workflow task.
const quickProvider = proxyLocalActivities<Pick<ProviderActivities, 'createInstance'>>(
  PROXY_ACTIVITY_OPTIONS.quickCreate,
);
// Status writes as local activities: they run in the worker that runs the
// workflow task, so a write costs no extra workflow task round trip (a
// provisioning takes 3 workflow tasks instead of 6). Safe because a write is
// short, idempotent and transition-only.
const kubeLocal = proxyLocalActivities<KubeActivities>(PROXY_ACTIVITY_OPTIONS.statusWrite);

// The recorded status, once per fresh run. A few quick attempts, then the
// run goes on without it (as runs did before): an apiserver that cannot be
// read must not hold up a create.
const statusReader = proxyLocalActivities<KubeActivities>(PROXY_ACTIVITY_OPTIONS.statusRead);

// The worker's timing, once per run: a local activity runs in the worker
// that runs this workflow task, so a changed --drift-sweep or --safety-poll
// reaches every Proxy at its next run without a bridge in the way.
const workerConfig = proxyLocalActivities<TimingActivities>(PROXY_ACTIVITY_OPTIONS.timing);

const finalizer = proxyActivities<KubeActivities>(PROXY_ACTIVITY_OPTIONS.finalizer);

/** One pending steady-state timer, kept across wake-ups that do not move its deadline. */
interface SteadyTimer {
  atMs: number;
  fired: boolean;
  scope: CancellationScope;
}

const DEFAULT_MAX_HISTORY_EVENTS = 4_000;

/**
 * Patch marker (issue 26): a deletion held up by a provider error shows the
 * error (Provisioned: DeletionBlocked) rather than "Deleting"; an error from
 * before the deletion is dropped when it begins, and one from the deletion
 * when a delete call succeeds again. Status content only, but a different
 * status means different status writes (local activities), hence the gate.
 */
const DELETION_SHOWS_ERROR = 'deletion-shows-error';

function failureOf(error: unknown): { type: string; message: string } {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  if (cause instanceof ApplicationFailure) {
    return { type: cause.type ?? FailureType.Transient, message: cause.message };
  }
  // Timeouts and anything else the SDK raises: retryable by nature.
  return { type: FailureType.Transient, message: cause instanceof Error ? cause.message : String(cause) };
}

function createInputOf(state: ProxyState): CreateInstanceInput {
  return {
    ref: state.ref,
    provider: state.desired.provider ?? '',
    placement: state.desired.placement,
    port: state.desired.port,
    cloudInit: state.desired.cloudInit,
  };
}

export async function proxyWorkflow(input: ProxyWorkflowInput): Promise<void> {
  const maxHistoryEvents = input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS;
  const state: ProxyState = input.carried ?? initialState(input);
  // A continued run carries its state; only a fresh one has anything to learn.
  const resumesFromStatus = input.carried === undefined;
  let woken = false;

  // The Proxy with this UID no longer exists (deleted while no bridge was
  // watching, or its finalizer was removed by hand): nobody will signal the
  // deletion, so the run cleans up and ends by itself.
  const onProxyGone = (): void => {
    if (applyDeletion(state, { skipCleanup: false })) {
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
  // A report that names an address this run does not know yet, kept while
  // the create at the start is out: its status (with the address) is
  // written inside that local activity, so a prober can read it and report
  // before the run has the result (a workflow task heartbeated while the
  // activity runs delivers signals). Applied once the create is taken.
  let earlyHealth: HealthReport | undefined;
  let createAtStartOut = false;
  setHandler(healthChangedSignal, (report) => {
    if (applyHealth(state, report)) woken = true;
    else if (createAtStartOut && state.instanceId === undefined) earlyHealth = report;
  });
  setHandler(driftDetectedSignal, (report) => {
    if (applyDrift(state, report)) woken = true;
  });
  setHandler(leasesDrainedSignal, (report) => {
    if (applyLeasesDrained(state, report)) woken = true;
  });
  setHandler(stateQuery, () => view(state));

  // The starter sets ProxyPhase at the start; setting it again is a visibility write per Proxy.
  if (resumesFromStatus && input.indexedPhase !== undefined) state.indexedPhase ??= input.indexedPhase;

  // What the Proxy's status held when this run started, as far as it knows:
  // sent with each status write so its Events need no read.
  const startedFrom = (recorded: RecordedStatus | undefined): ProxyStatus | undefined =>
    recorded && { conditions: recorded.conditions ?? [] };

  // The bridge sends what the status recorded when it started the run;
  // other starters (and starts from before it did) leave it to be read, in
  // the same batch of local activities as the timing (one action).
  // A fresh Proxy the bridge started with its (empty) recorded status has
  // its create as first step: a quick provider makes it in the same local
  // activity that brings the timing (only the worker knows which providers
  // are quick), and writes the status it leaves, built by this module's
  // rules from a copy of the state and pinned to the version the bridge
  // read (the run's own status write and its activation fewer). Worked out
  // on that copy: the run takes the recorded status below, as every run
  // does, once the timing is in.
  const atStart = ((): Pick<ProxyTimingInput, 'create' | 'report'> => {
    if (!resumesFromStatus || input.recorded === undefined) return {};
    const probe = JSON.parse(JSON.stringify(state)) as ProxyState;
    resumeFromStatus(probe, input.recorded);
    if (probe.desired.deletionRequested || nextStep(probe).kind !== 'create') return {};
    const create = createInputOf(probe);
    if (input.recordedVersion === undefined) return { create };
    const previous = startedFrom(input.recorded);
    return {
      create,
      report: { state: probe, resourceVersion: input.recordedVersion, ...(previous ? { previous } : {}) },
    };
  })();
  createAtStartOut = atStart.create !== undefined;
  // (Each promise made in a workflow costs a stack trace, source-mapped, for
  // the SDK's stack trace query: the common start awaits the one call alone.)
  const timingNow = () => workerConfig.proxyTiming({ provider: state.desired.provider ?? '', ...atStart });
  const [{ created: createdAtStart, reported, ...timing }, recorded] =
    !resumesFromStatus || input.recorded !== undefined
      ? [await timingNow(), resumesFromStatus ? input.recorded : undefined]
      : await Promise.all([
          timingNow(),
          statusReader.readRecordedStatus({ ref: state.ref }).catch((error: unknown) => {
            log.warn('could not read the recorded status; starting without it', {
              error: failureOf(error).message,
            });
            return undefined;
          }),
        ]);
  // A new run looks first: the deadline it carries was set under the last
  // run's timing, which its worker may have changed since.
  state.nextLookAtMs = undefined;
  if (recorded) resumeFromStatus(state, recorded);

  // What the Proxy's status holds as far as this run knows, sent with each
  // write so its Events need no read: what the run started from, then what
  // it wrote. Unknown (undefined) when the start could not be read.
  let knownStatus: ProxyStatus | undefined = resumesFromStatus
    ? startedFrom(recorded)
    : state.lastWrittenStatus === undefined
      ? undefined
      : (JSON.parse(state.lastWrittenStatus) as ProxyStatus);

  const applyCreatedNow = (created: CreateInstanceResult): void =>
    applyCreated(state, created, Date.now(), timing);
  // Whatever signals came with it (a deletion, a new spec), the instance
  // exists now: the loop goes on from there as after any create.
  if (createdAtStart) {
    applyCreatedNow(createdAtStart);
    if (reported?.outcome === 'written') {
      // The run's own rules gave that status: taking its conditions (their
      // transition times) and counting it written, the run's first publish
      // finds nothing new to write unless a signal that came with the
      // timing changed something. Histories from before carry no report:
      // their runs write it themselves.
      state.conditions = reported.status.conditions ?? [];
      state.lastWrittenStatus = JSON.stringify(reported.status);
      knownStatus = reported.status;
    } else if (reported?.outcome === 'gone') onProxyGone();
  }
  createAtStartOut = false;
  if (earlyHealth && applyHealth(state, earlyHealth)) woken = true;
  earlyHealth = undefined;

  const publish = async (): Promise<void> => {
    const status = buildStatus(state, new Date());
    const serialised = JSON.stringify(status);
    if (serialised !== state.lastWrittenStatus) {
      try {
        const outcome = await kubeLocal.writeProxyStatus({
          ref: state.ref,
          status,
          ...(knownStatus ? { previous: knownStatus } : {}),
        });
        state.lastWrittenStatus = serialised;
        knownStatus = status;
        if (outcome === 'gone') onProxyGone();
      } catch (error) {
        // It may have landed before it failed: the next write reads what is there.
        knownStatus = undefined;
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

  // Steady waits share one timer across wake-ups: a health signal that only
  // needs a status write leaves the timer running instead of cancelling it
  // and starting another (each started timer is a billed action).
  let steadyTimer: SteadyTimer | undefined;
  /** Publishes, then waits for a signal or until workflow time `atMs`. */
  const waitUntil = async (atMs: number): Promise<void> => {
    state.nextPollAt = new Date(atMs).toISOString();
    await publish();
    if (woken) {
      woken = false;
      return;
    }
    if (steadyTimer?.atMs !== atMs) {
      steadyTimer?.scope.cancel();
      const timer: SteadyTimer = { atMs, fired: false, scope: new CancellationScope() };
      // Cancelled when a later wait moves the deadline; nothing to do then.
      timer.scope
        .run(() => sleep(Math.max(atMs - Date.now(), 1)))
        .then(
          () => (timer.fired = true),
          () => undefined,
        );
      steadyTimer = timer;
    }
    const timer = steadyTimer;
    await condition(() => woken || timer.fired);
    woken = false;
    if (timer.fired) {
      steadyTimer = undefined;
      // The task that sees the timer fire may run a hair before atMs in
      // workflow time: the look is due now, whatever the clocks say.
      if (state.nextLookAtMs === atMs) state.nextLookAtMs = undefined;
    }
  };

  /** One provider Get, the state moved by its answer, and the next look scheduled by it. */
  const look = async (): Promise<void> => {
    const seen = await provider.getInstance({
      provider: state.desired.provider ?? '',
      id: state.instanceId!,
    });
    scheduleLook(state, observe(state, seen), Date.now(), timing);
  };

  const onFailure = async (error: unknown): Promise<void> => {
    const failure = failureOf(error);
    latch(state, failure.type, failure.message, new Date());
    const wait = failureWait(state, failure.type);
    if (failure.type === FailureType.Permanent) {
      log.warn('permanent provider error; latched until the spec changes', { message: failure.message });
    }
    if (wait === 'forever') await pause();
    else if (state.instanceId) scheduleLook(state, wait, Date.now(), timing);
    else await pause(timing[wait]);
  };

  const continueAsNewDue = (): boolean => {
    const info = workflowInfo();
    return info.continueAsNewSuggested || info.historyLength >= maxHistoryEvents;
  };
  const maybeContinueAsNew = async (): Promise<void> => {
    if (!continueAsNewDue()) return;
    // Handlers only mutate state, but wait for any in flight so nothing is lost.
    await condition(allHandlersFinished);
    state.nextPollAt = undefined;
    // What the start carried for a fresh run has served its purpose.
    const {
      recorded: _recorded,
      recordedVersion: _recordedVersion,
      indexedPhase: _indexedPhase,
      ...rest
    } = input;
    await continueAsNew<typeof proxyWorkflow>({ ...rest, desired: state.desired, carried: state });
  };

  for (;;) {
    // Checked before it is awaited: most turns of the loop continue nothing.
    if (continueAsNewDue()) await maybeContinueAsNew();
    if (state.desired.deletionRequested) {
      await runDeletion(state, timing, publish, pause, maybeContinueAsNew);
      return;
    }
    // Date.now() is workflow time here: deterministic on replay.
    const step = nextStep(state, { nowMs: Date.now(), errorRetryMs: timing.errorRetryMs });
    switch (step.kind) {
      case 'wait-for-signal':
        await pause();
        break;
      case 'wait':
        await pause(timing[step.ms]);
        break;
      case 'wait-until':
        await waitUntil(step.atMs);
        break;
      case 'drain': {
        // No new leases from the first status write on; the replacement
        // waits for the lease API's word that none is left, or the deadline.
        if (!state.drain) beginDrain(state, 'replacing', Date.now());
        if (!drainDone(state, Date.now())) await pause(Math.max(state.drain!.untilMs - Date.now(), 1));
        break;
      }
      case 'create': {
        // A quick create's outcome is written a moment later, in the same
        // workflow task: a status write before it would show nobody anything.
        const quick = timing.quickCreate === true;
        if (!quick) await publish();
        try {
          applyCreatedNow(await (quick ? quickProvider : provider).createInstance(createInputOf(state)));
        } catch (error) {
          if (failureOf(error).type === FailureType.ProxyGone) onProxyGone();
          await onFailure(error);
        }
        break;
      }
      case 'delete': {
        if (!state.replacing) beginReplacement(state, 'spec-changed');
        await publish();
        try {
          await provider.deleteInstance({ provider: state.desired.provider ?? '', id: state.instanceId! });
          await look();
        } catch (error) {
          await onFailure(error);
        }
        break;
      }
      case 'get': {
        try {
          await look();
        } catch (error) {
          await onFailure(error);
        }
        break;
      }
    }
  }
}

/**
 * Deletion: delete, poll until the provider says NotFound, remove the
 * finalizer, complete. Never latches a permanent failure; skip-cleanup
 * (which may arrive while this loop runs) releases the Proxy without
 * provider calls. The decisions are state.ts's; this only runs them.
 */
async function runDeletion(
  state: ProxyState,
  timing: WorkerTiming,
  publish: () => Promise<void>,
  pause: (ms?: number) => Promise<void>,
  maybeContinueAsNew: () => Promise<void>,
): Promise<void> {
  const providerName = state.desired.provider ?? '';
  if (!state.deletionShowsError && patched(DELETION_SHOWS_ERROR)) {
    state.deletionShowsError = true;
    // What failed before the deletion is not what holds it up.
    state.failure = undefined;
  }
  if (needsDrain(state)) {
    // The Proxy is deleting, so the lease API grants nothing new on it; the
    // leases held keep working until they end or the drain times out.
    beginDrain(state, 'deleting', Date.now());
    while (!drainDone(state, Date.now()) && !state.desired.skipCleanup) {
      await maybeContinueAsNew();
      await pause(Math.max(state.drain!.untilMs - Date.now(), 1));
    }
    state.drain = undefined;
  }
  if (deletionStep(state) === 'find-by-uid') {
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
  while (deletionStep(state) === 'look') {
    await maybeContinueAsNew();
    await publish();
    const id = state.instanceId!;
    try {
      const seen = await provider.getInstance({ provider: providerName, id });
      if (!seen.found) break;
      await provider.deleteInstance({ provider: providerName, id });
      // The provider answers again: nothing holds the deletion up any more.
      if (state.deletionShowsError) state.failure = undefined;
      await pause(timing.deletionPollMs);
    } catch (error) {
      const failure = failureOf(error);
      const action = deletionFailureAction(failure.type);
      if (action === 'delete-then-release') {
        try {
          await provider.deleteInstance({ provider: providerName, id });
          log.warn('released a Proxy whose instance cannot be read', { id, message: failure.message });
          break;
        } catch (deleteError) {
          const again = failureOf(deleteError);
          latch(state, again.type, again.message, new Date());
          await pause(timing.errorRetryMs);
          continue;
        }
      }
      latch(state, failure.type, failure.message, new Date());
      await pause(timing[action]);
    }
  }
  if (state.desired.skipCleanup && state.instanceId) {
    log.warn('skip-cleanup: releasing the Proxy and leaving its instance to the administrator', {
      id: state.instanceId,
    });
  }
  if (state.desired.mode === 'Managed') await finalizer.removeProxyFinalizer({ ref: state.ref });
}
