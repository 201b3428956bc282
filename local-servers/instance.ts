/**
 * One `dev` instance per directory, and nothing left behind by one that died.
 *
 * The directory holds `dev.pid` (who runs it) and `pids/<server>.pid` (the
 * servers it started). Servers die with `dev` through PR_SET_PDEATHSIG
 * (process.ts); these files cover what that cannot: a kernel without it, a
 * `dev` killed between fork and prctl, a server started by an older version.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Another live `dev` holds the directory. */
export class InstanceBusyError extends Error {
  constructor(
    readonly pid: number,
    readonly dir: string,
  ) {
    super(
      `another egress-proxies dev (pid ${pid}) is running on ${dir}; stop it, or give this one its own --state-dir`,
    );
    this.name = 'InstanceBusyError';
  }
}

interface Owner {
  pid: number;
  /** /proc start time of pid (clock ticks since boot): tells a reused pid from the owner. */
  start?: string;
}

/** Field 22 of /proc/<pid>/stat (start time), or undefined off Linux or when pid is gone. */
function procStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: fields after it start past the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Process state letter from /proc (Z: a zombie, exited and not yet reaped). */
function procState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/** True while pid runs (a zombie has stopped running: it holds no port or file). */
export function processRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: it exists but is someone else's.
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  return procState(pid) !== 'Z';
}

function ownerAlive(owner: Owner): boolean {
  if (!processRunning(owner.pid)) return false;
  const start = procStart(owner.pid);
  return owner.start === undefined || start === undefined || start === owner.start;
}

function readOwner(path: string): Owner | undefined {
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as Partial<Owner>;
    return typeof parsed.pid === 'number' ? { pid: parsed.pid, start: parsed.start } : undefined;
  } catch {
    return undefined;
  }
}

export interface InstanceLock {
  /** Removes dev.pid if it is still ours. */
  release(): void;
}

/**
 * Takes `dir` for this process: throws InstanceBusyError when a live `dev`
 * holds it; a dev.pid left by a dead one is taken over.
 */
export function lockInstance(dir: string): InstanceLock {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, 'dev.pid');
  const me: Owner = { pid: process.pid, start: procStart(process.pid) };
  for (let attempt = 0; ; attempt++) {
    try {
      // 'wx': of two starts racing for the directory, exactly one creates the file.
      writeFileSync(path, JSON.stringify({ ...me, dir }) + '\n', { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = readOwner(path);
    if (owner && ownerAlive(owner)) throw new InstanceBusyError(owner.pid, dir);
    // An unreadable file is one being written right now: look once more before calling it stale.
    if (!owner && attempt === 0) continue;
    if (attempt > 2) throw new Error(`cannot take ${path}: it keeps reappearing`);
    rmSync(path, { force: true });
  }
  return {
    release() {
      const owner = readOwner(path);
      if (owner?.pid === me.pid) rmSync(path, { force: true });
    },
  };
}

interface ServerRecord {
  pid: number;
  /** The command line it was started with: a reused pid running anything else is not ours. */
  argv: string[];
}

/** Records a started server, so a later start can reap it if this process dies without stopping it. */
export function recordServer(pidDir: string, name: string, pid: number, argv: string[]): () => void {
  mkdirSync(pidDir, { recursive: true });
  const path = join(pidDir, `${name}.pid`);
  writeFileSync(path, JSON.stringify({ pid, argv } satisfies ServerRecord) + '\n');
  return () => rmSync(path, { force: true });
}

function cmdline(pid: number): string[] | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return raw.split('\0').slice(0, -1);
  } catch {
    return undefined;
  }
}

/**
 * Kills the servers a dead instance left in `pidDir` (call it holding the
 * instance lock, so their parent is known to be gone). A pid counts as ours
 * only while /proc shows the recorded command line. Returns what was killed.
 */
export async function reapServers(
  pidDir: string,
  timeoutMs = 10_000,
): Promise<Array<{ name: string; pid: number }>> {
  if (!existsSync(pidDir)) return [];
  const killed: Array<{ name: string; pid: number }> = [];
  for (const file of readdirSync(pidDir).filter((f) => f.endsWith('.pid'))) {
    const path = join(pidDir, file);
    let record: ServerRecord | undefined;
    try {
      record = JSON.parse(readFileSync(path, 'utf8')) as ServerRecord;
    } catch {
      record = undefined;
    }
    const seen = record && processRunning(record.pid) ? cmdline(record.pid) : undefined;
    if (record && seen && seen.join('\0') === record.argv.join('\0')) {
      // Each server leads its own process group (spawnServer): take what it started too.
      try {
        process.kill(-record.pid, 'SIGKILL');
      } catch {
        process.kill(record.pid, 'SIGKILL');
      }
      killed.push({ name: file.slice(0, -'.pid'.length), pid: record.pid });
    }
    rmSync(path, { force: true });
  }
  const deadline = Date.now() + timeoutMs;
  for (const { name, pid } of killed) {
    while (processRunning(pid)) {
      if (Date.now() > deadline) throw new Error(`${name} (pid ${pid}) left by an earlier dev did not exit`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return killed;
}

/**
 * Taken by a `dev` while it chooses ports and starts its servers, released
 * once they listen. Two starting at once would otherwise both find a
 * preferred port (7233, 6443, 8090) free: one server then fails to bind, or
 * worse, its readiness probe is answered by the other instance's server.
 * A holder that died is taken over. Machine-wide (the ports are), so not
 * under a --state-dir.
 */
export async function acquireStartLock(
  path: string,
  opts: { timeoutMs?: number; onWait?: (pid: number) => void } = {},
): Promise<InstanceLock> {
  const me: Owner = { pid: process.pid, start: procStart(process.pid) };
  const deadline = Date.now() + (opts.timeoutMs ?? 300_000);
  let told = false;
  for (;;) {
    try {
      writeFileSync(path, JSON.stringify(me) + '\n', { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = readOwner(path);
    if (owner && ownerAlive(owner)) {
      if (Date.now() > deadline) {
        throw new Error(
          `another egress-proxies dev (pid ${owner.pid}) has been starting for too long (${path})`,
        );
      }
      if (!told) opts.onWait?.(owner.pid);
      told = true;
      await new Promise((r) => setTimeout(r, 200));
      continue;
    }
    if (!owner) {
      // Unreadable: maybe being written right now; look once more before calling it stale.
      await new Promise((r) => setTimeout(r, 50));
      if (readOwner(path) !== undefined) continue;
    }
    rmSync(path, { force: true });
  }
  let held = true;
  return {
    release() {
      if (!held) return;
      held = false;
      if (readOwner(path)?.pid === me.pid) rmSync(path, { force: true });
    },
  };
}
