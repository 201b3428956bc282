/**
 * Kubernetes Events (events.k8s.io/v1) about Proxies, aggregated the way
 * client-go's events.EventRecorder does so a flapping proxy cannot flood
 * etcd: the first occurrence of (regarding, reason, action, type) creates an
 * Event; a repeat within `seriesWindowMs` of the last one only counts, in
 * memory, and the count reaches the Event as its `series` (at the second
 * occurrence, then at most once per `seriesFlushMs`). A key idle for the
 * window is forgotten, and its next occurrence is a new Event.
 *
 * Recording never throws and never blocks its caller on a failure: an Event
 * is worth less than the status write or provider call it accompanies.
 */
import { randomBytes } from 'node:crypto';
import { EventsV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import { API_VERSION } from '../resources/proxy-schema.js';

export type EventType = 'Normal' | 'Warning';

export interface ProxyEvent {
  type: EventType;
  /** UpperCamelCase, the reason of the condition the event is about. */
  reason: string;
  /** What was done or failed: Provision, Replace, Delete, HealthCheck. */
  action: string;
  /** Human-readable; cut to the API's 1 kB. Never secret material (see callers). */
  note: string;
}

export interface EventRegarding {
  namespace: string;
  name: string;
  uid: string;
  /** The object's kind (default Proxy). */
  kind?: 'Proxy' | 'ProxyPool';
}

export type EventOutcome = 'created' | 'series' | 'counted' | 'failed';

export interface EventRecorder {
  /** Records one occurrence. Resolves once the Event is written (or counted); never rejects. */
  record(regarding: EventRegarding, event: ProxyEvent): Promise<EventOutcome>;
  /** Writes every pending series count now (tests, shutdown). */
  flush(): Promise<void>;
  /** Stops the flush timer after a last flush. */
  close(): Promise<void>;
}

export interface EventRecorderOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** events.k8s.io reportingController: a qualified name. */
  reportingController?: string;
  /** events.k8s.io reportingInstance: this process (at most 128 characters). */
  reportingInstance: string;
  /** Repeats within this long of the last occurrence join its series (client-go: 6 min). */
  seriesWindowMs?: number;
  /** Pending series counts are written at most this often per Event. */
  seriesFlushMs?: number;
  /** egress_kube_events_total{type,outcome}. */
  counter?: Counter<'type' | 'outcome'>;
  now?: () => number;
}

export const REPORTING_CONTROLLER = 'crawl.example.com/egress-proxies';
const NOTE_MAX = 1024;

interface Series {
  namespace: string;
  eventName: string;
  count: number;
  /** The count the apiserver has. */
  written: number;
  lastObservedMs: number;
}

/** RFC 3339 with microseconds, what the events API's MicroTime fields take. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, '000Z');
}

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

export function createEventRecorder(options: EventRecorderOptions): EventRecorder {
  const api = options.kubeConfig.makeApiClient(EventsV1Api);
  const log = options.logger.child({ component: 'events' });
  const now = options.now ?? Date.now;
  const windowMs = options.seriesWindowMs ?? 6 * 60_000;
  const flushMs = options.seriesFlushMs ?? 60_000;
  const controller = options.reportingController ?? REPORTING_CONTROLLER;
  const instance = cut(options.reportingInstance, 128);
  const series = new Map<string, Series>();
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;

  const count = (type: EventType, outcome: EventOutcome) => options.counter?.inc({ type, outcome });

  async function writeSeries(s: Series): Promise<boolean> {
    const target = s.count;
    try {
      await api.patchNamespacedEvent(
        {
          namespace: s.namespace,
          name: s.eventName,
          body: { series: { count: target, lastObservedTime: microTime(s.lastObservedMs) } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      s.written = Math.max(s.written, target);
      return true;
    } catch (error) {
      // 404: the Event expired (its TTL) or was deleted; the next occurrence starts a new one.
      if ((error as { code?: number }).code === 404) s.written = s.count;
      log.warn(
        { event: `${s.namespace}/${s.eventName}`, err: String(error) },
        'could not update an event series',
      );
      return false;
    }
  }

  async function flushOnce(): Promise<void> {
    const at = now();
    for (const [key, s] of series) {
      if (s.count > s.written) await writeSeries(s);
      if (at - s.lastObservedMs >= windowMs) series.delete(key);
    }
    if (series.size === 0 && timer) {
      clearInterval(timer);
      timer = undefined;
    }
  }

  function flush(): Promise<void> {
    flushing ??= flushOnce().finally(() => (flushing = undefined));
    return flushing;
  }

  function ensureTimer(): void {
    if (timer) return;
    timer = setInterval(() => void flush(), flushMs);
    // Events must never keep a stopping process alive.
    timer.unref();
  }

  return {
    async record(regarding, event) {
      const at = now();
      const key = [regarding.uid, event.reason, event.action, event.type].join('\u0000');
      const existing = series.get(key);
      if (existing && at - existing.lastObservedMs < windowMs) {
        existing.count += 1;
        existing.lastObservedMs = at;
        // The second occurrence marks the Event as a series at once (client-go does the
        // same); later ones reach it with the next flush.
        if (existing.written === 1) {
          const ok = await writeSeries(existing);
          count(event.type, ok ? 'series' : 'failed');
          return ok ? 'series' : 'failed';
        }
        ensureTimer();
        count(event.type, 'counted');
        return 'counted';
      }
      // client-go's <name>.<hex time>, plus random digits: several workers may record at the same instant.
      const eventName = `${regarding.name.slice(0, 200)}.${at.toString(16)}${randomBytes(4).toString('hex')}`;
      try {
        await api.createNamespacedEvent({
          namespace: regarding.namespace,
          body: {
            apiVersion: 'events.k8s.io/v1',
            kind: 'Event',
            metadata: { name: eventName, namespace: regarding.namespace },
            // A string in MicroTime format; the client passes it through.
            eventTime: microTime(at) as unknown as Date,
            type: event.type,
            reason: cut(event.reason, 128),
            action: cut(event.action, 128),
            note: cut(event.note, NOTE_MAX),
            regarding: {
              apiVersion: API_VERSION,
              kind: regarding.kind ?? 'Proxy',
              namespace: regarding.namespace,
              name: regarding.name,
              uid: regarding.uid,
            },
            reportingController: controller,
            reportingInstance: instance,
          },
        });
      } catch (error) {
        log.warn(
          { proxy: `${regarding.namespace}/${regarding.name}`, reason: event.reason, err: String(error) },
          'could not record an event',
        );
        count(event.type, 'failed');
        return 'failed';
      }
      series.set(key, {
        namespace: regarding.namespace,
        eventName,
        count: 1,
        written: 1,
        lastObservedMs: at,
      });
      ensureTimer();
      count(event.type, 'created');
      return 'created';
    },
    flush,
    async close() {
      await flush();
      if (timer) clearInterval(timer);
      timer = undefined;
    },
  };
}
