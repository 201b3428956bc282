/**
 * Delivers health reports to Proxy workflows as `healthChanged` signals.
 *
 * Only the latest report per proxy is kept: a report that arrives while an
 * older one for the same proxy waits replaces it, so a Temporal outage
 * leaves at most one report per proxy behind, and on recovery each workflow
 * gets the verdict that is true now, not a backlog of stale ones. Failures
 * other than "no such workflow" pause all delivery with capped exponential
 * backoff (the server is down for everyone, so retrying each proxy on its
 * own would only hammer it); each call has its own deadline. A
 * WorkflowNotFound (the proxy was deleted, or its workflow is not started
 * yet) drops the report: the prober's anti-entropy re-sends a verdict the
 * Proxy's condition still disagrees with.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { healthChangedSignal } from '../../workflows/proxy/messages.js';
import type { HealthReport, ProxyRef } from '../../workflows/proxy/types.js';
import { systemClock, type Clock, type TimerHandle } from './clock.js';
import type { HealthSignal } from './prober.js';

export interface HealthSignallerStats {
  /** Reports waiting (one per proxy at most). */
  pending: number;
  inFlight: number;
  delivered: number;
  /** WorkflowNotFound. */
  dropped: number;
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
}

interface Item {
  ref: ProxyRef;
  report: HealthReport;
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

  const pending = new Map<string, Item>();
  const inFlight = new Map<string, Promise<void>>();
  const counts = { delivered: 0, dropped: 0, superseded: 0, failedAttempts: 0 };
  let backoffMs = initialBackoffMs;
  let pausedUntil = 0;
  let resumeTimer: TimerHandle | undefined;
  let stopped = false;
  let outage = false;

  function enqueue(id: string, item: Item): void {
    if (pending.has(id)) {
      counts.superseded++;
      pending.delete(id); // re-insert at the end: map order is delivery order
    }
    pending.set(id, item);
  }

  async function deliver(id: string, item: Item): Promise<void> {
    try {
      await client.withDeadline(clock.now() + callTimeoutMs, () =>
        client.workflow.getHandle(id).signal(healthChangedSignal, item.report),
      );
      counts.delivered++;
      backoffMs = initialBackoffMs;
      if (outage) {
        outage = false;
        log?.info({ pending: pending.size }, 'Temporal reachable again; delivering the latest reports');
      }
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) {
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
      enqueue(proxyWorkflowId(ref), { ref, report });
      pump();
    },
    stats: () => ({ pending: pending.size, inFlight: inFlight.size, ...counts }),
    async stop() {
      stopped = true;
      resumeTimer?.cancel();
      resumeTimer = undefined;
      await Promise.allSettled([...inFlight.values()]);
      if (pending.size > 0) log?.info({ discarded: pending.size }, 'signaller stopped with reports pending');
      pending.clear();
    },
  };
}
