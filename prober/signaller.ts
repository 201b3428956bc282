/**
 * Delivers health reports to Proxy workflows as `healthChanged` signals.
 *
 * Only the latest report per proxy is kept: a report that arrives while an
 * older one for the same proxy waits replaces it, so a Temporal outage
 * leaves at most one report per proxy behind, and on recovery each workflow
 * gets the verdict that is true now, not a backlog of stale ones. Failures
 * other than "no such workflow" pause all delivery with capped exponential
 * backoff (the server is down for everyone, so retrying each proxy on its
 * own would only hammer it); each call has its own deadline.
 *
 * A WorkflowNotFound means either that the Proxy is gone or that its
 * workflow is not running yet: the prober usually sees a new Proxy before
 * the bridge has started its workflow, and a run the bridge is healing is
 * briefly absent. `stillWanted` tells the two apart: while it says the
 * Proxy is there (same UID, same address), the report waits and is tried
 * again on its own short backoff (200 ms doubling to 5 s), so the first
 * verdict lands within seconds of the workflow starting; once the Proxy is
 * gone the report is dropped. Without `stillWanted` every WorkflowNotFound
 * drops the report. The prober's anti-entropy pass stays the backstop.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { proxyWorkflowId } from '../workflows/proxy/ids.js';
import { healthChangedSignal } from '../workflows/proxy/messages.js';
import { signalProxy } from '../workflows/proxy/client.js';
import type { HealthReport, ProxyRef } from '../workflows/proxy/types.js';
import { systemClock, type Clock, type TimerHandle } from './clock.js';
import type { HealthSignal } from './prober.js';

export interface HealthSignallerStats {
  /** Reports waiting (one per proxy at most). */
  pending: number;
  inFlight: number;
  delivered: number;
  /** WorkflowNotFound for a proxy that is gone (or any WorkflowNotFound without `stillWanted`). */
  dropped: number;
  /** Reports held for a proxy whose workflow is not running yet, each waiting for its next try. */
  waitingForWorkflow: number;
  /** WorkflowNotFound answers for a proxy still wanted: the report was kept and retried. */
  notFoundRetries: number;
  /** Replaced by a newer report for the same proxy before delivery. */
  superseded: number;
  /** Calls that failed and were put back. */
  failedAttempts: number;
}

export interface HealthSignaller {
  /** Never throws, never blocks: queues the report, replacing an older one for the same proxy. */
  readonly signal: HealthSignal;
  stats(): HealthSignallerStats;
  /** Stops retrying, waits for calls in flight; reports still pending are discarded. */
  stop(): Promise<void>;
}

export interface TemporalHealthSignallerOptions {
  logger?: Logger;
  /** Signals in flight at once (default 16). */
  concurrency?: number;
  /** Deadline of one signal call (default 10 s). */
  callTimeoutMs?: number;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  clock?: Clock;
  /**
   * Whether a report for `ref` is still worth delivering after a
   * WorkflowNotFound: the Proxy exists with this UID and this address.
   */
  stillWanted?: (ref: ProxyRef, report: HealthReport) => boolean;
  /** First wait after a WorkflowNotFound for a wanted proxy (default 200 ms); doubles per try. */
  notFoundInitialBackoffMs?: number;
  /** Longest wait between tries for a proxy whose workflow is not running (default 5 s). */
  notFoundMaxBackoffMs?: number;
}

interface Item {
  ref: ProxyRef;
  report: HealthReport;
  /** WorkflowNotFound answers so far for this proxy, carried to a newer report while it waits. */
  notFound: number;
}

interface Waiting {
  item: Item;
  timer: TimerHandle;
}

