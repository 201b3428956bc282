/**
 * Gateway metrics on an injected registry, all named `egress_gateway_*`.
 * Per-proxy and per-target series are separate counters (not one counter
 * with both labels): their product would grow with proxies × sites.
 * Targets are crawler-chosen, so only the first `maxTargetLabels` distinct
 * ones get a label of their own; the rest are counted as `other`.
 *
 * Bytes are counted three ways: per Proxy (`egress_gateway_proxy_bytes_total`,
 * one series pair per proxy carried and still in the catalog: a Proxy gone
 * from it loses its series at the next scrape, so rotating sessions do not
 * grow the page without end), per target, and per
 * providers-config entry (`egress_gateway_provider_bytes_total{provider}`,
 * bounded by the entries in the config: what a vendor account costs, in one
 * series pair per account, whichever sessions came and went). External
 * Proxies have no entry: they count under `provider="_external"`, a value no
 * entry can have (an entry's name is a DNS label).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** What a connection is: a CONNECT tunnel or a plain-HTTP (absolute-form) request. */
export type ConnectionKind = 'connect' | 'http';

/** How a connection or request through the gateway ended, for `egress_gateway_requests_total`. */
export type GatewayOutcome =
  | 'ok'
  | 'bad_request'
  | 'unauthorized'
  | 'forbidden_target'
  | 'unresolved'
  | 'no_match'
  | 'unavailable'
  | 'upstream_failed'
  | 'client_closed'
  /** 429: too many wrong passwords from the address, not checked. */
  | 'throttled'
  /** 403: the tenant may not use the pool it named. */
  | 'forbidden'
  /** 429: over a tunnel cap or the tenant's requests per second. */
  | 'over_limit';

/** The limits that close or refuse a connection, for `egress_gateway_limit_trips_total`. */
export const GATEWAY_LIMITS = [
  'auth_failures',
  'tenant_tunnels',
  'client_tunnels',
  'requests_per_second',
  'tunnel_idle',
  'tunnel_lifetime',
  'response_timeout',
  'max_connections',
] as const;
export type GatewayLimit = (typeof GATEWAY_LIMITS)[number];

/** Why an upstream attempt failed. */
export const UPSTREAM_ERROR_REASONS = ['refused', 'timeout', 'rejected', 'reset', 'lease_lost'] as const;
export type UpstreamErrorReason = (typeof UPSTREAM_ERROR_REASONS)[number];

/** The `provider` label of External Proxies' bytes (not a DNS label, so no entry is named so). */
export const EXTERNAL_PROVIDER_LABEL = '_external';

export interface GatewayMetrics {
  connection(kind: ConnectionKind, proxy: string, target: string): void;
  /** `proxy`: its id (`namespace/name`) and its providers-config entry (none: External). */
  bytes(proxy: { id: string; provider?: string }, target: string, upstream: number, downstream: number): void;
  upstreamError(proxy: string, target: string, reason: UpstreamErrorReason): void;
  outcome(kind: ConnectionKind, outcome: GatewayOutcome): void;
  retry(): void;
  leaseWait(seconds: number): void;
  tunnelOpened(): void;
  tunnelClosed(): void;
  rateLimited(proxy: string, target: string): void;
  limitTripped(limit: GatewayLimit): void;
  /** A connection carried for a tenant (names bounded by the tenants file). */
  tenantConnection(tenant: string, kind: ConnectionKind): void;
}

export function registerGatewayMetrics(
  registry: Registry,
  options: {
    maxTargetLabels: number;
    sessions: () => number;
    /** The ids of the Proxies in the catalog; undefined until it has loaded (nothing is pruned then). */
    knownProxies?: () => ReadonlySet<string> | undefined;
  },
): GatewayMetrics {
  /** Proxies with per-proxy series. */
  const carried = new Set<string>();
  const pruneGone = (): void => {
    const known = options.knownProxies?.();
    if (!known) return;
    for (const proxy of carried) {
      if (known.has(proxy)) continue;
      carried.delete(proxy);
      for (const kind of ['connect', 'http'] as const) m.proxyConnections.remove({ proxy, kind });
      for (const direction of ['upstream', 'downstream'] as const) m.proxyBytes.remove({ proxy, direction });
      for (const reason of UPSTREAM_ERROR_REASONS) m.proxyErrors.remove({ proxy, reason });
    }
  };
  const m = instruments(registry, options.sessions, pruneGone);
  for (const kind of ['connect', 'http'] as const) m.requests.inc({ kind, outcome: 'ok' }, 0);
  // Every limit's series exists from the start, so rate() and alerts work before the first trip.
  for (const limit of GATEWAY_LIMITS) m.limits.inc({ limit }, 0);

  const labelled = new Set<string>();
  const targetLabel = (target: string): string => {
    if (labelled.has(target)) return target;
    if (labelled.size < options.maxTargetLabels) {
      labelled.add(target);
      return target;
    }
    return 'other';
  };

  return {
    connection(kind, proxy, target) {
      carried.add(proxy);
      m.proxyConnections.inc({ proxy, kind });
      m.targetConnections.inc({ target: targetLabel(target), kind });
    },
    bytes({ id: proxy, provider }, target, upstream, downstream) {
      const t = targetLabel(target);
      const entry = provider || EXTERNAL_PROVIDER_LABEL;
      carried.add(proxy);
      m.proxyBytes.inc({ proxy, direction: 'upstream' }, upstream);
      m.proxyBytes.inc({ proxy, direction: 'downstream' }, downstream);
      m.providerBytes.inc({ provider: entry, direction: 'upstream' }, upstream);
      m.providerBytes.inc({ provider: entry, direction: 'downstream' }, downstream);
      m.targetBytes.inc({ target: t, direction: 'upstream' }, upstream);
      m.targetBytes.inc({ target: t, direction: 'downstream' }, downstream);
    },
    upstreamError(proxy, target, reason) {
      carried.add(proxy);
      m.proxyErrors.inc({ proxy, reason });
      m.targetErrors.inc({ target: targetLabel(target), reason });
    },
    outcome: (kind, outcome) => m.requests.inc({ kind, outcome }),
    retry: () => m.retries.inc(),
    leaseWait: (seconds) => m.leaseWait.observe(seconds),
    tunnelOpened: () => m.active.inc(),
    tunnelClosed: () => m.active.dec(),
    rateLimited: (_proxy, target) => m.rateLimited.inc({ target: targetLabel(target) }),
    limitTripped: (limit) => m.limits.inc({ limit }),
    tenantConnection: (tenant, kind) => m.tenants.inc({ tenant, kind }),
  };
}

