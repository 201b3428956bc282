export { systemClock, type Clock, type Random, type TimerHandle } from './clock.js';
export { createProxyProbeTargets } from './kube-targets.js';
export {
  DEFAULT_LATENCY_POLICY,
  latencyWorthReporting,
  type LatencyPolicy,
  type ReportedLatency,
} from './latency.js';
export { registerProberMetrics, type ProberMetrics, type SignalKind } from './metrics.js';
export {
  DEFAULT_USER_AGENT,
  PROBE_FAILURE_REASONS,
  parseProbeURL,
  probeThroughProxy,
  type ProbeFailureReason,
  type ProbeRequest,
  type ProbeResult,
  type ProbeTls,
} from './probe.js';
export {
  createProber,
  type HealthSignal,
  type ProbeEvent,
  type Prober,
  type ProberOptions,
  type ProberStats,
} from './prober.js';
export { DueHeap, Scheduler, jitteredPeriod, nextDue, seededFirstDelay, PERIOD_JITTER } from './schedule.js';
export {
  createTemporalHealthSignaller,
  type HealthSignaller,
  type HealthSignallerStats,
  type TemporalHealthSignallerOptions,
} from './signaller.js';
export { followGatewayTraffic } from './traffic-follower.js';
export {
  createStaticProbeTargets,
  healthCheckSettings,
  proxyKey,
  targetFromProxy,
  withEntryHealth,
  type EntryHealth,
  type EntryHealthLookup,
  type HealthCheckSettings,
  type ProbeTarget,
  type ProbeTargetSource,
  type StaticProbeTargets,
} from './targets.js';
export { initialThresholdState, recordProbe, type ThresholdState, type Thresholds } from './thresholds.js';
