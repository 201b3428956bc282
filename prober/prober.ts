/**
 * The health prober: probes every target through its proxy on the target's
 * own jittered interval, folds results into the threshold state machine, and
 * tells the Proxy's workflow about verdict transitions only (plus the rare
 * latency update the suppression rule lets through). The workflow stays the
 * single writer of status; the prober never touches the apiserver.
 *
 * Life of a target:
 * - first sight: the verdict is seeded from the Proxy's Healthy condition
 *   (kept, counters zeroed); a seeded proxy's first probe lands anywhere in
 *   its interval, a never-probed one (condition Unknown) is probed at once;
 * - the same object at a new address (a replacement): a fresh Unknown state,
 *   probed at once; results of probes still running for the old address are
 *   discarded;
 * - gone, deleting or without an address: dropped with its metric series.
 *
 * Anti-entropy: a report can be lost (taken by a run that was then
 * terminated, the signaller stopped with a report pending, a status write
 * that failed). When the Proxy's condition still disagrees with the
 * prober's verdict `resyncFirstMs` (30 s) after the last report, the current
 * verdict is sent again, then after twice as long, up to `resyncAfterMs`
 * (5 min) between re-sends, so a disagreement that lasts (a status write
 * outage) costs one signal per proxy per 5 min at most. A workflow that is
 * not running yet is the signaller's to wait for (see signaller.ts).
 *
 * Passive health (issue 58): the gateway reports each proxy's traffic
 * (`observeTraffic`, a report a second per proxy carrying traffic). A proxy
 * whose traffic succeeded within the last interval counts as probed: when
 * its probe is due, a success is folded in and no probe is sent. Failures
 * that are the proxy's own (refused, no TCP connection, closed, 407) are
 * folded in as failed probes when they arrive, so real traffic failing
 * turns a proxy Unhealthy by the same thresholds; a success reported
 * after them ends the run, as a successful probe would. Traffic that
 * stops (or only fails) leaves the next due probe to go out as usual.
 *
 * Nothing a probe does can end a proxy's probe loop: a probe that throws
 * counts as a failed probe (reason ProberError, logged), a throwing metric or
 * `onProbe` hook is logged, and the next probe is always scheduled.
 */
import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { DEFAULT_HEALTH_CHECK } from '../resources/proxy-schema.js';
import type { HealthReport, HealthVerdict, ProxyRef } from '../workflows/proxy/types.js';
import { systemClock, type Clock, type Random } from './clock.js';
import {
  DEFAULT_LATENCY_POLICY,
  latencyWorthReporting,
  medianLatency,
  withLatencySample,
  type LatencyPolicy,
  type ReportedLatency,
} from './latency.js';
import { registerProberMetrics, type SignalKind } from './metrics.js';
import {
  parseProbeURL,
  probeThroughProxy,
  type ProbeRequest,
  type ProbeResult,
  type ProbeTls,
} from './probe.js';
import { Scheduler, nextDue, seededFirstDelay, type ScheduledRun } from './schedule.js';
import { sameHealthCheck, sameInstance, type ProbeTarget, type ProbeTargetSource } from './targets.js';
import { initialThresholdState, recordProbe, type ThresholdState } from './thresholds.js';
import { proxyAuthorization, type CredentialsLookup } from '../credentials/proxy-credentials.js';
import type { TrafficReport } from '../api/lease-store.js';

export type HealthSignal = (ref: ProxyRef, report: HealthReport) => void;

/** The shipped cap on probes running at once. */
export const DEFAULT_MAX_CONCURRENT_PROBES = 100;

export interface ProbeEvent {
  key: string;
  /** How late the probe started against its due time. */
  lagMs: number;
  result: ProbeResult;
}

export interface ProberOptions {
  targets: ProbeTargetSource;
  /** Delivers a report to the Proxy's workflow; must not throw or block (see createTemporalHealthSignaller). */
  signal: HealthSignal;
  logger: Logger;
  registry: Registry;
  clock?: Clock;
  random?: Random;
  /** Probes running at once, at most (default DEFAULT_MAX_CONCURRENT_PROBES, 100). */
  maxConcurrentProbes?: number;
  /** Extra trust for https probe URLs (a private CA). */
  tls?: ProbeTls;
  userAgent?: string;
  latencyPolicy?: LatencyPolicy;
  /** First re-send when the Proxy's condition still disagrees this long after the last report (default 30 s). */
  resyncFirstMs?: number;
  /** Longest wait between re-sends while the disagreement lasts (default 5 min). */
  resyncAfterMs?: number;
  /** Called after every probe whose result counted: diagnostics and benchmarks. */
  onProbe?: (event: ProbeEvent) => void;
  /** Runs one probe (default probeThroughProxy): unit tests replace the network. */
  probe?: (request: ProbeRequest) => Promise<ProbeResult>;
  /** Where targets' credentials are read (a cache of labelled Secrets); none: probes send none. */
  credentials?: CredentialsLookup;
}

