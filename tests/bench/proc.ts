/**
 * What the benches read of a process from /proc: RSS, CPU time, threads,
 * children, sockets. Linux only, as the benches are.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** Clock ticks per second (USER_HZ): 100 on every Linux this runs on. */
export const CLOCK_TICKS_PER_SECOND = 100;

export interface ProcSample {
  /** The command name (`comm`). */
  name: string;
  rssKiB: number;
  hwmKiB: number;
  /** utime + stime, in clock ticks. */
  cpuTicks: number;
  /** stime alone (the part in the kernel), in clock ticks. */
  systemTicks: number;
  threads: number;
}

/** The fields of a `stat` file (a process's or a thread's) that the benches read. */
function statOf(stat: string): { name: string; ppid: number; cpuTicks: number; systemTicks: number } {
  // Fields after the command name, which is in parentheses and may contain spaces.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return {
    name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
    ppid: Number(rest[1]),
    cpuTicks: Number(rest[11]) + Number(rest[12]),
    systemTicks: Number(rest[12]),
  };
}

export function readProc(pid: number): ProcSample | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
    const stat = statOf(readFileSync(`/proc/${pid}/stat`, 'utf8'));
    return {
      name: stat.name,
      rssKiB: field('VmRSS'),
      hwmKiB: field('VmHWM'),
      cpuTicks: stat.cpuTicks,
      systemTicks: stat.systemTicks,
      threads: field('Threads'),
    };
  } catch {
    return undefined;
  }
}

/**
 * Threads and processes started on this machine since boot (`processes` in
 * /proc/stat counts every clone). A `vm` call with a timeout starts a
 * watchdog thread, so this counts them too.
 */
export function threadsStarted(): number {
  return Number(/^processes\s+(\d+)/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1] ?? NaN);
}

export function allPids(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
}

export function ppidOf(pid: number): number | undefined {
  try {
    return statOf(readFileSync(`/proc/${pid}/stat`, 'utf8')).ppid;
  } catch {
    return undefined;
  }
}

export function descendants(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const p of allPids()) {
    const pp = ppidOf(p);
    if (pp !== undefined) parent.set(p, pp);
  }
  const out: number[] = [];
  const frontier = [pid];
  while (frontier.length > 0) {
    const cur = frontier.pop()!;
    for (const [child, pp] of parent) {
      if (pp === cur) {
        out.push(child);
        frontier.push(child);
      }
    }
  }
  return out;
}

/** The PID whose executable is named `exe` and whose command line mentions `needle`. */
export function findPid(exe: string, needle: string): number | undefined {
  for (const pid of allPids()) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (argv[0]?.endsWith(`/${exe}`) && argv.some((a) => a.includes(needle))) return pid;
    } catch {
      // gone
    }
  }
  return undefined;
}

export function socketFds(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).filter((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:');
      } catch {
        return false;
      }
    }).length;
  } catch {
    return NaN;
  }
}

/**
 * CPU time (utime + stime, in clock ticks) of each thread of `pid`, keyed
 * `main` for the main thread and `<name>#<tid>` for the rest (Node names
 * its worker threads, V8's helpers and libuv's pool all "node").
 */
export function threadCpuTicks(pid: number): Map<string, number> {
  const ticks = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = statOf(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'));
      ticks.set(Number(tid) === pid ? 'main' : `${stat.name}#${tid}`, stat.cpuTicks);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return ticks;
}
