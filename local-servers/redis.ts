/**
 * Debian's real redis-server for tests and benchmarks: installed (and
 * cached) by infra/scripts/install-redis.sh, run from the extracted tree
 * with LD_LIBRARY_PATH on 127.0.0.1 and a free port, no persistence, no
 * config file.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { acceptsTcp, freePort } from './ports.js';
import { runInfraScript, unpackedPackageEnv } from './tools.js';

export interface RedisInstall {
  bin: string;
  env: NodeJS.ProcessEnv;
}

let installing: Promise<RedisInstall> | undefined;

/** Runs the install script once per process; fails with its message (a test never skips for lack of Redis). */
export function installRedis(): Promise<RedisInstall> {
  installing ??= (async () => {
    const bin = await runInfraScript('install-redis.sh', { stderr: 'capture' });
    if (!bin.endsWith('/usr/bin/redis-server') || !existsSync(bin)) {
      throw new Error(`infra/scripts/install-redis.sh printed no redis-server: ${JSON.stringify(bin)}`);
    }
    return { bin, env: unpackedPackageEnv(dirname(dirname(dirname(bin)))) };
  })();
  return installing;
}

export interface RunningRedis {
  port: number;
  url: string;
  /** Everything redis-server printed, for failure messages. */
  output(): string;
  /** Stops it (SIGTERM, then SIGKILL after 5 s); resolves when it has exited. */
  stop(): Promise<void>;
  /** Stops it and starts an empty one on the same port: what a restart without persistence looks like. */
  restartEmpty(): Promise<void>;
}

export interface RedisTls {
  /** PEM files: the server's certificate and key, and the CA that signed it. */
  cert: string;
  key: string;
  ca: string;
}

/**
 * Starts redis-server on 127.0.0.1 (a free port unless given); resolves once it accepts connections.
 * With `tls` it serves TLS only (`tls-port`, the plaintext port off; clients need no certificate)
 * and the URL is `rediss://`.
 */
export async function startRedis(
  options: { port?: number; password?: string; tls?: RedisTls } = {},
): Promise<RunningRedis> {
  const install = await installRedis();
  let port = options.port ?? (await freePort());
  let child: ChildProcess;
  let log = '';

  const launch = async (): Promise<void> => {
    log = '';
    const args = [
      '--bind',
      '127.0.0.1',
      ...(options.tls
        ? [
            '--port',
            '0',
            '--tls-port',
            String(port),
            '--tls-cert-file',
            options.tls.cert,
            '--tls-key-file',
            options.tls.key,
            '--tls-ca-cert-file',
            options.tls.ca,
            '--tls-auth-clients',
            'no',
          ]
        : ['--port', String(port)]),
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      '--loglevel',
      'warning',
      ...(options.password ? ['--requirepass', options.password] : []),
    ];
    child = spawn(install.bin, args, { env: install.env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (await acceptsTcp(port)) return;
      const code = await Promise.race([
        exited,
        new Promise<'running'>((r) => setImmediate(() => r('running'))),
      ]);
      if (code !== 'running') throw new Error(`redis-server exited with ${code} on port ${port}: ${log}`);
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`redis-server did not accept connections on ${port} within 10 s: ${log}`);
      }
      await new Promise<void>((r) => setImmediate(r));
    }
  };

  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(force);
  };

  // A port taken between freePort() and the bind: try another.
  for (let attempt = 0; ; attempt++) {
    try {
      await launch();
      break;
    } catch (error) {
      if (options.port !== undefined || attempt >= 3 || !/Address already in use/.test(String(error)))
        throw error;
      port = await freePort();
    }
  }

  return {
    port,
    url: `${options.tls ? 'rediss' : 'redis'}://${options.password ? `:${encodeURIComponent(options.password)}@` : ''}127.0.0.1:${port}`,
    output: () => log,
    stop,
    async restartEmpty() {
      await stop();
      await launch();
    },
  };
}
