import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

export interface ManagedProcess {
  readonly name: string;
  readonly child: ChildProcess;
  /** Resolves when the process has exited (after stop() or by itself). */
  readonly exited: Promise<number | null>;
  stop(timeoutMs?: number): Promise<void>;
}

/**
 * Spawns a long-running server process with its output in a log file, in
 * its own process group, so stop() can end it and everything it started.
 */
export function spawnServer(name: string, command: string, args: string[], logPath: string): ManagedProcess {
  const log: WriteStream = createWriteStream(logPath, { flags: 'a' });
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => {
      log.end();
      resolve(code);
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
