/**
 * When a latency change is worth a signal (pure). The seed's rule, with a
 * slower rate: only while the verdict is Healthy, only when the change from
 * the last reported latency exceeds max(20 ms, 50 % of it), and at most once
 * per `minIntervalMs` (the seed: a minute; here ten minutes by default). The
 * floor makes the rule defined at 0 ms and stops a proxy jittering 40↔61 ms
 * from signalling forever; the healthy-only guard stops a success streak
 * below the threshold from reporting latency for a proxy still Unhealthy.
 *
 * The latency compared and reported is the median of the proxy's last
 * `LATENCY_SAMPLES` successful probes, not the last probe alone: one slow
 * probe (a GC pause, a busy prober, a retransmit) says little about the
 * proxy, and on a busy machine nearly every proxy had one such probe per
 * ten minutes (the 10,000-proxy bench: 7,420 reports in 5 minutes, 17
 * billed actions per proxy-hour). A lasting change shows after three probes.
 *
 * Cost bound: each report is a signal plus a status write in the Proxy
 * workflow (2 billed Temporal actions), so a proxy whose latency jitters
 * past the threshold costs at most 6 reports, 12 actions, per hour; at the
 * seed's one-a-minute it would be 120, twenty times the whole steady state.
 */
import type { HealthVerdict } from '../workflows/proxy/types.js';

export interface LatencyPolicy {
  floorMs: number;
  /** Relative change, 0.5 = 50 % of the last reported latency. */
  ratio: number;
  minIntervalMs: number;
}

export const DEFAULT_LATENCY_POLICY: LatencyPolicy = { floorMs: 20, ratio: 0.5, minIntervalMs: 10 * 60_000 };

/** How many recent successful probes the median is taken over. */
export const LATENCY_SAMPLES = 5;

/** `samples` with `millis` appended, the oldest dropped past LATENCY_SAMPLES (a new array). */
export function withLatencySample(samples: readonly number[], millis: number): number[] {
  const next = [...samples, millis];
  return next.length > LATENCY_SAMPLES ? next.slice(next.length - LATENCY_SAMPLES) : next;
}

/** The median of the samples, rounded to whole milliseconds; undefined for none. */
export function medianLatency(samples: readonly number[]): number | undefined {
  if (samples.length === 0) return undefined;
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return Math.round(sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2);
}

export interface ReportedLatency {
  millis: number;
  /** Clock time (ms) of the report. */
  at: number;
}

export function latencyWorthReporting(args: {
  verdict: HealthVerdict;
  last: ReportedLatency | undefined;
  latencyMillis: number;
  now: number;
  policy?: LatencyPolicy;
}): boolean {
  const policy = args.policy ?? DEFAULT_LATENCY_POLICY;
  if (args.verdict !== 'Healthy') return false;
  const { last } = args;
  // Healthy with nothing reported: the transition that made it Healthy
  // carries a latency, so this only happens for a seeded verdict whose
  // status had none; report it (still rate-limited by the seed time).
  if (last === undefined) return true;
  if (args.now - last.at < policy.minIntervalMs) return false;
  const change = Math.abs(args.latencyMillis - last.millis);
  return change > Math.max(policy.floorMs, policy.ratio * last.millis);
}
