/**
 * Memory of each production process with N Proxies (DESIGN: "memory of each
 * process at 1,000 proxies").
 *
 *   nice npx tsx tests/bench/memory.ts [N] [--steady-seconds 60] [--settle-seconds 60] [--sample-every 5] [--cpu-profile DIR] [--from dist|source] [--inherit-env]
 *
 * --from dist (the default) runs the compiled processes a user runs, and
 * runs `npm run build` first when dist/ is missing or older than a source
 * file; --from source runs them through tsx. The processes get the image's
 * environment (the Dockerfile's final-stage ENV, e.g. MALLOC_ARENA_MAX=2);
 * --inherit-env gives them this shell's alone.
 *
 * --cpu-profile DIR writes a V8 CPU profile of each process's main isolate
 * over the steady window (<command>-<pid>.cpuprofile; open it in Chrome
 * DevTools or speedscope). The window's prober signals (transition,
 * latency, resync, from the api's /metrics) are printed with the figures.
 *
 * (default N = 1000, about 6 min on a quiet 2-core machine.) Steady state
 * starts a minute after the last Proxy is Ready (--settle-seconds): right
 * after a fast provisioning burst the worker still holds what the burst
 * used (measured: 377 MiB over a window starting 5 s after Ready, 328 MiB
 * over one starting 60 s after, the same run conditions otherwise).
 *
 * Starts its own Temporal dev server and kube-apiserver (with etcd), installs
 * the CRDs, writes a providers config with the `local` provider, and runs
 * `worker`, `bridge` and `api` as three separate OS processes through the
 * project's CLI (`node --import tsx cli/entry.ts <command> ...`: what
 * `npx tsx cli/entry.ts` runs, without the npx and tsx wrapper processes in
 * between, so the PID sampled is the process doing the work). Every process
 * uses the shipped defaults (log level info, drift sweep every 2 min and a
 * 6 h safety poll per Proxy, GC and provider checks on their schedules,
 * maxCachedWorkflows 100), only its addresses and directories are set.
 *
 * Then: an idle baseline (RSS of each process with no Proxies), N Managed
 * Proxies on the `local` provider applied, waited for until all are
 * Provisioned and then Ready (healthCheck.probeURL points at a loopback HTTP
 * target this bench serves, so the api process's prober makes them Healthy
 * through the real forward proxies), then RSS (VmRSS) sampled every few
 * seconds over a steady window, and the peak (VmHWM). RSS right after start
 * still holds start-up garbage that the processes release over the next
 * minutes, so the bench also asks each process for a full GC (a bench-only
 * preload module, on SIGWINCH) and reports RSS and V8 heap after it; per
 * proxy = (steady − idle) / N from those after-GC figures (as sampled in
 * parentheses). The dev servers' RSS is printed for context.
 *
 * Everything listens on the loopback; all processes and the temp directory
 * are removed at the end, on error, and on SIGINT/SIGTERM.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { spawnSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { createProxyClient } from '../../kube/proxies.js';
import { installCrds } from '../../cli/local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../cli/local-servers/kube.js';
import { freePort } from '../../cli/local-servers/ports.js';
import { spawnServer, type ManagedProcess } from '../../cli/local-servers/process.js';
import { startTemporalDevServer, type TemporalDevServer } from '../../cli/local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../cli/local-servers/tools.js';
import { imageEnvironment } from '../helpers/image-env.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'steady-seconds': { type: 'string', default: '60' },
    'settle-seconds': { type: 'string', default: '60' },
    'sample-every': { type: 'string', default: '5' },
    from: { type: 'string', default: 'dist' },
    'idle-only': { type: 'boolean', default: false },
    'cpu-profile': { type: 'string' },
    'inherit-env': { type: 'boolean', default: false },
    'worker-arg': { type: 'string', multiple: true, default: [] },
  },
});
const FROM = values.from;
if (FROM !== 'dist' && FROM !== 'source') throw new Error(`--from must be dist or source, got ${FROM}`);
const WORKER_EXTRA = values['worker-arg'].flatMap((a) => a.split(' ').filter((x) => x !== ''));
const N = positionals.length > 0 ? Number(positionals[0]) : 1000;
if (!Number.isInteger(N) || N < 1) throw new Error(`N must be a positive integer, got ${positionals[0]}`);
const STEADY_MS = Number(values['steady-seconds']) * 1000;
const SAMPLE_MS = Number(values['sample-every']) * 1000;
const NAMESPACE = 'bench-memory';
const TASK_QUEUE = 'ep-bench-memory';
/** Not used by any test or by `dev`, so a concurrent run elsewhere never collides. */
const ADDRESS_RANGE = '127.94.0.0/16';
const PROBE_INTERVAL_SECONDS = 30;
const CREATE_CONCURRENCY = 20;
const REPO = fileURLToPath(new URL('../../', import.meta.url));
const t0 = performance.now();
const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0).padStart(5)} s`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * How each process is started. `dist` (the default) is what a user runs: the
 * compiled JavaScript of `npm run build` (the image's `node dist/cli/entry.js`),
 * with the workflow bundle prebuilt. `source` runs the TypeScript through tsx,
 * whose loader and transform cache cost every process tens of MiB that no
 * user pays.
 */
function entryArgs(): string[] {
  if (FROM === 'source') return ['--import', 'tsx', join(REPO, 'cli/entry.ts')];
  const entry = join(REPO, 'dist/cli/entry.js');
  const why = distOutOfDate(entry);
  if (why !== undefined) {
    // A fresh clone has no dist/: build it as the image does, rather than
    // send the user off to run another command first.
    console.log(`${elapsed()}  ${why}: running \`npm run build\``);
    const built = spawnSync('npm', ['run', 'build', '--silent'], { cwd: REPO, stdio: 'inherit' });
    if (built.status !== 0) throw new Error(`npm run build failed (exit ${built.status ?? built.signal})`);
    const still = distOutOfDate(entry);
    if (still !== undefined) throw new Error(`${still} after npm run build`);
  }
  return [entry];
}

