/**
 * The dashboard's rows, derived from the objects the api already holds
 * (its informers' caches): pure functions of their inputs.
 */
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import {
  DEFAULT_MAX_LEASES,
  DEFAULT_PORT,
  type Condition,
  type ProviderHealth,
  type Proxy,
  type ProxyPool,
} from '../../resources/proxy-schema.js';
import { proxyViewFromResource } from '../../api/proxy-catalog.js';
import type { PoolHistoryPoint, PoolRow, ProviderRow, ProxyRow } from '../protocol.js';

/** Where a workflow is shown: the Temporal Web UI's base URL and the namespace the workflows run in. */
export interface TemporalUiLink {
  url: string;
  namespace: string;
}

export function workflowLink(ui: TemporalUiLink, workflowId: string): string {
  const base = ui.url.replace(/\/+$/, '');
  return `${base}/namespaces/${encodeURIComponent(ui.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

/** A Proxy's row, without the lease figures (the lease store's, filled in by the caller). */
export function proxyRow(proxy: Proxy, ui: TemporalUiLink | undefined): ProxyRow {
  const view = proxyViewFromResource(proxy);
  const { metadata } = proxy;
  const namespace = metadata.namespace ?? '';
  const healthy = condition(proxy.status?.conditions, 'Healthy');
  const port = view.port || DEFAULT_PORT;
  return {
    id: view.id,
    namespace,
    name: metadata.name,
    provider: proxy.spec.mode === 'External' ? 'external' : (proxy.spec.provider ?? ''),
    pool: view.pool,
    phase: view.phase,
    address:
      view.host === '' ? '' : view.host.includes(':') ? `[${view.host}]:${port}` : `${view.host}:${port}`,
    healthy: view.healthy,
    reason: healthy?.reason ?? '',
    message: healthy?.message ?? proxy.status?.message ?? '',
    latencyMillis: view.latencyMillis,
    leases: 0,
    maxLeases: view.maxLeases ?? DEFAULT_MAX_LEASES,
    cooling: -1,
    created: stringTime(metadata.creationTimestamp),
    attributes: { ...view.attributes },
    draining: view.draining,
    cordoned: view.cordoned,
    deleting: view.deleting,
    ...(ui && metadata.uid
      ? {
          workflowUrl: workflowLink(
            ui,
            proxyWorkflowId({ namespace, name: metadata.name, uid: metadata.uid }),
          ),
        }
      : {}),
  };
}

/** A pool's row; `members` are the rows of its Proxies, `history` its kept samples. */
export function poolRow(
  pool: ProxyPool,
  members: readonly ProxyRow[],
  history: readonly PoolHistoryPoint[],
): PoolRow {
  const spec = pool.spec;
  const status = pool.status ?? {};
  const specReplicas = spec.replicas ?? 1;
  const auto = spec.autoscaling;
  const notes = (status.conditions ?? [])
    .filter((c) => !conditionAsWanted(c))
    .map((c) => `${c.type}: ${c.reason}${c.message ? ` ${c.message}` : ''}`);
  return {
    id: `${pool.metadata.namespace ?? ''}/${pool.metadata.name}`,
    namespace: pool.metadata.namespace ?? '',
    name: pool.metadata.name,
    specReplicas,
    desired: status.desiredReplicas ?? specReplicas,
    replicas: status.replicas ?? 0,
    ready: status.readyReplicas ?? 0,
    updated: status.updatedReplicas ?? 0,
    draining: status.drainingReplicas ?? 0,
    readyMembers: members.filter((m) => m.phase === 'Ready' && !m.deleting).length,
    leases: members.reduce((sum, m) => sum + m.leases, 0),
    ...(status.costPerHour !== undefined ? { costPerHour: status.costPerHour } : {}),
    ...(status.costLastHour !== undefined ? { costLastHour: status.costLastHour } : {}),
    ...(auto
      ? {
          autoscaling: {
            min: auto.minReplicas ?? 1,
            max: auto.maxReplicas,
            ...definedOnly({
              activeLeases: status.autoscaling?.activeLeases,
              leaseCapacity: status.autoscaling?.leaseCapacity,
              utilizationPercent: status.autoscaling?.utilizationPercent,
              recommendation: status.autoscaling?.recommendation,
              lastScaleTime: status.autoscaling?.lastScaleTime,
            }),
          },
        }
      : {}),
    ...(status.rotation
      ? {
          rotation: definedOnly({
            rotatedTotal: status.rotation.rotatedTotal,
            lastRotated: status.rotation.lastRotated,
            lastRotationReason: status.rotation.lastRotationReason,
            nextRotationTime: status.rotation.nextRotationTime,
          }),
        }
      : {}),
    notes,
    history: [...history],
  };
}

/** A provider's health, as its ProviderHealth object says. */
export function providerRow(health: ProviderHealth): ProviderRow {
  const status = health.status ?? {};
  const ready = condition(status.conditions, 'Ready');
  return {
    name: health.metadata.name,
    type: status.type ?? '',
    ready: ready?.status === 'True',
    reason: ready?.reason ?? '',
    message: ready?.message ?? '',
    lastCheckTime: stringTime(status.lastCheckTime),
    targets: (status.targets ?? []).map((t) => ({
      name: t.name,
      address: t.address ?? '',
      ready: t.ready,
      reason: t.reason ?? '',
      message: t.message ?? '',
      ...(t.latencyMillis !== undefined ? { latencyMillis: t.latencyMillis } : {}),
      lastTransitionTime: stringTime(t.lastTransitionTime),
    })),
  };
}

/** The pool a Proxy row belongs to, as `namespace/name` ('' for a standalone Proxy). */
export function poolIdOf(row: Pick<ProxyRow, 'namespace' | 'pool'>): string {
  return row.pool === '' ? '' : `${row.namespace}/${row.pool}`;
}

function condition(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

/** Conditions whose True is bad news; every other one is as wanted when True. */
const TRUE_IS_BAD = new Set(['Degraded', 'Progressing', 'BudgetLimited', 'Stalled']);

function conditionAsWanted(c: Condition): boolean {
  return TRUE_IS_BAD.has(c.type) ? c.status !== 'True' : c.status === 'True';
}

/** A watch delivers timestamps as strings; a typed client may have made Dates of them. */
function stringTime(value: unknown): string {
  if (value instanceof Date) return value.toISOString();
  return typeof value === 'string' ? value : '';
}

function definedOnly<T extends Record<string, unknown>>(o: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as never;
}
