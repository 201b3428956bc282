/**
 * Debian's real Squid for tests: installed (and cached) by
 * infra/scripts/install-squid.sh, run from the extracted tree with
 * LD_LIBRARY_PATH, outside any container.
 *
 * A run directory holds everything a non-container run needs besides the
 * config under test: the pid file, cache.log, and copies of the package's
 * MIME table, icons and English error pages. They are copies, not paths into
 * the cache, because Squid started as root drops to its `proxy` user (as in
 * the pod) before reading them, and the cache usually sits under root's
 * private home directory. Run as root, the directory is handed to `proxy`.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chownSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { acceptsTcp } from './ports.js';
import { runInfraScript, unpackedPackageEnv } from './tools.js';

const run = promisify(execFile);

export interface SquidInstall {
  /** The squid binary inside the extracted tree. */
  bin: string;
  /** The extracted tree (what `dpkg -x` wrote). */
  root: string;
  /** The environment to run `bin` with (LD_LIBRARY_PATH into the tree). */
  env: NodeJS.ProcessEnv;
  /** The first line of `squid -v`, e.g. "Squid Cache: Version 5.7". */
  banner: string;
}

/**
 * Runs the install script (seconds on first use, instant once stamped) and
 * returns the binary. Fails with the script's own message when it cannot
 * install: a test that wants Squid never skips for lack of it.
 */
export async function installSquid(): Promise<SquidInstall> {
  const bin = await runInfraScript('install-squid.sh', { stderr: 'capture' });
  if (!bin.endsWith('/usr/sbin/squid') || !existsSync(bin)) {
    throw new Error(`infra/scripts/install-squid.sh printed no squid binary: ${JSON.stringify(bin)}`);
  }
  const root = dirname(dirname(dirname(bin)));
  const env = unpackedPackageEnv(root);
  const { stdout: version } = await run(bin, ['-v'], { env });
  return { bin, root, env, banner: version.split('\n')[0] ?? '' };
}

/** The uid and gid of a local user, from /etc/passwd. */
function passwdEntry(user: string): { uid: number; gid: number } | undefined {
  for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
    const [name, , uid, gid] = line.split(':');
    if (name === user && uid !== undefined && gid !== undefined)
      return { uid: Number(uid), gid: Number(gid) };
  }
  return undefined;
}

export interface SquidRunDir {
  dir: string;
  confPath: string;
  cacheLogPath: string;
  /**
   * The directives appended after the config under test, one per line:
   * where this run keeps its files, plus two that keep a run outside a
   * container on the loopback and quiet (see the comments in the text).
   */
  localDirectives: string;
}

/** A fresh run directory with the package's data files, owned by Squid's run user. */
export function prepareRunDir(install: SquidInstall): SquidRunDir {
  const dir = mkdtempSync(join(tmpdir(), 'ep-squid-'));
  const share = join(install.root, 'usr/share/squid');
  cpSync(join(share, 'mime.conf'), join(dir, 'mime.conf'));
  cpSync(join(share, 'icons'), join(dir, 'icons'), { recursive: true, dereference: true });
  cpSync(join(share, 'errors', 'en'), join(dir, 'errors'), { recursive: true, dereference: true });
  if (process.getuid?.() === 0) {
    // Squid refuses to run as root and switches to its compiled-in default
    // user, `proxy` (as it does in the pod): it must be able to write here.
    const proxy = passwdEntry('proxy');
    if (!proxy) throw new Error("Squid started as root switches to user 'proxy', which does not exist here");
    chownTree(dir, proxy.uid, proxy.gid);
  }
  const localDirectives = [
    '# Local run: where this run keeps its files (the pod uses the image defaults).',
    `pid_filename ${dir}/squid.pid`,
    `cache_log ${dir}/cache.log`,
    `coredump_dir ${dir}`,
    `mime_table ${dir}/mime.conf`,
    `icon_directory ${dir}/icons`,
    `error_directory ${dir}/errors`,
    `unlinkd_program ${install.root}/usr/lib/squid/unlinkd`,
    // The ICMP pinger needs the setuid bit or capability that the package's
    // postinst would give it; dpkg -x does not, so it could only fail noisily.
    'pinger_enable off',
    // Squid binds its DNS client socket to this address ([::] and 0.0.0.0
    // otherwise); everything a test starts stays on the loopback.
    'udp_incoming_address 127.0.0.1',
  ].join('\n');
  return { dir, confPath: join(dir, 'squid.conf'), cacheLogPath: join(dir, 'cache.log'), localDirectives };
}

