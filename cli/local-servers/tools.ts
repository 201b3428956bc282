import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const INFRA_SCRIPTS = fileURLToPath(new URL('../../infra/scripts/', import.meta.url));

export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.EGRESS_PROXIES_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'egress-proxies');
}

async function script(name: string, env: NodeJS.ProcessEnv): Promise<string> {
  const path = join(INFRA_SCRIPTS, name);
  try {
    const { stdout } = await run('bash', [path], {
      env,
      maxBuffer: 16 * 1024 * 1024,
      timeout: 60 * 60 * 1000,
    });
    const last = stdout.trim().split('\n').pop() ?? '';
    if (!last) throw new Error(`${name} printed no path`);
    return last;
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim().split('\n').slice(-5).join('\n');
    throw new Error(`${name} failed${stderr ? `:\n${stderr}` : ''}`);
  }
}

/** Path of the pinned `temporal` CLI: $TEMPORAL_CLI, or installed into the cache on first use. */
export async function ensureTemporalCli(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.TEMPORAL_CLI && existsSync(env.TEMPORAL_CLI)) return env.TEMPORAL_CLI;
  return script('install-temporal.sh', env);
}

/** Directory with kube-apiserver, etcd and kubectl: $KUBE_BIN_DIR, or built into the cache on first use. */
export async function ensureKubeBinaries(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.KUBE_BIN_DIR && existsSync(join(env.KUBE_BIN_DIR, 'kube-apiserver'))) return env.KUBE_BIN_DIR;
  return script('build-kube.sh', env);
}
