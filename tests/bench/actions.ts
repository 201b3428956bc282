/**
 * Billable Temporal actions counted from real workflow histories: what the
 * cost bench (tests/bench/cost.ts) and the scale bench (tests/bench/scale.ts)
 * both count, in one place so their figures mean the same thing. See
 * cost.ts's header for what counts as an action.
 */
import type { temporal } from '@temporalio/proto';

export type Event = temporal.api.history.v1.IHistoryEvent;
export const SCHEDULED_TYPES = new Set(['driftSweepWorkflow', 'providerChecksWorkflow', 'orphanGcWorkflow']);
export type Source =
  'proxy:timer-driven' | 'proxy:signals' | 'proxy:other' | 'drift sweep' | 'provider checks' | 'orphan gc';
export const SOURCE_OF: Record<string, Source> = {
  driftSweepWorkflow: 'drift sweep',
  providerChecksWorkflow: 'provider checks',
  orphanGcWorkflow: 'orphan gc',
};

export const millis = (e: Event) =>
  Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor((e.eventTime?.nanos ?? 0) / 1e6);

/**
 * Billable actions of one history inside [from, to), by kind. A Proxy
 * workflow's actions are split by what woke it: a fired timer (the safety
 * poll), a signal (health, drift, spec), or other (start, continue-as-new).
 */
/** Signals inside the window by what they said; health reports split into verdict changes and the rest. */
export type SignalKind =
  | 'health: verdict changed'
  | 'health: same verdict (latency, resync)'
  | 'driftDetected'
  | 'specChanged'
  | 'deletionRequested';

export function healthyOf(e: Event): boolean | undefined {
  const data = e.workflowExecutionSignaledEventAttributes?.input?.payloads?.[0]?.data;
  if (!data) return undefined;
  try {
    return (JSON.parse(Buffer.from(data).toString('utf8')) as { healthy?: boolean }).healthy;
  } catch {
    return undefined;
  }
}

/** What a billable action was, whatever woke the workflow. */
export type Kind =
  | 'workflow start / continue-as-new'
  | 'schedule-started workflow'
  | 'activity (attempts)'
  | 'local-activity batch'
  | 'timer'
  | 'signal'
  | 'search-attribute upsert'
  | 'child workflow'
  | 'external signal';
export const KIND_ORDER: Kind[] = [
  'workflow start / continue-as-new',
  'schedule-started workflow',
  'activity (attempts)',
  'local-activity batch',
  'timer',
  'signal',
  'search-attribute upsert',
  'child workflow',
  'external signal',
];

export function countActions(
  type: string,
  events: Event[],
  from: number,
  to: number,
  signals?: Map<SignalKind, number>,
  kinds?: Map<Kind, number>,
): Map<Source, number> {
  const out = new Map<Source, number>();
  let lastHealthy: boolean | undefined;
  const attempts = new Map<string, number>();
  for (const e of events) {
    const started = e.activityTaskStartedEventAttributes;
    if (started) attempts.set(String(started.scheduledEventId), started.attempt ?? 1);
  }
  let wokenBy: Source = 'proxy:other';
  let batchedTask: string | undefined;
  const add = (n: number, kind: Kind) => {
    const source = type === 'proxyWorkflow' ? wokenBy : (SOURCE_OF[type] ?? 'proxy:other');
    out.set(source, (out.get(source) ?? 0) + n);
    kinds?.set(kind, (kinds.get(kind) ?? 0) + n);
  };
  let lastTaskCompleted = '';
  for (const e of events) {
    if (e.timerFiredEventAttributes) wokenBy = 'proxy:timer-driven';
    if (e.workflowExecutionSignaledEventAttributes) wokenBy = 'proxy:signals';
    if (e.workflowExecutionStartedEventAttributes) wokenBy = 'proxy:other';
    if (e.workflowTaskCompletedEventAttributes) lastTaskCompleted = String(e.eventId);
    const t = millis(e);
    const signal = e.workflowExecutionSignaledEventAttributes?.signalName;
    let kind: SignalKind | undefined;
    if (signal === 'healthChanged') {
      const healthy = healthyOf(e);
      kind = healthy === lastHealthy ? 'health: same verdict (latency, resync)' : 'health: verdict changed';
      lastHealthy = healthy;
    } else if (signal === 'driftDetected' || signal === 'specChanged' || signal === 'deletionRequested') {
      kind = signal;
    }
    if (t < from || t >= to) continue;
    if (kind && signals) signals.set(kind, (signals.get(kind) ?? 0) + 1);
    if (e.workflowExecutionStartedEventAttributes) {
      if (SCHEDULED_TYPES.has(type)) add(3, 'schedule-started workflow');
      else add(1, 'workflow start / continue-as-new');
    } else if (e.activityTaskScheduledEventAttributes)
      add(attempts.get(String(e.eventId)) ?? 1, 'activity (attempts)');
    else if (e.timerStartedEventAttributes) add(1, 'timer');
    else if (e.workflowExecutionSignaledEventAttributes) add(1, 'signal');
    else if (e.upsertWorkflowSearchAttributesEventAttributes) add(1, 'search-attribute upsert');
    else if (e.startChildWorkflowExecutionInitiatedEventAttributes) add(1, 'child workflow');
    else if (e.signalExternalWorkflowExecutionInitiatedEventAttributes) add(1, 'external signal');
    else if (e.markerRecordedEventAttributes?.markerName === 'core_local_activity') {
      if (batchedTask !== lastTaskCompleted) add(1, 'local-activity batch');
      batchedTask = lastTaskCompleted;
    }
  }
  return out;
}

/** The part of a Temporal client the counting below reads histories with. */
interface HistoryClient {
  workflow: {
    getHandle(
      workflowId: string,
      runId?: string,
    ): { fetchHistory(): Promise<temporal.api.history.v1.IHistory> };
    list(options: { query: string }): AsyncIterable<{ workflowId: string; runId: string; type: string }>;
  };
}

/** Billable actions inside [from, to) in the latest run of each Proxy workflow ID given. */
export async function proxyWorkflowActions(
  client: HistoryClient,
  workflowIds: readonly string[],
  from: number,
  to: number,
): Promise<number> {
  let actions = 0;
  for (const id of workflowIds) {
    const events = ((await client.workflow.getHandle(id).fetchHistory()).events ?? []) as Event[];
    for (const v of countActions('proxyWorkflow', events, from, to).values()) actions += v;
  }
  return actions;
}

/** Billable actions inside [from, to) in the Schedules' workflows (drift sweep, provider checks, orphan GC). */
export async function scheduleWorkflowActions(
  client: HistoryClient,
  from: number,
  to: number,
): Promise<number> {
  let actions = 0;
  // A run started before the window may still act in it; none outlives 15 minutes.
  const since = new Date(from - 15 * 60_000).toISOString();
  for await (const w of client.workflow.list({
    query: `WorkflowType IN (${[...SCHEDULED_TYPES].map((t) => `'${t}'`).join(', ')}) AND StartTime > '${since}'`,
  })) {
    const events = ((await client.workflow.getHandle(w.workflowId, w.runId).fetchHistory()).events ??
      []) as Event[];
    for (const v of countActions(w.type, events, from, to).values()) actions += v;
  }
  return actions;
}