/** Why dist/ cannot be measured as it is (missing, or older than a source file), or undefined. */
function distOutOfDate(entry: string): string | undefined {
  const built = join(REPO, 'dist/build-info.json');
  if (!existsSync(entry) || !existsSync(built)) return 'dist/ is missing';
  const builtAt = statSync(built).mtimeMs;
  const newer: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, e.name);
      if (e.isDirectory()) walk(path);
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && statSync(path).mtimeMs > builtAt)
        newer.push(path.slice(REPO.length));
    }
  };
  for (const d of [
    'activities',
    'api',
    'cli',
    'k8s-bridge',
    'kube',
    'providers',
    'resources',
    'tracing',
    'workflows',
  ])
    walk(join(REPO, d));
  if (newer.length === 0) return undefined;
  return `dist/ is older than ${newer.slice(0, 3).join(', ')}${newer.length > 3 ? ' ...' : ''}`;
}

// ---------------------------------------------------------------- /proc

interface ProcSample {
  rssKiB: number;
  hwmKiB: number;
  /** utime + stime, in clock ticks. */
  cpuTicks: number;
  threads: number;
}

function readProc(pid: number): ProcSample | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
    // Fields after the command name, which is in parentheses and may contain spaces.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      rssKiB: field('VmRSS'),
      hwmKiB: field('VmHWM'),
      cpuTicks: Number(rest[11]) + Number(rest[12]),
      threads: field('Threads'),
    };
  } catch {
    return undefined;
  }
}

function allPids(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
}

function ppidOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

function descendants(pid: number): number[] {
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
function findPid(exe: string, needle: string): number | undefined {
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

function socketFds(pid: number): number {
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

const mib = (kib: number) => kib / 1024;
const fmtMiB = (kib: number) => `${mib(kib).toFixed(0)} MiB`;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor((s.length - 1) / 2)]!;
};

// Resolved (and dist/ built when it must be) before any server starts.
const ENTRY = entryArgs();
if (values['cpu-profile']) mkdirSync(values['cpu-profile'], { recursive: true });
/**
 * The three processes run with the image's environment (the Dockerfile's
 * final-stage ENV, MALLOC_ARENA_MAX among it) over this shell's, as they run
 * in their containers; --inherit-env runs them with this shell's alone.
 */
const IMAGE_ENV = values['inherit-env'] ? {} : imageEnvironment();
const PROCESS_ENV: NodeJS.ProcessEnv = { ...process.env, ...IMAGE_ENV };

// ---------------------------------------------------------------- cleanup

const dir = mkdtempSync(join(tmpdir(), 'ep-bench-mem-'));
const children: ManagedProcess[] = [];
const serverPids: number[] = [];
let temporal: TemporalDevServer | undefined;
let kube: LocalKubeApiServer | undefined;
let probeTarget: Server | undefined;
let cleaning: Promise<void> | undefined;
let cleaned = false;

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    // The control plane first (the worker closes its forward proxies), then the servers it talks to.
    await Promise.all(children.map((c) => c.stop(15_000).catch(() => undefined)));
    await temporal?.stop().catch(() => undefined);
    await kube?.stop().catch(() => undefined);
    await new Promise<void>((r) => (probeTarget ? probeTarget.close(() => r()) : r()));
    probeTarget?.closeAllConnections();
    rmSync(dir, { recursive: true, force: true });
    cleaned = true;
  })();
  return cleaning;
}

