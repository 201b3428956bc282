import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync, statSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { recordServer } from './instance.js';

export interface ManagedProcess {
  readonly name: string;
  readonly child: ChildProcess;
  /** Resolves when the process has exited (after stop() or by itself). */
  readonly exited: Promise<number | null>;
  stop(timeoutMs?: number): Promise<void>;
}

export interface SpawnServerOptions {
  /** Write `<pidDir>/<name>.pid` while it runs (reapServers in instance.ts reads it). */
  pidDir?: string;
  /** The child's environment; default this process's. */
  env?: NodeJS.ProcessEnv;
}

let setprivPath: string | null | undefined;

/** util-linux's setpriv (Essential on Debian), when this is Linux and it is installed. */
function setpriv(): string | undefined {
  if (setprivPath === undefined) {
    const dirs = [...(process.env.PATH ?? '').split(':').filter(Boolean), '/usr/bin', '/bin'];
    setprivPath =
      process.platform === 'linux'
        ? (dirs.map((d) => join(d, 'setpriv')).find((p) => existsSync(p)) ?? null)
        : null;
  }
  return setprivPath ?? undefined;
}

/**
 * Spawns a long-running server process with its output in a log file, in
 * its own process group, so stop() can end it and everything it started.
 *
 * Its own group keeps a terminal's Ctrl-C from reaching it before we stop
 * things in order, but also means nothing ends it when we die uncleanly. So
 * on Linux it starts under `setpriv --pdeathsig KILL`, which execs it with
 * PR_SET_PDEATHSIG: the kernel kills it when this process dies, SIGKILL of
 * node included. setpriv execs, so the pid is the server's own.
 */
export function spawnServer(
  name: string,
  command: string,
  args: string[],
  logPath: string,
  opts: SpawnServerOptions = {},
): ManagedProcess {
  const log: WriteStream = createWriteStream(logPath, { flags: 'a' });
  const wrapper = setpriv();
  const [file, argv] = wrapper ? [wrapper, ['--pdeathsig', 'KILL', '--', command, ...args]] : [command, args];
  const child = spawn(file, argv, {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: opts.env ?? process.env,
  });
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  const forget =
    opts.pidDir && child.pid
      ? recordServer(opts.pidDir, name, child.pid, [command, ...args])
      : () => undefined;
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => {
      forget();
      // Resolved once the log is closed too: a caller may remove its directory next.
      if (log.closed) resolve(code);
      else {
        log.once('close', () => resolve(code));
        log.end();
      }
    });
    child.once('error', () => resolve(null));
  });
  return {
    name,
    child,
    exited,
    async stop(timeoutMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const kill = (signal: NodeJS.Signals) => {
        try {
          if (child.pid) process.kill(-child.pid, signal);
        } catch {
          child.kill(signal);
        }
      };
      kill('SIGTERM');
      const timer = setTimeout(() => kill('SIGKILL'), timeoutMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Polls `probe` until it returns true, the process exits, or the deadline passes. */
export async function waitUntil(
  what: string,
  probe: () => Promise<boolean>,
  opts: { timeoutMs: number; intervalMs?: number; process?: ManagedProcess; logPath?: string },
): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  let exitedCode: number | null | undefined;
  void opts.process?.exited.then((code) => {
    exitedCode = code;
  });
  for (;;) {
    if (exitedCode !== undefined) {
      throw new Error(
        `${what}: process exited with code ${exitedCode} before it was ready (log: ${opts.logPath ?? 'n/a'})`,
      );
    }
    try {
      if (await probe()) return;
    } catch {
      // not ready yet
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not ready after ${opts.timeoutMs} ms (log: ${opts.logPath ?? 'n/a'})`);
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 200));
  }
}

/** One readiness check of `readyOrStopped`. */
export interface ReadyCheck {
  what: string;
  probe: () => Promise<boolean>;
  timeoutMs: number;
  intervalMs?: number;
}

/**
 * Waits until `proc` passes each check in turn. One that does not is
 * stopped before the error goes on, so nothing is left running (nor for a
 * retry on fresh ports to clash with).
 */
export async function readyOrStopped(
  proc: ManagedProcess,
  logPath: string,
  checks: ReadyCheck[],
): Promise<void> {
  try {
    for (const { what, probe, ...bounds } of checks)
      await waitUntil(what, probe, { ...bounds, process: proc, logPath });
  } catch (error) {
    await proc.stop();
    throw error;
  }
}

/**
 * Runs `start` (which spawns a server on ports it picks free and waits for
 * it, stopping it when it is not ready: `readyOrStopped`) again when the server could not bind
 * one of them: a port found free can be taken before the server binds it (an
 * outgoing connection's ephemeral port, another run's server). Up to three
 * tries; any other failure is thrown at once.
 */
export async function retryWhenPortTaken<T>(
  logPath: string,
  start: (attempt: number) => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const logged = existsSync(logPath) ? statSync(logPath).size : 0;
    try {
      return await start(attempt);
    } catch (error) {
      if (attempt >= 3 || !loggedSince(logPath, logged, /address already in use/i)) throw error;
    }
  }
}

function loggedSince(logPath: string, offset: number, pattern: RegExp): boolean {
  if (!existsSync(logPath)) return false;
  return pattern.test(readFileSync(logPath).subarray(offset).toString('utf8'));
}
