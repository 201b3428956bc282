/**
 * A tenant's `requestsPerSecond`: a token bucket per tenant, one second's
 * worth deep, in this process.
 */
import type { Tenant } from './tenants.js';

export interface TenantRates {
  /** Takes one request from the tenant's bucket; false when it is empty. */
  take(tenant: Tenant): boolean;
}

export function createTenantRates(now: () => number = () => performance.now()): TenantRates {
  const buckets = new Map<string, { tokens: number; at: number; rate: number }>();
  return {
    take(tenant) {
      const rate = tenant.limits.requestsPerSecond;
      if (rate === undefined) return true;
      const t = now();
      let b = buckets.get(tenant.name);
      if (!b || b.rate !== rate) buckets.set(tenant.name, (b = { tokens: Math.max(1, rate), at: t, rate }));
      b.tokens = Math.min(Math.max(1, rate), b.tokens + ((t - b.at) / 1000) * rate);
      b.at = t;
      if (b.tokens < 1) return false;
      b.tokens -= 1;
      return true;
    },
  };
}