function chownTree(path: string, uid: number, gid: number): void {
  chownSync(path, uid, gid);
  if (statSync(path).isDirectory()) {
    for (const name of readdirSync(path)) chownTree(join(path, name), uid, gid);
  }
}

/** Writes the config (readable by Squid's run user). */
export function writeConf(runDir: SquidRunDir, text: string): void {
  writeFileSync(runDir.confPath, text.endsWith('\n') ? text : `${text}\n`, { mode: 0o644 });
}

/** `squid -k parse`: its exit code and everything it printed (it logs to stderr). */
export async function parseConf(
  install: SquidInstall,
  confPath: string,
): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(install.bin, ['-k', 'parse', '-n', serviceName(), '-f', confPath], {
      env: install.env,
      maxBuffer: 4 << 20,
    });
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, output: (e.stdout ?? '') + (e.stderr ?? '') };
  }
}

/**
 * A Squid service name of its own. Squid names its shared-memory segments
 * after it (/dev/shm/<name>-*), so parallel runs on one machine never meet.
 */
export function serviceName(): string {
  return `ep${randomBytes(4).toString('hex')}`;
}

export interface RunningSquid {
  process: ChildProcess;
  pid: number;
  serviceName: string;
  /** What Squid printed on stdout and stderr (before cache.log opens, and fatal errors). */
  output(): string;
  /** SIGTERM (what the kubelet sends), then waits for the exit; resolves with the exit code or signal. */
  stop(timeoutMs: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>;
  /** SIGKILL if still running, and removes any shared-memory segment left behind. */
  kill(): void;
}

/**
 * `squid -N -f <conf>` in the foreground, as the pod runs it, and waits until
 * `port` on 127.0.0.1 accepts connections. Rejects with Squid's output and
 * cache.log when it exits first.
 */
export async function startSquid(
  install: SquidInstall,
  runDir: SquidRunDir,
  port: number,
  readyTimeoutMs = 30_000,
): Promise<RunningSquid> {
  const name = serviceName();
  const child = spawn(install.bin, ['-N', '-n', name, '-f', runDir.confPath], {
    env: install.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const removeShm = () => {
    for (const f of existsSync('/dev/shm') ? readdirSync('/dev/shm') : []) {
      if (f.startsWith(`${name}-`)) rmSync(join('/dev/shm', f), { force: true });
    }
  };
  const squid: RunningSquid = {
    process: child,
    pid: child.pid ?? -1,
    serviceName: name,
    output: () => output,
    async stop(timeoutMs) {
      const started = Date.now();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const result = await Promise.race([
        exited,
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), timeoutMs).unref()),
      ]);
      if (!result) {
        squid.kill();
        throw new Error(`squid did not exit within ${timeoutMs} ms of SIGTERM; killed it`);
      }
      return { ...result, ms: Date.now() - started };
    },
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      removeShm();
    },
  };

  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const log = existsSync(runDir.cacheLogPath) ? readFileSync(runDir.cacheLogPath, 'utf8') : '';
      squid.kill();
      throw new Error(
        `squid exited (${child.exitCode ?? child.signalCode}) before accepting on 127.0.0.1:${port}\n${output}\n${log}`,
      );
    }
    if (await acceptsTcp(port)) return squid;
    if (Date.now() > deadline) {
      squid.kill();
      throw new Error(`squid did not accept on 127.0.0.1:${port} within ${readyTimeoutMs} ms\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
