import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { NativeConnection, type WorkflowBundleOption } from '@temporalio/worker';
import { inject } from 'vitest';

const run = promisify(execFile);

/** The workflow bundle built once by the global setup. */
export function workflowBundle(): WorkflowBundleOption {
  return { codePath: inject('workflowBundlePath') };
}

export async function temporalClient(): Promise<{ client: Client; connection: Connection }> {
  const connection = await Connection.connect({ address: inject('temporalAddress') });
  return { client: new Client({ connection, namespace: inject('temporalNamespace') }), connection };
}

export async function workerConnection(): Promise<NativeConnection> {
  return NativeConnection.connect({ address: inject('temporalAddress') });
}

export function uniqueTaskQueue(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

/** Polls `fn` until it returns a value that is not undefined, or fails with the last seen value. */
export async function eventually<T>(
  what: string,
  fn: () => Promise<T | undefined>,
  { timeoutMs = 30_000, intervalMs = 100 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last instanceof Error ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A Temporal namespace of the caller's own on the shared dev server, for
 * tests that run a whole worker from the CLI: its Schedules have fixed IDs
 * (one set per namespace), so two such workers in one namespace take over
 * each other's Schedules, and one's drift sweep signals the other's Proxies.
 */
export async function freshTemporalNamespace(prefix: string): Promise<string> {
  const namespace = `${prefix}-${randomBytes(4).toString('hex')}`;
  const connection = await Connection.connect({ address: inject('temporalAddress') });
  try {
    await run(inject('temporalCli'), [
      'operator',
      'namespace',
      'create',
      '--namespace',
      namespace,
      '--address',
      inject('temporalAddress'),
    ]);
    await eventually(
      `Temporal namespace ${namespace}`,
      () => connection.workflowService.describeNamespace({ namespace }).then(() => true as const),
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  } finally {
    await connection.close();
  }
  return namespace;
}

/**
 * Records a history for the replay guard (tests/fixtures/histories) as
 * `<name>.binpb` when EP_RECORD_HISTORIES names a directory. `npm run
 * record:histories` runs every test file with a hook (replay.test.ts checks
 * the list); one file: `EP_RECORD_HISTORIES=$PWD/tests/fixtures/histories
 * npx vitest run --project integration <file>`.
 */
export function maybeRecord(name: string, history: temporal.api.history.v1.IHistory): void {
  const dir = process.env.EP_RECORD_HISTORIES;
  if (!dir) return;
  const bytes = temporal.api.history.v1.History.encode(history).finish();
  writeFileSync(
    fileURLToPath(new URL(`${name}.binpb`, new URL(dir.endsWith('/') ? dir : `${dir}/`, 'file:///'))),
    bytes,
  );
}

/** The `core_local_activity` marker of `e` when it records a local activity of this type. */
function localActivityMarker(
  e: temporal.api.history.v1.IHistoryEvent,
  type: string,
): temporal.api.history.v1.IMarkerRecordedEventAttributes | undefined {
  const marker = e.markerRecordedEventAttributes;
  if (marker?.markerName !== 'core_local_activity') return undefined;
  const data = marker.details?.data?.payloads?.[0]?.data;
  return data && Buffer.from(data).toString('utf8').includes(`"activity_type":"${type}"`)
    ? marker
    : undefined;
}

/** The results (JSON) of the local activities of this type in `events`, in order. */
export function localActivityResults(
  events: temporal.api.history.v1.IHistoryEvent[],
  type: string,
): unknown[] {
  return events.flatMap((e) => {
    const marker = localActivityMarker(e, type);
    if (!marker) return [];
    const result = marker.details?.result?.payloads?.[0]?.data;
    return [result ? (JSON.parse(Buffer.from(result).toString('utf8')) as unknown) : undefined];
  });
}

/**
 * Instance creates in `events`: createInstance calls (an activity, or a
 * local one), and the creates a quick provider made at a run's start, inside
 * its first local activity (proxyTiming's `created`).
 */
export function instanceCreates(events: temporal.api.history.v1.IHistoryEvent[]): number {
  const atStart = localActivityResults(events, 'proxyTiming').filter(
    (r) => (r as { created?: unknown } | undefined)?.created !== undefined,
  ).length;
  return activityCalls(events, 'createInstance') + atStart;
}

/**
 * How many calls of an activity type a history holds: scheduled activities
 * and local activities (a `core_local_activity` marker naming the type).
 * createInstance is either, by provider (ProviderCapabilities.quickCreate);
 * status writes are local.
 */
export function activityCalls(events: temporal.api.history.v1.IHistoryEvent[], type: string): number {
  return events.filter(
    (e) =>
      e.activityTaskScheduledEventAttributes?.activityType?.name === type ||
      localActivityMarker(e, type) !== undefined,
  ).length;
}
