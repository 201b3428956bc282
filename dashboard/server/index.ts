/**
 * The dashboard, as the api process mounts it at `/ui`: the live fleet
 * model, the page's assets and its routes, from the parts the process
 * already runs.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Hono } from 'hono';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ResilientInformer } from '../../kube/informer.js';
import type { LeaseStore } from '../../api/lease-store.js';
import type { ProviderHealth, Proxy, ProxyPool } from '../../resources/proxy-schema.js';
import { loadDashboardAssets } from './assets.js';
import { createFleetState, type FleetState } from './fleet-state.js';
import { createDashboardRoutes, isPublicDashboardPath } from './routes.js';
import type { TemporalUiLink } from './rows.js';
import { createKubeFleetWrites, type FleetWrites } from './writes.js';

export { isPublicDashboardPath } from './routes.js';
export type { FleetState } from './fleet-state.js';
export type { TemporalUiLink } from './rows.js';

export interface Dashboard {
  /** Mounted at `/ui` by the lease API. */
  routes: Hono;
  /** Paths of it served with no token (the page and its assets). */
  isPublic(path: string): boolean;
  state: FleetState;
  close(): void;
}

export interface DashboardOptions {
  proxies: ResilientInformer<Proxy>;
  pools: ResilientInformer<ProxyPool>;
  providerHealths?: ResilientInformer<ProviderHealth>;
  leaseStore: Pick<LeaseStore, 'activeCounts' | 'coolingCounts'>;
  /** The registry a gateway in this process writes its metrics to. */
  gatewayRegistry?: Registry;
  temporalUi?: TemporalUiLink;
  /** For the write actions (scale, cordon); absent: read-only for everyone. */
  kubeConfig?: KubeConfig;
  /** Tests swap the kube writes. */
  writes?: FleetWrites;
  /** `--insecure-no-auth`: the open tenant looks but never writes. */
  openTenantReadOnly: boolean;
  logger: Logger;
  tickMs?: number;
}

export async function createDashboard(options: DashboardOptions): Promise<Dashboard> {
  const assets = await loadDashboardAssets();
  const state = createFleetState({
    proxies: options.proxies,
    pools: options.pools,
    ...(options.providerHealths ? { providerHealths: options.providerHealths } : {}),
    leaseStore: options.leaseStore,
    ...(options.gatewayRegistry ? { gatewayRegistry: options.gatewayRegistry } : {}),
    ...(options.temporalUi ? { temporalUi: options.temporalUi } : {}),
    logger: options.logger,
    ...(options.tickMs ? { tickMs: options.tickMs } : {}),
  });
  state.start();
  const writes =
    options.writes ?? (options.kubeConfig ? createKubeFleetWrites(options.kubeConfig) : undefined);
  const routes = createDashboardRoutes({
    state,
    assets,
    ...(writes ? { writes } : {}),
    openTenantReadOnly: options.openTenantReadOnly,
    logger: options.logger,
  });
  return { routes, isPublic: isPublicDashboardPath, state, close: () => state.stop() };
}