// Last resort if we exit without cleanup() finishing: kill every process group we started.
process.on('exit', () => {
  if (cleaned) return; // the PIDs below may already belong to someone else
  for (const c of temporal ? [...children, temporal.process] : children) {
    if (c.child.pid && c.child.exitCode === null && c.child.signalCode === null) {
      try {
        process.kill(-c.child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  for (const pid of serverPids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  rmSync(dir, { recursive: true, force: true });
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  // `on`, not `once`: under `npx tsx` a Ctrl-C arrives twice (from the terminal and relayed by
  // tsx), and a second signal without a handler would kill us before the cleanup is done.
  process.on(signal, () => {
    if (cleaning) return;
    process.stderr.write(`\n${signal}: stopping everything ...\n`);
    void cleanup().finally(() => process.exit(130));
  });
}

function logTail(path: string, lines = 15): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

async function waitForLog(
  proc: ManagedProcess,
  logPath: string,
  message: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let text = '';
    try {
      text = readFileSync(logPath, 'utf8');
    } catch {
      // not written yet
    }
    if (text.includes(`"msg":"${message}"`)) return;
    if (proc.child.exitCode !== null || proc.child.signalCode !== null)
      throw new Error(
        `${proc.name} exited (${proc.child.exitCode ?? proc.child.signalCode}) before "${message}":\n${logTail(logPath)}`,
      );
    if (Date.now() > deadline) throw new Error(`${proc.name}: no "${message}" after ${timeoutMs} ms`);
    await sleep(250);
  }
}

// ---------------------------------------------------------------- the run

interface Part {
  name: 'worker' | 'bridge' | 'api';
  proc: ManagedProcess;
  pid: number;
  logPath: string;
}

async function run(): Promise<void> {
  console.log(
    `# memory per process, N=${N} Proxies (local provider, ${process.version}, 2 cores), processes from ${FROM === 'dist' ? 'dist/ (compiled)' : 'source (tsx)'}` +
      (WORKER_EXTRA.length > 0 ? `, worker flags ${WORKER_EXTRA.join(' ')}` : ''),
  );
  const envShown = Object.entries(IMAGE_ENV).map(([k, v]) => `${k}=${v}`);
  console.log(
    `  environment: ${envShown.length > 0 ? `the image's (${envShown.join(' ')}) over this shell's` : "this shell's (--inherit-env)"}` +
      (process.env.MALLOC_ARENA_MAX && !IMAGE_ENV.MALLOC_ARENA_MAX
        ? `, MALLOC_ARENA_MAX=${process.env.MALLOC_ARENA_MAX}`
        : ''),
  );
  console.log(`  temp dir ${dir}`);
  const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
  [temporal, kube] = await Promise.all([
    startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
    startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
  ]);
  const etcdPid = findPid('etcd', join(dir, 'kube'));
  const apiserverPid = findPid('kube-apiserver', join(dir, 'kube'));
  for (const pid of [etcdPid, apiserverPid]) if (pid) serverPids.push(pid);
  const kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  await installCrds(kc);
  const objects = createProxyClient(kc);
  const core = kc.makeApiClient(CoreV1Api);
  // Right after the CRDs are installed the apiserver may still answer 429 "storage is
  // (re)initializing"; a process whose first list fails then exits (code 13, see the
  // report), so start them only once Proxies list cleanly several times in a row.
  for (let ok = 0; ok < 5;) {
    try {
      await objects.list();
      ok++;
    } catch {
      ok = 0;
    }
    await sleep(200);
  }

  // The probe target: every probe reaches it through a proxy instance.
  let probes = 0;
  probeTarget = createServer((_req, res) => {
    probes++;
    res.writeHead(204, { 'content-length': 0 }).end();
  });
  probeTarget.keepAliveTimeout = 1_000;
  await new Promise<void>((r) => probeTarget!.listen(0, '127.0.0.1', r));
  const probeURL = `http://127.0.0.1:${(probeTarget.address() as AddressInfo).port}/generate_204`;

  const providersConfig = join(dir, 'providers.yaml');
  writeFileSync(
    providersConfig,
    `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${join(dir, 'state', 'local')}, addressRange: ${ADDRESS_RANGE} }\n`,
  );
  const apiAddr = `127.0.0.1:${await freePort()}`;
  const logs = join(dir, 'logs');
  mkdirSync(logs);
  const common = [
    '--temporal-address',
    temporal.address,
    '--kubeconfig',
    kube.kubeconfigPath,
    '--log-level',
    'info',
  ];
  // Each command takes only the flags of the part it runs.
  const argsOf = {
    worker: [
      ...common,
      '--task-queue',
      TASK_QUEUE,
      '--installation',
      'bench-memory',
      '--providers-config',
      providersConfig,
      '--state-dir',
      join(dir, 'state'),
    ],
    bridge: [...common, '--task-queue', TASK_QUEUE],
    api: [...common, '--discovery-addr', apiAddr],
  };
  // Bench-only instrumentation, loaded before the CLI: on SIGWINCH (not SIGUSR2: the Temporal
  // Runtime shuts the worker down on that one) a full GC of the main
  // isolate, then process.memoryUsage() written to <dir>/mem/<pid>.json. It lets the bench
  // separate retained memory (what grows with N) from garbage not yet collected.
  const memDir = join(dir, 'mem');
  mkdirSync(memDir);
  const gcHook = join(dir, 'gc-on-sigwinch.mjs');
  writeFileSync(
    gcHook,
    `import { writeFileSync, renameSync } from 'node:fs';\n` +
      `import { Session } from 'node:inspector';\n` +
      // --cpu-profile: SIGURG (ignored by default, so harmless when unused)
      // starts a CPU profile of the main isolate and the next one writes it.
      `let profiling;\n` +
      `process.on('SIGURG', () => {\n` +
      `  if (!profiling) {\n` +
      `    profiling = new Session(); profiling.connect();\n` +
      `    profiling.post('Profiler.enable', () => profiling.post('Profiler.start'));\n` +
      `    return;\n` +
      `  }\n` +
      `  const session = profiling; profiling = undefined;\n` +
      `  session.post('Profiler.stop', (err, result) => {\n` +
      `    if (!err) writeFileSync(${JSON.stringify(values['cpu-profile'] ?? dir)} + '/' + (process.argv.find((a) => ['worker', 'bridge', 'api'].includes(a)) ?? 'node') + '-' + process.pid + '.cpuprofile', JSON.stringify(result.profile));\n` +
      `    session.disconnect();\n` +
      `  });\n` +
      `});\n` +
      `process.on('SIGWINCH', () => {\n` +
      `  globalThis.gc();\n` +
      `  const path = ${JSON.stringify(memDir)} + '/' + process.pid + '.json';\n` +
      `  writeFileSync(path + '.tmp', JSON.stringify(process.memoryUsage()));\n` +
      `  renameSync(path + '.tmp', path);\n` +
      `});\n`,
  );
  const startedMessage = { worker: 'worker started', bridge: 'bridge started', api: 'prober started' };
  const parts: Part[] = [];
  for (const name of ['worker', 'bridge', 'api'] as const) {
    const logPath = join(logs, `${name}.log`);
    const proc = spawnServer(
      name,
      process.execPath,
      [
        '--expose-gc',
        '--import',
        pathToFileURL(gcHook).href,
        ...ENTRY,
        name,
        ...argsOf[name],
        ...(name === 'worker' ? WORKER_EXTRA : []),
      ],
      logPath,
      { env: PROCESS_ENV },
    );
    children.push(proc);
    parts.push({ name, proc, pid: proc.child.pid!, logPath });
  }
  const tStart = performance.now();
  await Promise.all(parts.map((p) => waitForLog(p.proc, p.logPath, startedMessage[p.name], 180_000)));
  console.log(
    `${elapsed()}  worker, bridge, api started in ${((performance.now() - tStart) / 1000).toFixed(1)} s` +
      ` (PIDs ${parts.map((p) => `${p.name} ${p.pid}`).join(', ')}); Temporal ${temporal.address}, api ${apiAddr}`,
  );
  const failIfExited = () => {
    for (const p of parts)
      if (p.proc.child.exitCode !== null || p.proc.child.signalCode !== null)
        throw new Error(
          `${p.name} exited (${p.proc.child.exitCode ?? p.proc.child.signalCode}):\n${logTail(p.logPath)}`,
        );
  };

  const rssLine = () =>
    parts
      .map((p) => {
        const s = readProc(p.pid);
        return `${p.name} ${s ? fmtMiB(s.rssKiB) : '?'}`;
      })
      .join(', ');

  async function sampleWindow(ms: number, label: string): Promise<Map<string, ProcSample[]>> {
    const out = new Map<string, ProcSample[]>(parts.map((p) => [p.name, []]));
    const end = Date.now() + ms;
    for (;;) {
      failIfExited();
      for (const p of parts) {
        const s = readProc(p.pid);
        if (s) out.get(p.name)!.push(s);
      }
      if (Date.now() >= end) break;
      await sleep(Math.min(SAMPLE_MS, Math.max(0, end - Date.now())));
    }
    console.log(
      `${elapsed()}  ${label}: ${out.get('worker')!.length} samples over ${ms / 1000} s; ${rssLine()}`,
    );
    return out;
  }

  interface AfterGc {
    rssKiB: number;
    heapUsedKiB: number;
    externalKiB: number;
  }
  /** Full GC in each process, then its RSS and V8 heap (main isolate). */
  async function afterGc(label: string): Promise<Map<string, AfterGc>> {
    for (const p of parts) rmSync(join(memDir, `${p.pid}.json`), { force: true });
    for (const p of parts) process.kill(p.pid, 'SIGWINCH');
    const out = new Map<string, AfterGc>();
    const deadline = Date.now() + 30_000;
    while (out.size < parts.length) {
      failIfExited();
      if (Date.now() > deadline)
        throw new Error(`no memory report after SIGWINCH from ${parts.map((p) => p.name).join(', ')}`);
      await sleep(250);
      for (const p of parts) {
        if (out.has(p.name)) continue;
        let usage: NodeJS.MemoryUsage;
        try {
          usage = JSON.parse(readFileSync(join(memDir, `${p.pid}.json`), 'utf8')) as NodeJS.MemoryUsage;
        } catch {
          continue;
        }
        out.set(p.name, {
          rssKiB: readProc(p.pid)?.rssKiB ?? NaN,
          heapUsedKiB: usage.heapUsed / 1024,
          externalKiB: (usage.external + usage.arrayBuffers) / 1024,
        });
      }
    }
    console.log(
      `${elapsed()}  ${label}, after a full GC: ` +
        parts
          .map((p) => {
            const g = out.get(p.name)!;
            return `${p.name} RSS ${fmtMiB(g.rssKiB)} (heap ${fmtMiB(g.heapUsedKiB)})`;
          })
          .join(', '),
    );
    return out;
  }

  // Idle baseline: let start-up settle (the worker bundles the workflows with webpack at start).
  await sleep(15_000);
  const idle = await sampleWindow(20_000, 'idle baseline');
  const idleGc = await afterGc('idle');
  const startupPeak = new Map(parts.map((p) => [p.name, readProc(p.pid)?.hwmKiB ?? NaN]));
  if (values['idle-only']) {
    console.log(
      `idle only: ${parts.map((p) => `${p.name} RSS median ${fmtMiB(median(idle.get(p.name)!.map((s) => s.rssKiB)))}, start-up peak ${fmtMiB(startupPeak.get(p.name)!)}`).join('; ')}`,
    );
    return;
  }

  // Apply N Proxies.
  await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
  const tApply = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      for (let i = next++; i < N; i = next++) {
        await objects.create({
          metadata: { name: `m${i}`, namespace: NAMESPACE },
          spec: {
            mode: 'Managed',
            provider: 'local',
            attributes: { purpose: 'bench' },
            healthCheck: { probeURL, intervalSeconds: PROBE_INTERVAL_SECONDS },
          },
        });
      }
    }),
  );
  console.log(`${elapsed()}  applied ${N} Proxies in ${((performance.now() - tApply) / 1000).toFixed(1)} s`);

  const counts = async () => {
    const list = await objects.list(NAMESPACE);
    const provisioned = list.items.filter((p) =>
      p.status?.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True'),
    ).length;
    const ready = list.items.filter((p) => p.status?.phase === 'Ready').length;
    return { provisioned, ready };
  };
  const provisionDeadline = Date.now() + Math.max(10 * 60_000, N * 1_500);
  let provisionedAt: number | undefined;
  let readyAt: number | undefined;
  let lastReport = 0;
  let readyDeadline = Infinity;
  for (;;) {
    failIfExited();
    const c = await counts();
    if (provisionedAt === undefined && c.provisioned === N) {
      provisionedAt = performance.now();
      // Ready needs one probe per proxy (immediate for a new one) and a signal and status write each.
      readyDeadline = Date.now() + 5 * 60_000;
    }
    if (c.ready === N) readyAt = performance.now();
    if (Date.now() - lastReport > 15_000 || readyAt !== undefined) {
      lastReport = Date.now();
      console.log(
        `${elapsed()}  Provisioned ${String(c.provisioned).padStart(4)}/${N}  Ready ${String(c.ready).padStart(4)}/${N}  probes ${probes}  RSS ${rssLine()}`,
      );
    }
    if (readyAt !== undefined) break;
    if (provisionedAt === undefined && Date.now() > provisionDeadline)
      throw new Error(
        `only ${c.provisioned}/${N} Provisioned ${((performance.now() - tApply) / 1000).toFixed(0)} s after apply`,
      );
    if (Date.now() > readyDeadline) {
      console.log(
        `${elapsed()}  NOT all Ready 5 min after all Provisioned (${c.ready}/${N}); measuring anyway`,
      );
      break;
    }
    await sleep(3_000);
  }
  const applyToProvisioned = (provisionedAt! - tApply) / 1000;
  const applyToReady = readyAt === undefined ? undefined : (readyAt - tApply) / 1000;
  console.log(
    `${elapsed()}  apply → all Provisioned ${applyToProvisioned.toFixed(1)} s` +
      (applyToReady === undefined ? '' : `, → all Ready ${applyToReady.toFixed(1)} s`),
  );

  // Steady state: a settle (the last status writes; at N = 1,000 the tail of
  // the provisioning, its Events and first sweeps, lasts minutes), then the window.
  await sleep(Number(values['settle-seconds']) * 1000);
  const cpuBefore = new Map(parts.map((p) => [p.name, readProc(p.pid)?.cpuTicks ?? NaN]));
  const tSteady = performance.now();
  const probes0 = probes;
  const signals0 = await proberSignals(apiAddr);
  if (values['cpu-profile']) for (const p of parts) process.kill(p.pid, 'SIGURG');
  const steady = await sampleWindow(STEADY_MS, 'steady state');
  if (values['cpu-profile']) for (const p of parts) process.kill(p.pid, 'SIGURG');
  const signals1 = await proberSignals(apiAddr);
  const steadySeconds = (performance.now() - tSteady) / 1000;
  const final = await counts();
  const steadyGc = await afterGc('steady');

  // ------------------------------------------------------------ report
  const ticksPerSecond = 100; // USER_HZ on Linux
  console.log('');
  console.log(
    `N=${N} Proxies, ${final.ready} Ready at the end; steady window ${steadySeconds.toFixed(0)} s, ` +
      `${((probes - probes0) / steadySeconds).toFixed(1)} probes/s through the proxies; ` +
      `prober signals to workflows in the window: ${
        [...signals1].map(([kind, n]) => `${kind} ${n - (signals0.get(kind) ?? 0)}`).join(', ') ||
        'none (api /metrics unreadable)'
      }`,
  );
  console.log(
    '| process | idle RSS | start-up peak (VmHWM) | steady RSS, median (min-max) | peak VmHWM | after full GC: idle → steady RSS (V8 heap) | per proxy, after GC (as sampled) | CPU |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const kibPerProxy = (kib: number) => `${(kib / N).toFixed(0)} KiB`;
  for (const p of parts) {
    const idleRss = median(idle.get(p.name)!.map((s) => s.rssKiB));
    const rss = steady.get(p.name)!.map((s) => s.rssKiB);
    const last = steady.get(p.name)!.at(-1)!;
    const cpu = (last.cpuTicks - cpuBefore.get(p.name)!) / ticksPerSecond / steadySeconds;
    const gi = idleGc.get(p.name)!;
    const gs = steadyGc.get(p.name)!;
    console.log(
      `| ${p.name} | ${fmtMiB(idleRss)} | ${fmtMiB(startupPeak.get(p.name)!)} | ${fmtMiB(median(rss))} (${fmtMiB(Math.min(...rss))}-${fmtMiB(Math.max(...rss))}) | ${fmtMiB(last.hwmKiB)} | ${fmtMiB(gi.rssKiB)} (${fmtMiB(gi.heapUsedKiB)}) → ${fmtMiB(gs.rssKiB)} (${fmtMiB(gs.heapUsedKiB)}) | ${kibPerProxy(gs.rssKiB - gi.rssKiB)} (${kibPerProxy(median(rss) - idleRss)}) | ${(cpu * 100).toFixed(1)} % of a core |`,
    );
  }
  const total = (m: Map<string, ProcSample[]>) =>
    sum(parts.map((p) => median(m.get(p.name)!.map((s) => s.rssKiB))));
  const totalGc = (m: Map<string, AfterGc>) => sum(parts.map((p) => m.get(p.name)!.rssKiB));
  console.log(
    `| all three | ${fmtMiB(total(idle))} | | ${fmtMiB(total(steady))} | | ${fmtMiB(totalGc(idleGc))} → ${fmtMiB(totalGc(steadyGc))} | ${kibPerProxy(totalGc(steadyGc) - totalGc(idleGc))} (${kibPerProxy(total(steady) - total(idle))}) | |`,
  );
  console.log(
    '(CPU: share of one core during the steady window; per proxy: (steady − idle) / N, from RSS after a full GC, in parentheses from the medians as sampled)',
  );

  console.log('');
  console.log('dev servers (context, not part of the control plane):');
  for (const [name, pid] of [
    ['temporal dev server', temporal.process.child.pid],
    ['kube-apiserver', apiserverPid],
    ['etcd', etcdPid],
  ] as const) {
    const s = pid === undefined ? undefined : readProc(pid);
    console.log(
      `  ${name.padEnd(20)} ${s ? `RSS ${fmtMiB(s.rssKiB)}, peak ${fmtMiB(s.hwmKiB)}` : 'not found'}`,
    );
  }

  console.log('');
  const worker = parts.find((p) => p.name === 'worker')!;
  const kids = parts.map((p) => ({ name: p.name, kids: descendants(p.pid) }));
  const childText = kids
    .map(({ name, kids: k }) =>
      k.length === 0
        ? `${name}: none`
        : `${name}: ${k.length} (${k.map((pid) => `${pid} ${fmtMiB(readProc(pid)?.rssKiB ?? NaN)}`).join(', ')})`,
    )
    .join('; ');
  console.log(`child processes of the measured processes: ${childText}`);
  console.log(
    `local provider: each instance is an in-process server (a node:http forward proxy on its own loopback address ` +
      `inside the worker process; providers/local/provider.ts), not an OS process: the worker has ` +
      `${socketFds(worker.pid)} socket fds and ${readProc(worker.pid)?.threads ?? '?'} threads, so the worker's RSS includes all ${N} instances.`,
  );
  console.log(
    `total wall time ${((performance.now() - t0) / 1000).toFixed(0)} s` +
      ` (apply → all Provisioned ${applyToProvisioned.toFixed(0)} s` +
      (applyToReady === undefined ? '' : `, → all Ready ${applyToReady.toFixed(0)} s`) +
      ')',
  );
}

try {
  await run();
} catch (error) {
  // After SIGINT/SIGTERM the failures are ours: the handler stops everything and exits.
  if (cleaning) await new Promise(() => undefined);
  console.error(`memory bench failed: ${error instanceof Error ? error.message : String(error)}`);
  for (const c of children)
    console.error(`--- ${c.name} log tail:\n${logTail(join(dir, 'logs', `${c.name}.log`))}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}

/** The prober's signal counters by kind (transition, latency, resync) from the api's /metrics; empty when unreadable. */
async function proberSignals(apiAddr: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  try {
    const text = await (await fetch(`http://${apiAddr}/metrics`)).text();
    for (const m of text.matchAll(
      /^egress_prober_signals_total\{[^}]*kind="([a-z]+)"[^}]*\} ([0-9.e+]+)$/gm,
    )) {
      out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[2]));
    }
  } catch {
    // a bench figure, not a failure
  }
  return out;
}
