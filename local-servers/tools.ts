/**
 * Finds, installs or builds what the local servers run, each through its
 * infra script (cached under cacheRoot(), cli/cache-root.ts); and the one
 * way those scripts are run, for `dev` and the tests alike.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const INFRA_SCRIPTS = fileURLToPath(new URL('../infra/scripts/', import.meta.url));

export interface InfraScriptOptions {
  env?: NodeJS.ProcessEnv;
  args?: string[];
  /**
   * `inherit` (default): the script's progress ("building Kubernetes ...
   * 5-15 minutes") goes to our stderr, so a first run never looks hung.
   * `capture`: it is kept for the error message instead (a test's output
   * is its report).
   */
  stderr?: 'inherit' | 'capture';
  /** Killed (and failed) after this long; default no bound. */
  timeoutMs?: number;
}

/** Runs infra/scripts/<name>; its last stdout line is what it provides (a path, or `ok`). */
export async function runInfraScript(name: string, opts: InfraScriptOptions = {}): Promise<string> {
  const path = join(INFRA_SCRIPTS, name);
  const capture = opts.stderr === 'capture';
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [path, ...(opts.args ?? [])], {
      env: opts.env ?? process.env,
      stdio: ['ignore', 'pipe', capture ? 'pipe' : 'inherit'],
      ...(opts.timeoutMs !== undefined ? { timeout: opts.timeoutMs } : {}),
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => (stdout += chunk));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    // 'close', not 'exit': stdout may still hold the path when the process has exited.
    child.once('close', (code, signal) => {
      const last = stdout.trim().split('\n').pop() ?? '';
      const exit = code ?? signal;
      if (code !== 0) {
        reject(
          new Error(
            capture
              ? `infra/scripts/${name} failed (exit ${exit}): ${stderr.trim() || stdout.trim()}`
              : `${name} failed (exit ${exit}); see the lines above`,
          ),
        );
      } else if (!last) reject(new Error(`${name} printed no path`));
      else resolve(last);
    });
  });
}

/**
 * The environment to run a binary from a Debian package unpacked with
 * `dpkg -x` into `root` (Redis, Squid, nginx): LD_LIBRARY_PATH into its
 * multiarch library directories.
 */
export function unpackedPackageEnv(root: string, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const libDirs = ['usr/lib', 'lib']
    .map((d) => join(root, d))
    .filter((d) => existsSync(d))
    .flatMap((d) => readdirSync(d).map((name) => join(d, name)))
    .filter((d) => /-linux-/.test(d) && statSync(d).isDirectory());
  return { ...base, LD_LIBRARY_PATH: libDirs.join(':') };
}

/** Path of the pinned `temporal` CLI: $TEMPORAL_CLI, or installed into the cache on first use. */
export async function ensureTemporalCli(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.TEMPORAL_CLI && existsSync(env.TEMPORAL_CLI)) return env.TEMPORAL_CLI;
  return runInfraScript('install-temporal.sh', { env });
}

/** Directory with kube-apiserver, kube-controller-manager, etcd and kubectl: $KUBE_BIN_DIR, or built into the cache on first use. */
export async function ensureKubeBinaries(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.KUBE_BIN_DIR && existsSync(join(env.KUBE_BIN_DIR, 'kube-apiserver'))) return env.KUBE_BIN_DIR;
  return runInfraScript('build-kube.sh', { env });
}

/** Path of the pinned Jaeger all-in-one binary: $JAEGER_BIN, or built from the Go module proxy into the cache on first use. */
export async function ensureJaeger(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.JAEGER_BIN && existsSync(env.JAEGER_BIN)) return env.JAEGER_BIN;
  return runInfraScript('build-jaeger.sh', { env });
}

/**
 * What a one-node cluster (node.ts) needs, installed or built
 * on first use: Debian's containerd, runc and CNI plugins (root only), the
 * kubelet and kube-scheduler beside the apiserver's binaries, and the node
 * images. Returns the kube bin directory and the images directory.
 */
export async function ensureNodeTools(
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ binDir: string; imagesDir: string; seconds: { binaries: number; images: number } }> {
  await runInfraScript('install-node.sh', { env });
  let t = Date.now();
  const binDir = await runInfraScript('build-kube.sh', { env, args: ['node'] });
  const binaries = (Date.now() - t) / 1000;
  t = Date.now();
  const imagesDir = await runInfraScript('build-node-images.sh', { env });
  return { binDir, imagesDir, seconds: { binaries, images: (Date.now() - t) / 1000 } };
}
