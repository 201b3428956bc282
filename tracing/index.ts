/**
 * Starts tracing from validated config, or does nothing: with no OTLP
 * endpoint the OpenTelemetry packages are never imported (a worker's memory
 * and the lease API's per-request cost stay as they were).
 */
import type { ClientPlugin } from '@temporalio/client';
import type { WorkerPlugin } from '@temporalio/worker';
import type { TraceHook } from './http.js';
import type { TracingConfig } from './config.js';

export { readTracingConfig, TracingConfigError, type TracingConfig } from './config.js';
export { activeTraceIds, providerCall, resultOf, tracingOn, withSpan } from './seam.js';

export interface Tracing {
  /** Temporal's OpenTelemetry plugin (client, workflow and activity spans); empty when off. */
  temporalPlugins: Array<ClientPlugin & WorkerPlugin>;
  /** The lease API's server span; undefined when off. */
  traceHook?: TraceHook;
  /** Where spans go, for the start-up line. */
  describe(): string;
  /** Flushes spans still buffered; then tracing is off. */
  shutdown(): Promise<void>;
}

export const TRACING_OFF: Tracing = {
  temporalPlugins: [],
  describe: () => 'off',
  shutdown: () => Promise.resolve(),
};

export async function startTracing(config: TracingConfig | undefined, version: string): Promise<Tracing> {
  if (config === undefined) return TRACING_OFF;
  const { startOpenTelemetry } = await import('./otel.js');
  return startOpenTelemetry(config, version);
}