export interface ProberStats {
  tracked: number;
  inFlight: number;
  probes: number;
  failures: number;
  /** Due probes not sent because the proxy's gateway traffic succeeded within the interval (each a success). */
  passiveSuccesses: number;
  /** Gateway traffic failures folded in as failed probes. */
  passiveFailures: number;
  /** Probes that missed a whole period because the prober was behind. */
  skippedPeriods: number;
  signals: Record<SignalKind, number>;
}

export interface Prober {
  /** Starts the target source (resolves after its first listing) and the schedule. */
  start(): Promise<void>;
  /** Stops scheduling, cancels running probes and waits for them, stops the target source. */
  stop(): Promise<void>;
  /** The prober's verdict for `namespace/name`, undefined when it does not track the proxy. */
  verdict(key: string): HealthVerdict | undefined;
  /** What a gateway saw of a proxy's traffic (passive health); never throws. */
  observeTraffic(report: TrafficReport): void;
  stats(): ProberStats;
}

interface Tracked {
  target: ProbeTarget;
  url: URL | undefined;
  threshold: ThresholdState;
  latency: ReportedLatency | undefined;
  /** The last few successful probes' latencies (ms), oldest first: the latency rule takes their median. */
  recentLatencies: number[];
  lastFailure: { reason: string; message: string } | undefined;
  /** The failure reason of the last Unhealthy report sent (undefined after a Healthy one, or none yet). */
  reportedReason: string | undefined;
  /** Clock time of the last report sent (or of seeding). */
  lastSignalAt: number;
  /** Wait before the next re-send while the condition disagrees: resyncFirstMs doubling to resyncAfterMs. */
  resyncDelayMs: number;
  running: boolean;
  /** Clock time of the last traffic report whose traffic succeeded (and did not fail after). */
  trafficOkAt: number | undefined;
}

