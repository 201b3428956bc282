/**
 * Caps on open connections (CONNECT tunnels and plain-HTTP requests in
 * flight): per tenant (its `limits.tunnels`) and per client address
 * (`--gateway-max-tunnels-per-client`). Over a cap the connection is
 * answered 429 at once; other tenants and addresses are not affected.
 */
import type { Tenant } from '../tenants/tenants.js';
import type { GatewayMetrics } from './metrics.js';
import { Refusal } from './refusal.js';

export interface ConnectionSlots {
  /** Takes a slot for the connection, or throws Refusal (429); the returned function gives it back (once). */
  take(tenant: Tenant, client: string): () => void;
  /** Open connections of this tenant (metrics, tests). */
  tenantCount(tenant: string): number;
}

export function createConnectionSlots(maxPerClient: number, metrics: GatewayMetrics): ConnectionSlots {
  const byTenant = new Map<string, number>();
  const byClient = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, n: number) => {
    const next = (map.get(key) ?? 0) + n;
    if (next <= 0) map.delete(key);
    else map.set(key, next);
  };
  return {
    take(tenant, client) {
      const tenantCap = tenant.limits.tunnels;
      if (tenantCap !== undefined && (byTenant.get(tenant.name) ?? 0) >= tenantCap) {
        metrics.limitTripped('tenant_tunnels');
        throw new Refusal(
          429,
          `tenant ${tenant.name} has ${tenantCap} connections open, its limit`,
          'over_limit',
          { 'Retry-After': '1' },
        );
      }
      if (maxPerClient > 0 && (byClient.get(client) ?? 0) >= maxPerClient) {
        metrics.limitTripped('client_tunnels');
        throw new Refusal(
          429,
          `this address has ${maxPerClient} connections open, the limit per client`,
          'over_limit',
          { 'Retry-After': '1' },
        );
      }
      add(byTenant, tenant.name, 1);
      add(byClient, client, 1);
      let given = false;
      return () => {
        if (given) return;
        given = true;
        add(byTenant, tenant.name, -1);
        add(byClient, client, -1);
      };
    },
    tenantCount: (name) => byTenant.get(name) ?? 0,
  };
}
