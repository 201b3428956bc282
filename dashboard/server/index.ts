/**
 * The dashboard, as the api process mounts it at `/ui`: the live fleet
 * model, the page's assets and its routes, from the parts the process
 * already runs.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Hono } from 'hono';
import { loadDashboardAssets } from './assets.js';
import { createFleetState, type FleetState, type FleetStateOptions } from './fleet-state.js';
import { createDashboardRoutes, isPublicDashboardPath } from './routes.js';
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

export interface DashboardOptions extends FleetStateOptions {
  /** For the write actions (scale, cordon); absent: read-only for everyone. */
  kubeConfig?: KubeConfig;
  /** Tests swap the kube writes. */
  writes?: FleetWrites;
  /** `--insecure-no-auth`: the open tenant looks but never writes. */
  openTenantReadOnly: boolean;
}

export async function createDashboard(options: DashboardOptions): Promise<Dashboard> {
  const assets = await loadDashboardAssets();
  const { kubeConfig, writes: givenWrites, openTenantReadOnly, ...fleet } = options;
  const state = createFleetState(fleet);
  state.start();
  const writes = givenWrites ?? (kubeConfig ? createKubeFleetWrites(kubeConfig) : undefined);
  const routes = createDashboardRoutes({
    state,
    assets,
    ...(writes ? { writes } : {}),
    openTenantReadOnly,
    logger: options.logger,
  });
  return { routes, isPublic: isPublicDashboardPath, state, close: () => state.stop() };
}
