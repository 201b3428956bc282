/**
 * A run's start: the worker's timing (one local activity, which may also
 * make a fresh Proxy's instance and write its first status), what the
 * Proxy's status recorded, and the state seeded from both. Until it
 * returns, signals only change the state; the loop starts after.
 */
import { log } from '@temporalio/workflow';
import type { ProxyTimingInput } from '../../activities/types.js';
import type { ProxyStatus } from '../../resources/proxy-schema.js';
import { failureOf, statusReader, workerConfig } from './activity-proxies.js';
import type { ProxyEntity } from './entity.js';
import { createInputOf, nextStep } from './steps.js';
import { applyCreated, applyHealth, resumeFromStatus } from './transitions.js';
import type { ProxyState, RecordedStatus, WorkerTiming } from './types.js';

/**
 * What the Proxy's status held when this run started, as far as it knows:
 * sent with each status write so its Events need no read.
 */
const startedFrom = (recorded: RecordedStatus | undefined): ProxyStatus | undefined =>
  recorded && { conditions: recorded.conditions ?? [] };

/**
 * The create the first local activity makes, and the status it writes.
 *
 * A fresh Proxy the bridge started with its (empty) recorded status has
 * its create as first step: a quick provider makes it in the same local
 * activity that brings the timing (only the worker knows which providers
 * are quick), and writes the status it leaves, built by this module's
 * rules from a copy of the state and pinned to the version the bridge
 * read (the run's own status write and its activation fewer). Worked out
 * on that copy: the run takes the recorded status after, as every run
 * does, once the timing is in.
 */
function createAtStart(entity: ProxyEntity): Pick<ProxyTimingInput, 'create' | 'report'> {
  const { input, state } = entity;
  if (!entity.fresh || input.recorded === undefined) return {};
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
}

/** Starts the run: returns the worker's timing, with the state seeded and any create at the start taken. */
export async function startRun(entity: ProxyEntity): Promise<WorkerTiming> {
  const { input, state } = entity;
  const resumesFromStatus = entity.fresh;

  // The starter sets ProxyPhase at the start; setting it again is a visibility write per Proxy.
  if (resumesFromStatus && input.indexedPhase !== undefined) state.indexedPhase ??= input.indexedPhase;

  // The bridge sends what the status recorded when it started the run;
  // other starters (and starts from before it did) leave it to be read, in
  // the same batch of local activities as the timing (one action).
  const atStart = createAtStart(entity);
  entity.createAtStartOut = atStart.create !== undefined;
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

  entity.knownStatus = resumesFromStatus
    ? startedFrom(recorded)
    : state.lastWrittenStatus === undefined
      ? undefined
      : (JSON.parse(state.lastWrittenStatus) as ProxyStatus);

  // Whatever signals came with it (a deletion, a new spec), the instance
  // exists now: the loop goes on from there as after any create.
  if (createdAtStart) {
    applyCreated(state, createdAtStart, Date.now(), timing);
    if (reported?.outcome === 'written') {
      // The run's own rules gave that status: taking its conditions (their
      // transition times) and counting it written, the run's first publish
      // finds nothing new to write unless a signal that came with the
      // timing changed something. Histories from before carry no report:
      // their runs write it themselves.
      state.conditions = reported.status.conditions ?? [];
      state.lastWrittenStatus = JSON.stringify(reported.status);
      entity.knownStatus = reported.status;
    } else if (reported?.outcome === 'gone') entity.proxyGone();
  }
  entity.createAtStartOut = false;
  if (entity.earlyHealth && applyHealth(state, entity.earlyHealth)) entity.woken = true;
  entity.earlyHealth = undefined;
  return timing;
}
