/**
 * One dev per directory, and reaping what a dead one left, against real
 * processes: a `sleep` stands in for a server, a short-lived node for a dev
 * that died.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  acquireStartLock,
  InstanceBusyError,
  lockInstance,
  processRunning,
  reapServers,
  recordServer,
} from '../../local-servers/instance.js';
import { spawnServer } from '../../local-servers/process.js';

const dirs: string[] = [];
const pids: number[] = [];
afterEach(() => {
  for (const pid of pids.splice(0)) if (processRunning(pid)) process.kill(pid, 'SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'ep-instance-'));
  dirs.push(d);
  return d;
};

async function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('lockInstance', () => {
  it('refuses a directory a live process holds, naming its pid and the directory', () => {
    const dir = tempDir();
    // A live holder that is not us: the lock file as another dev would write it.
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    pids.push(other.pid!);
    const start = readFileSync(`/proc/${other.pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[19];
    writeFileSync(join(dir, 'dev.pid'), JSON.stringify({ pid: other.pid, start, dir }));
    expect(() => lockInstance(dir)).toThrow(InstanceBusyError);
    expect(() => lockInstance(dir)).toThrow(
      `another egress-proxies dev (pid ${other.pid}) is running on ${dir}; stop it, or give this one its own --state-dir`,
    );
  });

  it('takes over from a dead holder, and from a live pid whose start time says it is someone else', () => {
    const dir = tempDir();
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
      encoding: 'utf8',
    });
    writeFileSync(join(dir, 'dev.pid'), JSON.stringify({ pid: Number(dead.stdout), dir }));
    lockInstance(dir).release();

    // pid 1 runs, but it is not the process that wrote the file.
    writeFileSync(join(dir, 'dev.pid'), JSON.stringify({ pid: 1, start: '1', dir }));
    const lock = lockInstance(dir);
    expect(JSON.parse(readFileSync(join(dir, 'dev.pid'), 'utf8'))).toMatchObject({ pid: process.pid, dir });
    lock.release();
    expect(existsSync(join(dir, 'dev.pid'))).toBe(false);
  });

  it('lets one of two takers in', () => {
    const dir = tempDir();
    const lock = lockInstance(dir);
    try {
      // Same process: its own start time matches, so it reads as a live holder.
      expect(() => lockInstance(dir)).toThrow(`(pid ${process.pid}) is running on ${dir}`);
    } finally {
      lock.release();
    }
  });
});

describe('acquireStartLock', () => {
  it('waits while a live dev holds it, then takes it; a dead holder is taken over at once', async () => {
    const dir = tempDir();
    const path = join(dir, 'start.lock');
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    pids.push(other.pid!);
    await until('the holder running', () => existsSync(`/proc/${other.pid}/stat`));
    writeFileSync(path, JSON.stringify({ pid: other.pid }));

    const waitedFor: number[] = [];
    let taken = false;
    const acquiring = acquireStartLock(path, { onWait: (pid) => waitedFor.push(pid) }).then((lock) => {
      taken = true;
      return lock;
    });
    await until('told whom it waits for', () => waitedFor.length > 0);
    expect(waitedFor).toEqual([other.pid]);
    expect(taken).toBe(false);

    other.kill('SIGKILL');
    const lock = await acquiring;
    expect(JSON.parse(readFileSync(path, 'utf8'))).toMatchObject({ pid: process.pid });
    lock.release();
    expect(existsSync(path)).toBe(false);
  });

  it('gives up after its deadline, naming the holder', async () => {
    const dir = tempDir();
    const path = join(dir, 'start.lock');
    writeFileSync(path, JSON.stringify({ pid: process.pid }));
    await expect(acquireStartLock(path, { timeoutMs: 300 })).rejects.toThrow(
      `another egress-proxies dev (pid ${process.pid}) has been starting for too long (${path})`,
    );
  });
});

describe('reapServers', () => {
  it('kills a recorded server still running its recorded command line, and leaves a reused pid alone', async () => {
    const dir = tempDir();
    const ours = spawn('sleep', ['30'], { stdio: 'ignore', detached: true });
    const stranger = spawn('sleep', ['31'], { stdio: 'ignore', detached: true });
    pids.push(ours.pid!, stranger.pid!);
    await until('both running', () => existsSync(`/proc/${ours.pid}/cmdline`));
    recordServer(dir, 'etcd', ours.pid!, ['sleep', '30']);
    // The pid is alive but runs something else than recorded: a pid reused since.
    recordServer(dir, 'kube-apiserver', stranger.pid!, ['kube-apiserver', '--secure-port=1']);

    const killed = await reapServers(dir);
    expect(killed).toEqual([{ name: 'etcd', pid: ours.pid }]);
    expect(processRunning(ours.pid!)).toBe(false);
    expect(processRunning(stranger.pid!)).toBe(true);
    expect(existsSync(join(dir, 'etcd.pid'))).toBe(false);
    expect(existsSync(join(dir, 'kube-apiserver.pid'))).toBe(false);
  });
});

describe('spawnServer', () => {
  it('records the pid while the server runs and ends it when its parent is SIGKILLed (PR_SET_PDEATHSIG)', async () => {
    const dir = tempDir();
    // A parent that starts a server the way dev does, prints its pid, then waits to be killed.
    const script = `
      import { spawnServer } from ${JSON.stringify(new URL('../../local-servers/process.ts', import.meta.url).href)};
      const s = spawnServer('sleeper', 'sleep', ['60'], ${JSON.stringify(join(dir, 'sleeper.log'))}, { pidDir: ${JSON.stringify(dir)} });
      process.stdout.write(String(s.child.pid) + '\\n');
      setInterval(() => {}, 1000);
    `;
    const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    pids.push(parent.pid!);
    const serverPid = await new Promise<number>((resolve) =>
      parent.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim()))),
    );
    pids.push(serverPid);
    expect(JSON.parse(readFileSync(join(dir, 'sleeper.pid'), 'utf8'))).toEqual({
      pid: serverPid,
      argv: ['sleep', '60'],
    });
    // setpriv has set PDEATHSIG once it has exec'd the server (a parent dying
    // before that is what reapServers is for).
    await until('the server exec-ed by setpriv', () => {
      try {
        return readFileSync(`/proc/${serverPid}/cmdline`, 'utf8') === 'sleep\x0060\x00';
      } catch {
        return false;
      }
    });
    expect(processRunning(serverPid)).toBe(true);

    parent.kill('SIGKILL');
    await until('the server gone after its parent was SIGKILLed', () => !processRunning(serverPid));
  });

  it('removes its pid file when the server stops', async () => {
    const dir = tempDir();
    const server = spawnServer('sleeper', 'sleep', ['60'], join(dir, 'sleeper.log'), { pidDir: dir });
    expect(existsSync(join(dir, 'sleeper.pid'))).toBe(true);
    await server.stop();
    expect(existsSync(join(dir, 'sleeper.pid'))).toBe(false);
  });
});
