import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const INFRA_SCRIPTS = fileURLToPath(new URL('../../infra/scripts/', import.meta.url));

export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.EGRESS_PROXIES_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'egress-proxies');
}

/**
 * Runs an infra script; its last stdout line is the path it provides. Its
 * stderr (progress such as "building Kubernetes ... 5-15 minutes") goes to
 * ours, so a first run never looks hung.
 */
async function script(name: string, env: NodeJS.ProcessEnv, args: string[] = []): Promise<string> {
  const path = join(INFRA_SCRIPTS, name);
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [path, ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => (stdout += chunk));
    child.once('error', reject);
    // 'close', not 'exit': stdout may still hold the path when the process has exited.
    child.once('close', (code) => {
      const last = stdout.trim().split('\n').pop() ?? '';
      if (code !== 0) reject(new Error(`${name} failed (exit ${code}); see the lines above`));
      else if (!last) reject(new Error(`${name} printed no path`));
      else resolve(last);
    });
  });
}

/** Path of the pinned `temporal` CLI: $TEMPORAL_CLI, or installed into the cache on first use. */
export async function ensureTemporalCli(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.TEMPORAL_CLI && existsSync(env.TEMPORAL_CLI)) return env.TEMPORAL_CLI;
  return script('install-temporal.sh', env);
}

/** Directory with kube-apiserver, kube-controller-manager, etcd and kubectl: $KUBE_BIN_DIR, or built into the cache on first use. */
export async function ensureKubeBinaries(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.KUBE_BIN_DIR && existsSync(join(env.KUBE_BIN_DIR, 'kube-apiserver'))) return env.KUBE_BIN_DIR;
  return script('build-kube.sh', env);
}

/** Path of the pinned Jaeger all-in-one binary: $JAEGER_BIN, or built from the Go module proxy into the cache on first use. */
export async function ensureJaeger(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.JAEGER_BIN && existsSync(env.JAEGER_BIN)) return env.JAEGER_BIN;
  return script('build-jaeger.sh', env);
}

/**
 * What a one-node cluster (local-servers/node.ts) needs, installed or built
 * on first use: Debian's containerd, runc and CNI plugins (root only), the
 * kubelet and kube-scheduler beside the apiserver's binaries, and the node
 * images. Returns the kube bin directory and the images directory.
 */
export async function ensureNodeTools(
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ binDir: string; imagesDir: string; seconds: { binaries: number; images: number } }> {
  await script('install-node.sh', env);
  let t = Date.now();
  const binDir = await script('build-kube.sh', env, ['node']);
  const binaries = (Date.now() - t) / 1000;
  t = Date.now();
  const imagesDir = await script('build-node-images.sh', env);
  return { binDir, imagesDir, seconds: { binaries, images: (Date.now() - t) / 1000 } };
}
