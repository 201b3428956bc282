/**
 * Where `egress-proxies dev` comes from. Its servers (the Temporal dev
 * server, kube-apiserver and etcd, the node, Jaeger, the IP echo) and its
 * wiring live in local-servers/, which the production build and image leave
 * out: the module is found by a computed specifier, which tsc does not
 * follow into the build, and is there only in a source checkout (and the
 * tests' compiled tree).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { CommandPlan } from './plan.js';

/** What local-servers/dev.ts exports. */
export type RunDev = (plan: CommandPlan, logger: Logger, env: NodeJS.ProcessEnv) => Promise<void>;

export const NO_LOCAL_SERVERS =
  'egress-proxies dev runs from a source checkout (make dev); this build has no local servers';

export async function loadDev(): Promise<RunDev> {
  // Run from source (tsx, vitest) the module is TypeScript; compiled, JavaScript beside this one.
  const extension = import.meta.url.endsWith('.ts') ? 'ts' : 'js';
  const module = new URL(`../local-servers/dev.${extension}`, import.meta.url);
  if (!existsSync(fileURLToPath(module))) throw new Error(NO_LOCAL_SERVERS);
  return ((await import(module.href)) as { runDev: RunDev }).runDev;
}
