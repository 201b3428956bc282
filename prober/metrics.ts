/**
 * The prober's metrics on an injected prom-client Registry. The two per-proxy
 * series observe every probe (status writes are transition-only, so this is
 * where true probe recency and every latency sample live) and are removed
 * when the proxy leaves the prober, so deleted proxies leave no series.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export type SignalKind = 'transition' | 'latency' | 'resync' | 'reason';

export interface ProberMetrics {
  /** A proxy joined the prober: its failure counter exists from now on (at 0). */
  track(proxy: string): void;
  observeProbe(proxy: string, seconds: number, ok: boolean): void;
  forget(proxy: string): void;
  observeLag(seconds: number): void;
  signalled(kind: SignalKind): void;
  /** A gateway traffic result folded in as a probe's (passive health). */
  passive(result: 'ok' | 'failed'): void;
}

export function registerProberMetrics(
  registry: Registry,
  sources: { inFlight: () => number; tracked: () => number },
): ProberMetrics {
  const duration = new Histogram({
    name: 'proxy_operator_healthcheck_duration_seconds',
    help: 'Duration of through-the-proxy health probes (every probe, failed ones included).',
    labelNames: ['proxy'] as const,
    registers: [registry],
  });
  const failures = new Counter({
    name: 'proxy_operator_healthcheck_failures_total',
    help: 'Failed through-the-proxy health probes.',
    labelNames: ['proxy'] as const,
    registers: [registry],
  });
  const lag = new Histogram({
    name: 'egress_prober_schedule_lag_seconds',
    help: 'How late probes start against their scheduled time (grows when the concurrency cap is reached).',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
    registers: [registry],
  });
  const signals = new Counter({
    name: 'egress_prober_signals_total',
    help: 'Health reports the prober sent to Proxy workflows, by kind.',
    labelNames: ['kind'] as const,
    registers: [registry],
  });
  for (const kind of ['transition', 'latency', 'resync', 'reason'] as const) signals.inc({ kind }, 0);
  const passive = new Counter({
    name: 'egress_prober_passive_results_total',
    help: 'Gateway traffic counted as probes (passive health): ok = a due probe not sent because traffic through the proxy succeeded, failed = a traffic failure of the proxy counted as a failed probe.',
    labelNames: ['result'] as const,
    registers: [registry],
  });
  for (const result of ['ok', 'failed'] as const) passive.inc({ result }, 0);
  new Gauge({
    name: 'egress_prober_probes_in_flight',
    help: 'Probes running now.',
    registers: [registry],
    collect() {
      this.set(sources.inFlight());
    },
  });
  new Gauge({
    name: 'egress_prober_proxies',
    help: 'Proxies the prober is probing.',
    registers: [registry],
    collect() {
      this.set(sources.tracked());
    },
  });

  return {
    track: (proxy) => failures.inc({ proxy }, 0),
    observeProbe(proxy, seconds, ok) {
      duration.observe({ proxy }, seconds);
      if (!ok) failures.inc({ proxy });
    },
    forget(proxy) {
      duration.remove({ proxy });
      failures.remove({ proxy });
    },
    observeLag: (seconds) => lag.observe(seconds),
    signalled: (kind) => signals.inc({ kind }),
    passive: (result) => passive.inc({ result }),
  };
}