export function createTemporalHealthSignaller(
  client: Client,
  options: TemporalHealthSignallerOptions = {},
): HealthSignaller {
  const log = options.logger?.child({ component: 'health-signaller' });
  const clock = options.clock ?? systemClock;
  const concurrency = Math.max(1, options.concurrency ?? 16);
  const callTimeoutMs = options.callTimeoutMs ?? 10_000;
  const initialBackoffMs = options.initialBackoffMs ?? 500;
  const maxBackoffMs = options.maxBackoffMs ?? 30_000;
  const notFoundInitialMs = options.notFoundInitialBackoffMs ?? 200;
  const notFoundMaxMs = options.notFoundMaxBackoffMs ?? 5_000;

  const pending = new Map<string, Item>();
  /** Reports for proxies whose workflow was not running at the last try; at most one per proxy. */
  const waiting = new Map<string, Waiting>();
  const inFlight = new Map<string, Promise<void>>();
  const counts = { delivered: 0, dropped: 0, superseded: 0, failedAttempts: 0, notFoundRetries: 0 };
  let backoffMs = initialBackoffMs;
  let pausedUntil = 0;
  let resumeTimer: TimerHandle | undefined;
  let stopped = false;
  let outage = false;

  function enqueue(id: string, item: Item): void {
    const held = waiting.get(id);
    if (held) {
      // The workflow was not there a moment ago: the newer report takes the older one's turn.
      counts.superseded++;
      held.item = { ...item, notFound: held.item.notFound };
      return;
    }
    if (pending.has(id)) {
      counts.superseded++;
      pending.delete(id); // re-insert at the end: map order is delivery order
    }
    pending.set(id, item);
  }

  function wanted(item: Item): boolean {
    try {
      return options.stillWanted?.(item.ref, item.report) ?? false;
    } catch (error) {
      log?.error({ err: error instanceof Error ? error.message : String(error) }, 'stillWanted threw');
      return false;
    }
  }

  /** Holds the report until its next try; a newer report for the proxy replaces it meanwhile. */
  function waitForWorkflow(id: string, item: Item): void {
    const notFound = item.notFound + 1;
    const delay = Math.min(notFoundInitialMs * 2 ** (notFound - 1), notFoundMaxMs);
    const held: Waiting = {
      item: { ...item, notFound },
      timer: clock.setTimer(() => {
        if (waiting.get(id) !== held) return;
        waiting.delete(id);
        if (stopped) return;
        if (!wanted(held.item)) {
          counts.dropped++;
          return;
        }
        if (!pending.has(id)) pending.set(id, held.item);
        pump();
      }, delay),
    };
    waiting.set(id, held);
  }

  async function deliver(id: string, item: Item): Promise<void> {
    try {
      await client.withDeadline(clock.now() + callTimeoutMs, () =>
        signalProxy(client, { workflowId: id }, healthChangedSignal, item.report),
      );
      counts.delivered++;
      backoffMs = initialBackoffMs;
      if (outage) {
        outage = false;
        log?.info({ pending: pending.size }, 'Temporal reachable again; delivering the latest reports');
      }
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) {
        if (pending.has(id)) {
          counts.superseded++; // a newer report queued meanwhile gets its own try
          return;
        }
        if (!stopped && wanted(item)) {
          counts.notFoundRetries++;
          if (item.notFound === 0) log?.debug({ workflowId: id }, 'no workflow running yet; report held');
          waitForWorkflow(id, item);
          return;
        }
        counts.dropped++;
        log?.debug({ workflowId: id }, 'no workflow for this proxy; report dropped');
        return;
      }
      counts.failedAttempts++;
      // Put it back unless a newer report arrived meanwhile.
      if (!pending.has(id) && !stopped) pending.set(id, item);
      if (!outage) {
        outage = true;
        log?.warn(
          { err: error instanceof Error ? error.message : String(error), retryInMs: backoffMs },
          'health signal failed; pausing delivery',
        );
      }
      pausedUntil = clock.now() + backoffMs;
      backoffMs = Math.min(backoffMs * 2, maxBackoffMs);
    }
  }

  function pump(): void {
    if (stopped) return;
    const now = clock.now();
    if (now < pausedUntil) {
      if (resumeTimer === undefined) {
        resumeTimer = clock.setTimer(() => {
          resumeTimer = undefined;
          pump();
        }, pausedUntil - now);
      }
      return;
    }
    for (const [id, item] of pending) {
      if (inFlight.size >= concurrency) break;
      if (inFlight.has(id)) continue; // one call per workflow at a time keeps reports in order
      pending.delete(id);
      const p = deliver(id, item).finally(() => {
        inFlight.delete(id);
        pump();
      });
      inFlight.set(id, p);
    }
  }

  return {
    signal: (ref, report) => {
      if (stopped) return;
      enqueue(proxyWorkflowId(ref), { ref, report, notFound: 0 });
      pump();
    },
    stats: () => ({
      pending: pending.size,
      inFlight: inFlight.size,
      waitingForWorkflow: waiting.size,
      ...counts,
    }),
    async stop() {
      stopped = true;
      resumeTimer?.cancel();
      resumeTimer = undefined;
      for (const held of waiting.values()) held.timer.cancel();
      await Promise.allSettled([...inFlight.values()]);
      const discarded = pending.size + waiting.size;
      if (discarded > 0) log?.info({ discarded }, 'signaller stopped with reports pending');
      pending.clear();
      waiting.clear();
    },
  };
}
