/** What the API says about itself: liveness, metrics (unless served elsewhere) and its OpenAPI document. */
import { Hono } from 'hono';
import type { Registry } from 'prom-client';
import { metricsHandler } from '../metrics.js';

export function createMetaRoutes(opts: { registry: Registry; serveMetrics: boolean; openApi: string }): Hono {
  const routes = new Hono();
  routes.get('/healthz', (c) => c.body('ok\n', 200, { 'Content-Type': 'text/plain; charset=utf-8' }));
  if (opts.serveMetrics) routes.get('/metrics', metricsHandler(opts.registry));
  routes.get('/openapi.json', (c) => c.body(opts.openApi, 200, { 'Content-Type': 'application/json' }));
  return routes;
}