const HEADER_SAFE = /^[\x20-\x7e]+$/;
const DEFAULT_INTERVAL_MS = DEFAULT_HEALTH_CHECK.intervalSeconds * 1000;

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function createProber(options: ProberOptions): Prober {
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const log = options.logger.child({ component: 'prober' });
  const latencyPolicy = options.latencyPolicy ?? DEFAULT_LATENCY_POLICY;
  const resyncAfterMs = options.resyncAfterMs ?? 300_000;
  const resyncFirstMs = Math.min(options.resyncFirstMs ?? 30_000, resyncAfterMs);
  const maxConcurrent = Math.max(1, options.maxConcurrentProbes ?? DEFAULT_MAX_CONCURRENT_PROBES);
  const probe = options.probe ?? probeThroughProxy;
  if (options.userAgent !== undefined && !HEADER_SAFE.test(options.userAgent)) {
    throw new Error('prober userAgent must be printable ASCII');
  }

  const tracked = new Map<string, Tracked>();
  const running = new Set<Promise<void>>();
  const abort = new AbortController();
  // Every running probe listens on this one signal.
  setMaxListeners(0, abort.signal);
  let stopped = false;
  let unsubscribe: (() => void) | undefined;
  const counts = {
    probes: 0,
    failures: 0,
    passiveSuccesses: 0,
    passiveFailures: 0,
    skippedPeriods: 0,
    signals: { transition: 0, latency: 0, resync: 0, reason: 0 },
  };

  const scheduler: Scheduler<string> = new Scheduler<string>({
    clock,
    maxConcurrent,
    run: (run) => {
      const p = probeOnce(run);
      running.add(p);
      return p.finally(() => running.delete(p));
    },
  });
  const metrics = registerProberMetrics(options.registry, {
    inFlight: () => scheduler.running,
    tracked: () => tracked.size,
  });

  function fresh(target: ProbeTarget, seed: HealthVerdict, now: number): Tracked {
    return {
      target,
      url: parseProbeURL(target.healthCheck.probeURL),
      threshold: initialThresholdState(seed),
      // A seeded Healthy verdict starts the latency rule from the status's value, rate-limited from now.
      latency: seed === 'Healthy' ? { millis: target.latencyMillis ?? 0, at: now } : undefined,
      recentLatencies: [],
      lastFailure: undefined,
      reportedReason: undefined,
      lastSignalAt: now,
      resyncDelayMs: resyncFirstMs,
      running: false,
      trafficOkAt: undefined,
    };
  }

  function onTargetChanged(key: string): void {
    if (stopped) return;
    const target = options.targets.get(key);
    const current = tracked.get(key);
    const now = clock.now();
    if (target === undefined) {
      if (current === undefined) return;
      tracked.delete(key);
      scheduler.unschedule(key);
      metrics.forget(key);
      log.debug({ proxy: key }, 'proxy left the prober');
      return;
    }
    const intervalMs = target.healthCheck.intervalSeconds * 1000;
    if (current === undefined) {
      const state = fresh(target, target.condition, now);
      tracked.set(key, state);
      metrics.track(key);
      scheduler.schedule(
        key,
        target.condition === 'Unknown' ? now : now + seededFirstDelay(intervalMs, random),
      );
      return;
    }
    if (!sameInstance(current.target, target)) {
      // A replacement (or the object recreated): nothing we knew applies.
      tracked.set(key, fresh(target, 'Unknown', now));
      scheduler.schedule(key, now);
      log.debug(
        { proxy: key, host: target.host, port: target.port },
        'proxy has a new address; verdict reset',
      );
      return;
    }
    const settingsChanged = !sameHealthCheck(current.target.healthCheck, target.healthCheck);
    current.target = target;
    if (settingsChanged) {
      current.url = parseProbeURL(target.healthCheck.probeURL);
      if (!current.running) scheduler.schedule(key, now + seededFirstDelay(intervalMs, random));
    }
  }

  function send(state: Tracked, kind: SignalKind, now: number, latencyMillis: number | undefined): void {
    const healthy = state.threshold.verdict === 'Healthy';
    const report: HealthReport = { ip: state.target.host, healthy, checkedAt: new Date(now).toISOString() };
    if (healthy && latencyMillis !== undefined) {
      report.latencyMillis = latencyMillis;
      state.latency = { millis: latencyMillis, at: now };
    }
    if (!healthy && state.lastFailure) {
      report.reason = state.lastFailure.reason;
      report.message = state.lastFailure.message;
    }
    state.reportedReason = healthy ? undefined : state.lastFailure?.reason;
    state.lastSignalAt = now;
    counts.signals[kind]++;
    metrics.signalled(kind);
    try {
      options.signal(state.target.ref, report);
    } catch (error) {
      log.error({ proxy: state.target.key, err: errorText(error) }, 'health signal threw');
    }
  }

  /** Runs `fn`, logging instead of throwing: for metrics and hooks, which must never stop a probe loop. */
  function guarded(proxy: string, what: string, fn: () => void): void {
    try {
      fn();
    } catch (error) {
      log.error({ proxy, err: error }, `${what} threw; ignored`);
    }
  }

  /** One probe of `state`'s target. Never rejects: anything thrown on the way is a failed ProberError result. */
  async function runProbe(key: string, state: Tracked): Promise<ProbeResult> {
    const started = performance.now();
    try {
      const hc = state.target.healthCheck;
      if (!state.url) {
        return {
          ok: false,
          durationMs: 0,
          reason: 'InvalidProbeURL',
          message: `probeURL ${JSON.stringify(hc.probeURL)} is not an http(s) URL`,
        };
      }
      const ref = state.target.credentialsRef;
      const read = ref && options.credentials?.(state.target.ref.namespace, ref);
      if (read && 'problem' in read) {
        return { ok: false, durationMs: 0, reason: 'CredentialsUnavailable', message: read.problem };
      }
      return await probe({
        ...(read ? { proxyAuthorization: proxyAuthorization(read.credentials) } : {}),
        proxyHost: state.target.host,
        proxyPort: state.target.port,
        url: state.url,
        timeoutMs: hc.timeoutSeconds * 1000,
        expectedStatusCodes: hc.expectedStatusCodes,
        signal: abort.signal,
        ...(options.tls ? { tls: options.tls } : {}),
        ...(options.userAgent ? { userAgent: options.userAgent } : {}),
      });
    } catch (error) {
      log.error(
        { proxy: key, host: state.target.host, err: error },
        'probe threw; counted as a failed probe',
      );
      return {
        ok: false,
        durationMs: performance.now() - started,
        reason: 'ProberError',
        message: `the prober failed while probing: ${errorText(error)}`,
      };
    }
  }

  /** Counts a probe's result, then folds it in. */
  function record(run: ScheduledRun<string>, state: Tracked, result: ProbeResult, now: number): void {
    counts.probes++;
    if (!result.ok) counts.failures++;
    guarded(run.key, 'probe metrics', () =>
      metrics.observeProbe(run.key, result.durationMs / 1000, result.ok),
    );
    guarded(run.key, 'onProbe', () => options.onProbe?.({ key: run.key, lagMs: run.lagMs, result }));
    fold(run.key, state, result, now, Math.round(result.durationMs));
  }

  /**
   * Folds a result into the thresholds and sends what the fold calls for.
   * `latencyMillis` is undefined for a result from gateway traffic, which
   * measured no probe: it adds no latency sample and reports none of its own.
   */
  function fold(
    key: string,
    state: Tracked,
    result: { ok: boolean; reason?: string | undefined; message?: string | undefined },
    now: number,
    latencyMillis: number | undefined,
  ): void {
    if (!result.ok) {
      state.lastFailure = {
        reason: result.reason ?? 'ProbeFailed',
        message: result.message ?? 'probe failed',
      };
    }
    // Settings may have changed while the probe ran: fold with the current ones.
    const settings = state.target.healthCheck;
    const folded = recordProbe(state.threshold, result.ok, settings);
    state.threshold = folded.state;
    const verdict = folded.state.verdict;
    // A verdict change starts the samples afresh: latencies from before an outage say nothing now.
    if (folded.changed) state.recentLatencies = [];
    if (result.ok && latencyMillis !== undefined)
      state.recentLatencies = withLatencySample(state.recentLatencies, latencyMillis);
    const typicalMillis = medianLatency(state.recentLatencies) ?? latencyMillis;
    if (folded.changed) {
      log.info(
        {
          proxy: key,
          host: state.target.host,
          verdict,
          reason: result.reason,
          message: result.message,
          ...(latencyMillis === undefined ? { from: 'gateway traffic' } : {}),
        },
        'health verdict changed',
      );
      send(state, 'transition', now, result.ok ? latencyMillis : undefined);
      state.resyncDelayMs = resyncFirstMs;
    } else if (
      result.ok &&
      typicalMillis !== undefined &&
      latencyWorthReporting({
        verdict,
        last: state.latency,
        latencyMillis: typicalMillis,
        now,
        policy: latencyPolicy,
      })
    ) {
      send(state, 'latency', now, typicalMillis);
    } else if (
      // Still Unhealthy, for another reason (refused credentials, then a missing Secret): the
      // condition should say the current one; at most once per resyncFirstMs, so reasons that
      // alternate (a timeout, then a refused connection) cost little.
      verdict === 'Unhealthy' &&
      !result.ok &&
      state.lastFailure?.reason !== state.reportedReason &&
      now - state.lastSignalAt >= resyncFirstMs
    ) {
      send(state, 'reason', now, undefined);
    } else if (verdict === 'Unknown' || state.target.condition === verdict) {
      state.resyncDelayMs = resyncFirstMs;
    } else if (now - state.lastSignalAt >= state.resyncDelayMs) {
      log.info(
        { proxy: key, verdict, condition: state.target.condition },
        'condition disagrees with the verdict; re-sending',
      );
      send(
        state,
        'resync',
        now,
        result.ok ? (typicalMillis ?? state.latency?.millis) : state.latency?.millis,
      );
      state.resyncDelayMs = Math.min(state.resyncDelayMs * 2, resyncAfterMs);
    }
  }

  /** The current interval; one that is not a positive number falls back to the default. */
  function intervalOf(key: string, state: Tracked): number {
    let intervalMs = DEFAULT_INTERVAL_MS;
    guarded(key, 'reading the interval', () => {
      const ms = state.target.healthCheck.intervalSeconds * 1000;
      if (Number.isFinite(ms) && ms > 0) intervalMs = ms;
    });
    return intervalMs;
  }

  /** The next probe, with the current settings. */
  function reschedule(run: ScheduledRun<string>, state: Tracked, now: number): void {
    const next = nextDue(run.due, now, intervalOf(run.key, state), random);
    if (next.skipped) counts.skippedPeriods++;
    scheduler.schedule(run.key, next.due);
  }

  async function probeOnce(run: ScheduledRun<string>): Promise<void> {
    const state = tracked.get(run.key);
    if (state === undefined || stopped) return;
    if (passedByTraffic(run, state)) return;
    state.running = true;
    guarded(run.key, 'lag metric', () => metrics.observeLag(run.lagMs / 1000));
    let result: ProbeResult;
    try {
      result = await runProbe(run.key, state);
    } finally {
      state.running = false;
    }
    // Dropped, replaced or stopping while the probe ran: the result belongs to nobody.
    if (stopped || tracked.get(run.key) !== state) return;

    const now = clock.now();
    try {
      record(run, state, result, now);
    } catch (error) {
      log.error({ proxy: run.key, err: error }, 'recording a probe result threw; the proxy stays scheduled');
    } finally {
      reschedule(run, state, now);
    }
  }

  /**
   * A due probe of a proxy whose gateway traffic succeeded within the last
   * interval: counted as a successful probe, none sent, the next one
   * scheduled. False when the probe is to go out.
   */
  function passedByTraffic(run: ScheduledRun<string>, state: Tracked): boolean {
    const now = clock.now();
    if (state.trafficOkAt === undefined || now - state.trafficOkAt > intervalOf(run.key, state)) return false;
    try {
      counts.passiveSuccesses++;
      guarded(run.key, 'traffic metrics', () => metrics.passive('ok'));
      fold(run.key, state, { ok: true }, now, undefined);
    } catch (error) {
      log.error(
        { proxy: run.key, err: error },
        'recording a traffic result threw; the proxy stays scheduled',
      );
    } finally {
      reschedule(run, state, now);
    }
    return true;
  }

  function observeTraffic(report: TrafficReport): void {
    if (stopped) return;
    const state = tracked.get(report.proxy);
    const target = state?.target;
    // Another instance (a replacement, a new address) or a proxy not probed here: not ours to count.
    if (
      !state ||
      !target ||
      target.ref.uid !== report.uid ||
      target.host !== report.host ||
      target.port !== report.port
    )
      return;
    const now = clock.now();
    try {
      if (report.ok > 0) {
        // The traffic's last word was a success: it counts as probed until an interval passes.
        if (report.failures === 0) state.trafficOkAt = now;
        // A success ends a run of failures, as a successful probe would.
        if (state.threshold.failures > 0) {
          counts.passiveSuccesses++;
          guarded(report.proxy, 'traffic metrics', () => metrics.passive('ok'));
          fold(report.proxy, state, { ok: true }, now, undefined);
        }
      }
      if (report.failures > 0) {
        state.trafficOkAt = undefined;
        // Past the threshold more failures change nothing: fold at most that many.
        const n = Math.min(report.failures, Math.max(1, target.healthCheck.failureThreshold));
        for (let i = 0; i < n; i++) {
          counts.passiveFailures++;
          guarded(report.proxy, 'traffic metrics', () => metrics.passive('failed'));
          fold(
            report.proxy,
            state,
            {
              ok: false,
              reason: report.reason ?? 'ConnectFailed',
              message: `gateway traffic: ${report.message ?? 'failed'}`,
            },
            now,
            undefined,
          );
        }
      }
    } catch (error) {
      log.error({ proxy: report.proxy, err: error }, 'recording a traffic report threw; ignored');
    }
  }

  return {
    observeTraffic,
    async start() {
      if (stopped) throw new Error('prober was stopped');
      unsubscribe = options.targets.subscribe(onTargetChanged);
      await options.targets.start();
      // Targets the source already held before we subscribed.
      for (const target of options.targets.list()) if (!tracked.has(target.key)) onTargetChanged(target.key);
      log.info({ proxies: tracked.size, maxConcurrent }, 'prober started');
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      unsubscribe?.();
      scheduler.stop();
      abort.abort();
      await Promise.allSettled([...running]);
      await options.targets.stop();
      for (const key of tracked.keys()) metrics.forget(key);
      tracked.clear();
    },
    verdict: (key) => tracked.get(key)?.threshold.verdict,
    stats: () => ({
      tracked: tracked.size,
      inFlight: scheduler.running,
      probes: counts.probes,
      failures: counts.failures,
      passiveSuccesses: counts.passiveSuccesses,
      passiveFailures: counts.passiveFailures,
      skippedPeriods: counts.skippedPeriods,
      signals: { ...counts.signals },
    }),
  };
}