/** The gateway's series, registered on `registry`. */
function instruments(registry: Registry, sessions: () => number, pruneGone: () => void) {
  const reg = [registry];
  const proxyConnections = new Counter({
    name: 'egress_gateway_proxy_connections_total',
    help: 'Tunnels and plain-HTTP requests carried, by upstream proxy (namespace/name) and kind.',
    labelNames: ['proxy', 'kind'] as const,
    registers: reg,
    // Registered first and synchronous: it runs before the registry reads
    // this counter or the other per-proxy ones, so a scrape sees none of a
    // Proxy gone from the catalog.
    collect: pruneGone,
  });
  const targetConnections = new Counter({
    name: 'egress_gateway_target_connections_total',
    help: 'Tunnels and plain-HTTP requests carried, by target host and kind.',
    labelNames: ['target', 'kind'] as const,
    registers: reg,
  });
  const proxyBytes = new Counter({
    name: 'egress_gateway_proxy_bytes_total',
    help: 'Bytes relayed, by upstream proxy; direction upstream = from the crawler, downstream = to it.',
    labelNames: ['proxy', 'direction'] as const,
    registers: reg,
  });
  const providerBytes = new Counter({
    name: 'egress_gateway_provider_bytes_total',
    help: 'Bytes relayed, by providers-config entry of the upstream proxy (_external: External Proxies); direction as for the proxy counter.',
    labelNames: ['provider', 'direction'] as const,
    registers: reg,
  });
  const targetBytes = new Counter({
    name: 'egress_gateway_target_bytes_total',
    help: 'Bytes relayed, by target host; direction as for the proxy counter.',
    labelNames: ['target', 'direction'] as const,
    registers: reg,
  });
  const proxyErrors = new Counter({
    name: 'egress_gateway_proxy_errors_total',
    help: 'Failed upstream attempts, by upstream proxy and reason (refused, timeout, rejected, reset, lease_lost).',
    labelNames: ['proxy', 'reason'] as const,
    registers: reg,
  });
  const targetErrors = new Counter({
    name: 'egress_gateway_target_errors_total',
    help: 'Failed upstream attempts, by target host and reason.',
    labelNames: ['target', 'reason'] as const,
    registers: reg,
  });
  const rateLimited = new Counter({
    name: 'egress_gateway_rate_limited_total',
    help: 'Plain-HTTP answers with a rate-limit status, reported rate_limited for their target, by target.',
    labelNames: ['target'] as const,
    registers: reg,
  });
  const requests = new Counter({
    name: 'egress_gateway_requests_total',
    help: 'Connections (CONNECT) and requests (plain HTTP) received, by kind and outcome.',
    labelNames: ['kind', 'outcome'] as const,
    registers: reg,
  });
  const retries = new Counter({
    name: 'egress_gateway_upstream_retries_total',
    help: 'Upstream attempts after the first (another proxy tried after one refused or timed out).',
    registers: reg,
  });
  const leaseWait = new Histogram({
    name: 'egress_gateway_lease_wait_seconds',
    help: 'Time to obtain (or renew, for a session) the lease of a connection.',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: reg,
  });
  const active = new Gauge({
    name: 'egress_gateway_active_tunnels',
    help: 'Open CONNECT tunnels and plain-HTTP requests in flight.',
    registers: reg,
  });
  const limits = new Counter({
    name: 'egress_gateway_limit_trips_total',
    help: 'Connections refused or closed by a limit: auth_failures, tenant_tunnels, client_tunnels, requests_per_second, tunnel_idle, tunnel_lifetime, response_timeout, max_connections.',
    labelNames: ['limit'] as const,
    registers: reg,
  });
  const tenants = new Counter({
    name: 'egress_gateway_tenant_connections_total',
    help: 'Tunnels and plain-HTTP requests carried, by tenant and kind.',
    labelNames: ['tenant', 'kind'] as const,
    registers: reg,
  });
  new Gauge({
    name: 'egress_gateway_sessions',
    help: 'Sticky sessions whose lease is held.',
    registers: reg,
    collect() {
      this.set(sessions());
    },
  });
  return {
    proxyConnections,
    targetConnections,
    proxyBytes,
    providerBytes,
    targetBytes,
    proxyErrors,
    targetErrors,
    rateLimited,
    requests,
    retries,
    leaseWait,
    active,
    limits,
    tenants,
  };
}
