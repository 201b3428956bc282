import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * Where egress-proxies keeps what it builds and what `dev` keeps between
 * runs: $EGRESS_PROXIES_CACHE, else <XDG cache>/egress-proxies (the infra
 * scripts use the same directory).
 */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.EGRESS_PROXIES_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'egress-proxies');
}
