/**
 * What the dashboard's server sends its pages: the rows of each table, as
 * plain JSON. Shared by the server (dashboard/server/) and the browser code
 * (dashboard/client/), so neither may import anything of the other's world.
 */

/** One Proxy, as its row on the Proxies page. */
export interface ProxyRow {
  /** `namespace/name`. */
  id: string;
  namespace: string;
  name: string;
  /** spec.provider, or `external` for an External Proxy. */
  provider: string;
  /** Its ProxyPool's name, '' for a standalone Proxy. */
  pool: string;
  phase: string;
  /** `host:port` the prober and the leases go through; '' until known. */
  address: string;
  healthy: boolean;
  /** The Healthy condition's reason and message (why it is not healthy). */
  reason: string;
  message: string;
  latencyMillis: number;
  leases: number;
  maxLeases: number;
  /** Targets cooling down on it after rate_limited/banned reports; -1 when the lease store cannot say. */
  cooling: number;
  /** metadata.creationTimestamp (RFC 3339). */
  created: string;
  attributes: Record<string, string>;
  draining: boolean;
  cordoned: boolean;
  deleting: boolean;
  /** Its workflow in the Temporal Web UI; absent when no Web UI address is configured. */
  workflowUrl?: string;
}

export interface PoolHistoryPoint {
  /** Unix seconds. */
  t: number;
  desired: number;
  ready: number;
  leases: number;
}

export interface PoolRow {
  id: string;
  namespace: string;
  name: string;
  /** spec.replicas. */
  specReplicas: number;
  /** status.desiredReplicas (the autoscaler's choice when it autoscales), else spec.replicas. */
  desired: number;
  replicas: number;
  ready: number;
  updated: number;
  draining: number;
  /** The pool's members as the dashboard sees them: how many are Ready. */
  readyMembers: number;
  leases: number;
  /** status.costPerHour / costLastHour as the pool workflow wrote them (`0.2000 USD`, `unknown`); absent before. */
  costPerHour?: string;
  costLastHour?: string;
  autoscaling?: {
    min: number;
    max: number;
    activeLeases?: number;
    leaseCapacity?: number;
    utilizationPercent?: number;
    recommendation?: number;
    lastScaleTime?: string;
  };
  rotation?: {
    rotatedTotal?: number;
    lastRotated?: string;
    lastRotationReason?: string;
    nextRotationTime?: string;
  };
  /** Conditions that are not as they should be: `type: reason message`. */
  notes: string[];
  /** The last hour (bounded; empty after a restart of the api). */
  history: PoolHistoryPoint[];
}

export interface ProviderTargetRow {
  name: string;
  address: string;
  ready: boolean;
  reason: string;
  message: string;
  latencyMillis?: number;
  lastTransitionTime: string;
}

export interface ProviderRow {
  name: string;
  type: string;
  ready: boolean;
  reason: string;
  message: string;
  lastCheckTime: string;
  targets: ProviderTargetRow[];
}

export interface TrafficRow {
  /** A proxy's `namespace/name` or a target host. */
  key: string;
  connections: number;
  bytesPerSecond: number;
  bytesTotal: number;
  /** Failed upstream attempts by reason. */
  errors: Record<string, number>;
}

export interface GatewayView {
  /** False when no gateway runs in this process (its figures are on its own /metrics). */
  present: boolean;
  activeTunnels: number;
  /** Connections and requests received, by outcome. */
  requests: Record<string, number>;
  bytesPerSecond: number;
  proxies: TrafficRow[];
  /** The top targets by bytes per second; empty for a scoped tenant (targets are the whole fleet's). */
  targets: TrafficRow[];
}

/** What the fleet costs, from the api's cost metrics (issue 53); empty when no price is configured. */
export interface CostView {
  /** The providers config's `currency`; '' when none is set. */
  currency: string;
  providers: Array<{ provider: string; total: number; perHour: number; unknownProxies: number }>;
  /** The top tenants by bytes relayed (the gateway's), with what that traffic cost. */
  tenants: Array<{ tenant: string; bytes: number; cost: number }>;
}

/** Who is looking. */
export interface SessionInfo {
  tenant: string;
  role: 'operator' | 'crawler';
  /** May scale pools and cordon Proxies from the page. */
  canWrite: boolean;
  /** Sees only some pools or attributes. */
  scoped: boolean;
}

/** The server-sent events of `/ui/api/events`, by event name. */
export interface DashboardEvents {
  session: SessionInfo;
  /** `full`: replace everything held; else apply `upsert` and `remove`. */
  proxies: { full: boolean; upsert: ProxyRow[]; remove: string[] };
  pools: PoolRow[];
  providers: ProviderRow[];
  gateway: GatewayView;
  /** Unscoped tenants only: the fleet's money is not a scoped tenant's to see. */
  cost: CostView;
}
