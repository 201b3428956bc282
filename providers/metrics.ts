/**
 * The contract's WithMetrics decorator: every provider `buildProviders`
 * makes is wrapped, so a provider counts nothing itself (contract: it MUST
 * NOT count its own requests). Counts each create/get/delete/listByTag call
 * by configured provider name, operation and result class, and times it.
 * Health checks bypass it, as in the seed (they have their own gauges).
 *
 * Labels are bounded: provider names come from the config, `op` and
 * `result` from fixed sets; never an instance ID or anything the call
 * carried (cloud-init text stays out of metrics by construction).
 */
import { Counter, Histogram, type Registry } from 'prom-client';
import { aroundEachCall } from './decorate.js';
import { classOf } from './errors.js';
import type { ErrorClass, Provider, ProviderOperation } from './types.js';

export type ProviderRequestResult = 'ok' | 'not_found' | 'quota_exceeded' | 'permanent' | 'transient';

const RESULT: Record<ErrorClass, ProviderRequestResult> = {
  NotFound: 'not_found',
  QuotaExceeded: 'quota_exceeded',
  Permanent: 'permanent',
  Transient: 'transient',
};

export interface ProviderRequestMetrics {
  observe(provider: string, op: ProviderOperation, result: ProviderRequestResult, seconds: number): void;
  /** One instance the backend interrupted (a Spot notice or an instance it ended), counted by its provider. */
  interrupted(provider: string): void;
}

export const PROVIDER_REQUESTS_TOTAL = 'proxy_operator_provider_requests_total';
export const PROVIDER_REQUEST_DURATION = 'egress_provider_request_duration_seconds';
export const PROVIDER_INTERRUPTIONS_TOTAL = 'egress_provider_interruptions_total';

/** The counter and histogram on `registry` (reused when already there: one set per process). */
export function registerProviderRequestMetrics(registry: Registry): ProviderRequestMetrics {
  const requests =
    (registry.getSingleMetric(PROVIDER_REQUESTS_TOTAL) as
      Counter<'provider' | 'op' | 'result'> | undefined) ??
    new Counter({
      name: PROVIDER_REQUESTS_TOTAL,
      help: 'Provider backend calls (create, get, delete, list) by configured provider, operation and result class',
      labelNames: ['provider', 'op', 'result'] as const,
      registers: [registry],
    });
  const duration =
    (registry.getSingleMetric(PROVIDER_REQUEST_DURATION) as Histogram<'provider' | 'op'> | undefined) ??
    new Histogram({
      name: PROVIDER_REQUEST_DURATION,
      help: 'Duration of provider backend calls by configured provider and operation',
      labelNames: ['provider', 'op'] as const,
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers: [registry],
    });
  const interruptions =
    (registry.getSingleMetric(PROVIDER_INTERRUPTIONS_TOTAL) as Counter<'provider'> | undefined) ??
    new Counter({
      name: PROVIDER_INTERRUPTIONS_TOTAL,
      help: 'Instances the backend interrupted (EC2 Spot: the notice, or the instance found ended by one), each counted once',
      labelNames: ['provider'] as const,
      registers: [registry],
    });
  return {
    observe(provider, op, result, seconds) {
      requests.inc({ provider, op, result });
      duration.observe({ provider, op }, seconds);
    },
    interrupted(provider) {
      interruptions.inc({ provider });
    },
  };
}

/** `provider` with every backend call counted; everything else (name, capabilities, check, close) as is. */
export function withMetrics(provider: Provider, metrics: ProviderRequestMetrics): Provider {
  return aroundEachCall(provider, async (op, call) => {
    const started = performance.now();
    let result: ProviderRequestResult = 'ok';
    try {
      return await call();
    } catch (error) {
      result = RESULT[classOf(error)];
      throw error;
    } finally {
      metrics.observe(provider.name, op, result, (performance.now() - started) / 1000);
    }
  });
}
