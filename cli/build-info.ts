/**
 * What this build is: the package version and the commit it was built from.
 * `npm run build` (and so the image) writes dist/build-info.json; a source
 * checkout has none and says "unknown", as the seed's unbaked builds did.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Gauge, type Registry } from 'prom-client';
import { packageVersion, projectRoot } from './version.js';

export interface BuildInfo {
  version: string;
  commit: string;
}

export function buildInfo(): BuildInfo {
  const path = join(projectRoot(), 'dist', 'build-info.json');
  let commit = 'unknown';
  if (existsSync(path)) {
    const baked = JSON.parse(readFileSync(path, 'utf8')) as { commit?: unknown };
    if (typeof baked.commit === 'string' && baked.commit !== '') commit = baked.commit;
  }
  return { version: packageVersion(), commit };
}

/** `egress_proxies_build_info{version,commit,node} 1`, the usual build_info gauge. */
export function registerBuildInfo(registry: Registry): void {
  if (registry.getSingleMetric('egress_proxies_build_info') !== undefined) return;
  const info = buildInfo();
  new Gauge({
    name: 'egress_proxies_build_info',
    help: 'The running build: package version, commit and Node.js version; always 1',
    labelNames: ['version', 'commit', 'node'],
    registers: [registry],
  }).set({ version: info.version, commit: info.commit, node: process.version }, 1);
}
