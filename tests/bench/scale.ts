/**
 * The fleet at several sizes (issue 33), and the memory of each production
 * process (DESIGN: "memory of each process at 1,000 proxies").
 *
 *   npm run bench:scale -- 1000 3000 10000     (sizes in increasing order)
 *   npm run bench:memory -- [N]                (the same bench, one size, default 1000)
 *
 *   options: [--steady-seconds 60] [--settle-seconds 630] [--sample-every 5]
 *            [--lease-seconds 5] [--lease-rounds 3] [--cost-sample 200] [--cpu-profile DIR]
 *            [--from dist|source] [--inherit-env] [--worker-arg "..."]
 *
 * Starts its own Temporal dev server and kube-apiserver (with etcd), installs
 * the CRDs, writes a providers config with the `local` provider, and runs
 * `worker`, `bridge` and `api` as three OS processes, as a user runs them:
 * --from dist (the default) runs the compiled `node dist/cli/entry.js` (and
 * runs `npm run build` first when dist/ is missing or older than a source
 * file), --from source runs them through tsx. They get the image's
 * environment (the Dockerfile's final-stage ENV, e.g. MALLOC_ARENA_MAX=2);
 * --inherit-env gives them this shell's alone. Every process uses the
 * shipped defaults (log level info, drift sweep every 2 min, a 6 h safety
 * poll per Proxy, GC and provider checks on their schedules); the api serves
 * the lease API with a token (auth on).
 *
 * Then the sizes one after another on the same control plane (1,000, then
 * 2,000 more to 3,000, then 7,000 more to 10,000): Managed Proxies on the
 * `local` provider probed at the CRD's default interval (30 s) through their
 * real forward proxies, to a loopback target this bench serves. Per size:
 *  - apply → all Provisioned and → all Ready (counted from a watch), the
 *    rate every 15 s;
 *  - after a settle (--settle-seconds; by default the prober's latency
 *    interval, 10 min, plus 30 s: a Proxy's first latency report after the
 *    one its Ready carried comes that long after, a one-off correction of
 *    a probe timed under the provisioning burst's load, which at 10,000
 *    fills a window started a minute after Ready with about 600 reports a
 *    minute), a steady window: RSS (median) and CPU
 *    of the worker, bridge, api, Temporal dev server, kube-apiserver and
 *    etcd; probes per second, the prober's schedule lag p99 (its histogram
 *    on the api's /metrics) and the api's CPU per probe; RSS after a full GC
 *    (a bench-only preload module, on SIGWINCH);
 *  - after the window (each adds load of its own), first the lease API,
 *    while the machine is as the window left it: acquire+release pairs
 *    from 64 keep-alive clients against bare Hono in a child process, the
 *    api process (its informer catalog of N Proxies, the prober) and a
 *    second api replica started with `--no-prober` (leases only), one
 *    after the other, in --lease-rounds rounds of --lease-seconds each (a
 *    ratio is taken against bare Hono in its own round; the medians are
 *    shown: the steady fleet's own work comes and goes by the second on
 *    two cores, and one short sample caught it or missed it); then the
 *    last drift sweep's duration (its activity in history); billable actions per Ready
 *    proxy-hour over the window, counted from real histories (a sample of
 *    --cost-sample Proxy workflows scaled to N, plus the Schedules'
 *    workflows; the 6 h safety poll rarely fires in a short window:
 *    `npm run bench:cost` measures it compressed); `kubectl get px -A`;
 *    the Web UI's queries for one ProxyPhase (count, and every page of the
 *    list).
 * One table at the end, with how each figure grows from the first size to
 * the last (k in figure ∝ N^k), and the issue's goals at the largest size.
 * With one size it also prints the memory table (idle → steady, per proxy).
 *
 * --cpu-profile DIR writes a V8 CPU profile of each process's main isolate
 * over each steady window and another over the lease load
 * (<command>-<pid>-<time>.cpuprofile).
 *
 * Everything listens on the loopback; all processes and the temp directory
 * are removed at the end, on error, and on SIGINT/SIGTERM.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import {
  CLOCK_TICKS_PER_SECOND,
  descendants,
  findPid,
  type ProcSample,
  readProc,
  socketFds,
} from './proc.js';
import { Client, Connection } from '@temporalio/client';
import { CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';
import { API_VERSION, PROXY_PLURAL } from '../../kube/coordinates.js';
import { createProxyClient, type ProxyClient } from '../../kube/proxies.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { installCrds, installFinalizerPolicy } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { freePort } from '../../local-servers/ports.js';
import { scheduleIds } from '../../cli/schedules.js';
import { spawnServer, type ManagedProcess } from '../../local-servers/process.js';
import { startTemporalDevServer, type TemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { imageEnvironment } from '../helpers/image-env.js';
import { distPath, REPO } from './dist.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { millis, proxyWorkflowActions, scheduleWorkflowActions } from './actions.js';
import { DEFAULT_LATENCY_POLICY } from '../../prober/latency.js';
import { load, quantile, startBareHono, type Sample } from './lease-load.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'steady-seconds': { type: 'string', default: '60' },
    'settle-seconds': { type: 'string', default: String(DEFAULT_LATENCY_POLICY.minIntervalMs / 1000 + 30) },
    'sample-every': { type: 'string', default: '5' },
    from: { type: 'string', default: 'dist' },
    'idle-only': { type: 'boolean', default: false },
    'cpu-profile': { type: 'string' },
    'inherit-env': { type: 'boolean', default: false },
    'worker-arg': { type: 'string', multiple: true, default: [] },
    'lease-seconds': { type: 'string', default: '5' },
    'lease-rounds': { type: 'string', default: '3' },
    'cost-sample': { type: 'string', default: '200' },
  },
});
const FROM = values.from;
if (FROM !== 'dist' && FROM !== 'source') throw new Error(`--from must be dist or source, got ${FROM}`);
const WORKER_EXTRA = values['worker-arg'].flatMap((a) => a.split(' ').filter((x) => x !== ''));
const SIZES = positionals.length > 0 ? positionals.map(Number) : [1000];
for (const [i, n] of SIZES.entries())
  if (!Number.isInteger(n) || n < 1 || (i > 0 && n <= SIZES[i - 1]!))
    throw new Error(`sizes must be positive integers in increasing order, got ${positionals.join(' ')}`);
const COST_SAMPLE = Number(values['cost-sample']);
const LEASE_TOKEN = 'bench-scale-token';
const STEADY_MS = Number(values['steady-seconds']) * 1000;
const SAMPLE_MS = Number(values['sample-every']) * 1000;
const NAMESPACE = 'bench-scale';
const TASK_QUEUE = 'ep-bench-scale';
/** Not used by any test or by `dev`, so a concurrent run elsewhere never collides. */
const ADDRESS_RANGE = '127.94.0.0/16';
const CREATE_CONCURRENCY = 20;
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
  return [distPath('cli/entry.js', (line) => console.log(`${elapsed()}  ${line}`))];
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

const dir = mkdtempSync(join(tmpdir(), 'ep-bench-scale-'));
const children: ManagedProcess[] = [];
const serverPids: number[] = [];
let temporal: TemporalDevServer | undefined;
let kube: LocalKubeApiServer | undefined;
let probeTarget: Server | undefined;
let connection: Connection | undefined;
let stopTracking: (() => void) | undefined;
let cleaning: Promise<void> | undefined;
let cleaned = false;

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    stopTracking?.();
    await connection?.close().catch(() => undefined);
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

interface AfterGc {
  rssKiB: number;
  heapUsedKiB: number;
  externalKiB: number;
}

/** One size's figures, for the summary table and the growth exponents. */
interface SizeFigures {
  n: number;
  /** Proxies applied in this step (the sizes are reached one after another). */
  added: number;
  toProvisioned: number;
  toReady: number | undefined;
  ready: number;
  rssMiB: Record<string, number>;
  cpuPct: Record<string, number>;
  gcRssMiB: Record<string, number>;
  probesPerSecond: number;
  lagP99: number;
  scrapeSeconds: number;
  scrapeMiB: number;
  apiCpuPerProbeMs: number;
  sweepSeconds: number | undefined;
  sweepCompared: number | undefined;
  lease: LeaseFigures | undefined;
  /** The same load on a `--no-prober` replica. */
  leaseOnly: LeaseFigures | undefined;
  actionsPerProxyHour: number | undefined;
  kubectlSeconds: number;
  listCountSeconds: number;
  listAllSeconds: number;
  listed: number;
}

/** One replica's lease figures over the rounds: medians, each ratio against bare Hono in its own round. */
interface LeaseFigures {
  pairsPerSecond: number;
  /** Throughput as a share of bare Hono's: median, and the range over the rounds. */
  ratio: number;
  ratioMin: number;
  ratioMax: number;
  p99: number;
  /** Pair p99 as a multiple of bare Hono's: median. */
  p99Ratio: number;
  bare: number;
  errors: number;
  rounds: number;
}

async function run(): Promise<void> {
  console.log(
    `# scale: ${SIZES.join(', ')} Proxies, one after another (local provider, ${process.version}, 2 cores), processes from ${FROM === 'dist' ? 'dist/ (compiled)' : 'source (tsx)'}` +
      (WORKER_EXTRA.length > 0 ? `, worker flags ${WORKER_EXTRA.join(' ')}` : ''),
  );
  const envShown = Object.entries(IMAGE_ENV).map(([k, v]) => `${k}=${v}`);
  console.log(
    `  environment: ${envShown.length > 0 ? `the image's (${envShown.join(' ')}) over this shell's` : "this shell's (--inherit-env)"}` +
      (process.env.MALLOC_ARENA_MAX && !IMAGE_ENV.MALLOC_ARENA_MAX
        ? `, MALLOC_ARENA_MAX=${process.env.MALLOC_ARENA_MAX}`
        : ''),
  );
  console.log(
    `  temp dir ${dir}; load average at the start ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
  [temporal, kube] = await Promise.all([
    startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
    startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
  ]);
  const etcdPid = findPid('etcd', join(dir, 'kube'));
  const apiserverPid = findPid('kube-apiserver', join(dir, 'kube'));
  for (const pid of [etcdPid, apiserverPid]) if (pid) serverPids.push(pid);
  const servers: Array<{ name: string; pid: number | undefined }> = [
    { name: 'temporal', pid: temporal.process.child.pid },
    { name: 'apiserver', pid: apiserverPid },
    { name: 'etcd', pid: etcdPid },
  ];
  const kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  await installCrds(kc);
  // A cluster-wide install's admission policy (infra/k8s/overlays/cluster-wide).
  await installFinalizerPolicy(kc);
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
  connection = await Connection.connect({ address: temporal.address });
  const client = new Client({ connection });

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
  const apiPort = await freePort();
  const apiAddr = `127.0.0.1:${apiPort}`;
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
      `    if (!err) writeFileSync(${JSON.stringify(values['cpu-profile'] ?? dir)} + '/' + (process.argv.find((a) => ['worker', 'bridge', 'api'].includes(a)) ?? 'node') + '-' + process.pid + '-' + Date.now() + '.cpuprofile', JSON.stringify(result.profile));\n` +
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
      // The api serves the lease API as in production: auth on, request logs at info.
      { env: name === 'api' ? { ...PROCESS_ENV, DISCOVERY_TOKEN: LEASE_TOKEN } : PROCESS_ENV },
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
  // A second api replica that serves leases only: what `--no-prober` is for at this size.
  const leaseOnlyPort = await freePort();
  const leaseOnlyAddr = `127.0.0.1:${leaseOnlyPort}`;
  const leaseOnlyLog = join(logs, 'api-lease-only.log');
  const leaseOnly = spawnServer(
    'api-lease-only',
    process.execPath,
    [...ENTRY, 'api', ...common, '--discovery-addr', leaseOnlyAddr, '--no-prober'],
    leaseOnlyLog,
    { env: { ...PROCESS_ENV, DISCOVERY_TOKEN: LEASE_TOKEN } },
  );
  children.push(leaseOnly);
  await waitForLog(leaseOnly, leaseOnlyLog, 'lease API listening', 180_000);
  const failIfExited = () => {
    if (leaseOnly.child.exitCode !== null || leaseOnly.child.signalCode !== null)
      throw new Error(`the lease-only api exited:\n${logTail(leaseOnlyLog)}`);
    for (const p of parts)
      if (p.proc.child.exitCode !== null || p.proc.child.signalCode !== null)
        throw new Error(
          `${p.name} exited (${p.proc.child.exitCode ?? p.proc.child.signalCode}):\n${logTail(p.logPath)}`,
        );
  };
  /** The three control-plane processes and the three servers, by name. */
  const measured: Array<{ name: string; pid: number | undefined }> = [
    ...parts.map((p) => ({ name: p.name, pid: p.pid })),
    ...servers,
  ];

  const rssLine = () =>
    parts
      .map((p) => {
        const s = readProc(p.pid);
        return `${p.name} ${s ? fmtMiB(s.rssKiB) : '?'}`;
      })
      .join(', ');

  async function sampleWindow(ms: number, label: string): Promise<Map<string, ProcSample[]>> {
    const out = new Map<string, ProcSample[]>(measured.map((p) => [p.name, []]));
    const end = Date.now() + ms;
    for (;;) {
      failIfExited();
      for (const p of measured) {
        const s = p.pid === undefined ? undefined : readProc(p.pid);
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

  // Idle baseline: let start-up settle.
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

  await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
  const tracker = await trackProxies(kc, objects, NAMESPACE);
  stopTracking = () => tracker.stop();
  const results: SizeFigures[] = [];
  let applied = 0;
  for (const N of SIZES) {
    const added = N - applied;
    console.log(`\n${elapsed()}  ---- N = ${N}: applying ${added} more Proxies`);
    const tApply = performance.now();
    let next = applied;
    await Promise.all(
      Array.from({ length: CREATE_CONCURRENCY }, async () => {
        for (let i = next++; i < N; i = next++) {
          await objects.create({
            metadata: { name: `m${i}`, namespace: NAMESPACE },
            // healthCheck.intervalSeconds left to the CRD's default (30 s).
            spec: {
              mode: 'Managed',
              provider: 'local',
              attributes: { purpose: 'bench' },
              healthCheck: { probeURL },
            },
          });
        }
      }),
    );
    applied = N;
    console.log(
      `${elapsed()}  applied ${added} Proxies in ${((performance.now() - tApply) / 1000).toFixed(1)} s`,
    );

    const provisionDeadline = Date.now() + Math.max(10 * 60_000, added * 1_500);
    let provisionedAt: number | undefined;
    let readyAt: number | undefined;
    let lastReport = performance.now();
    let lastProvisioned = tracker.counts().provisioned;
    let readyDeadline = Infinity;
    for (;;) {
      failIfExited();
      const c = tracker.counts();
      if (provisionedAt === undefined && c.provisioned >= N) {
        provisionedAt = performance.now();
        // Ready needs one probe per proxy (immediate for a new one) and a signal and status write each.
        readyDeadline = Date.now() + 5 * 60_000 + N * 30;
      }
      if (c.ready >= N) readyAt = performance.now();
      if (performance.now() - lastReport > 15_000 || readyAt !== undefined) {
        const rate = (c.provisioned - lastProvisioned) / ((performance.now() - lastReport) / 1000);
        lastReport = performance.now();
        lastProvisioned = c.provisioned;
        console.log(
          `${elapsed()}  Provisioned ${String(c.provisioned).padStart(5)}/${N} (${rate.toFixed(1)}/s)  Ready ${String(c.ready).padStart(5)}/${N}  probes ${probes}  RSS ${rssLine()}  load ${loadavg()[0]!.toFixed(1)}`,
        );
      }
      if (readyAt !== undefined) break;
      if (provisionedAt === undefined && Date.now() > provisionDeadline)
        throw new Error(
          `only ${c.provisioned}/${N} Provisioned ${((performance.now() - tApply) / 1000).toFixed(0)} s after apply`,
        );
      if (Date.now() > readyDeadline) {
        console.log(
          `${elapsed()}  NOT all Ready long after all Provisioned (${c.ready}/${N}); measuring anyway`,
        );
        break;
      }
      await sleep(1_000);
    }
    const toProvisioned = (provisionedAt! - tApply) / 1000;
    const toReady = readyAt === undefined ? undefined : (readyAt - tApply) / 1000;
    console.log(
      `${elapsed()}  apply → all Provisioned ${toProvisioned.toFixed(1)} s (${(added / toProvisioned).toFixed(1)}/s)` +
        (toReady === undefined ? '' : `, → all Ready ${toReady.toFixed(1)} s`),
    );

    // Steady state: a settle (the last status writes, Events, first sweeps and
    // first latency corrections), then the window.
    await sleep(Number(values['settle-seconds']) * 1000);
    const cpuBefore = new Map(
      measured.map((p) => [p.name, p.pid === undefined ? NaN : (readProc(p.pid)?.cpuTicks ?? NaN)]),
    );
    const tSteady = performance.now();
    const steadyFrom = Date.now();
    const probes0 = probes;
    const metrics0 = await proberMetrics(apiAddr);
    if (values['cpu-profile']) for (const p of parts) process.kill(p.pid, 'SIGURG');
    const steady = await sampleWindow(STEADY_MS, 'steady state');
    if (values['cpu-profile']) for (const p of parts) process.kill(p.pid, 'SIGURG');
    const metrics1 = await proberMetrics(apiAddr);
    const steadyTo = Date.now();
    const steadySeconds = (performance.now() - tSteady) / 1000;
    const steadyGc = await afterGc('steady');
    const cpuPct: Record<string, number> = {};
    const rssMiB: Record<string, number> = {};
    const gcRssMiB: Record<string, number> = {};
    for (const p of measured) {
      const samples = steady.get(p.name)!;
      const last = samples.at(-1);
      cpuPct[p.name] = last
        ? ((last.cpuTicks - cpuBefore.get(p.name)!) / CLOCK_TICKS_PER_SECOND / steadySeconds) * 100
        : NaN;
      rssMiB[p.name] = mib(median(samples.map((s) => s.rssKiB)));
    }
    for (const p of parts) gcRssMiB[p.name] = mib(steadyGc.get(p.name)!.rssKiB);
    const windowProbes = probes - probes0;
    const lagP99 = histogramQuantile(metrics0.lag, metrics1.lag, 0.99);
    const signals = [...metrics1.signals]
      .map(([kind, n]) => `${kind} ${n - (metrics0.signals.get(kind) ?? 0)}`)
      .join(', ');
    console.log(
      `${elapsed()}  steady: ${(windowProbes / steadySeconds).toFixed(1)} probes/s, prober lag p99 ≤ ${lagP99} s, signals ${signals || '?'}; CPU ${measured.map((p) => `${p.name} ${cpuPct[p.name]!.toFixed(1)} %`).join(', ')}`,
    );

    // Outside the steady window: each would add its own load to it. The lease
    // API first, on the machine as the window left it rather than in the wake
    // of a 10,000-object listing.
    // --cpu-profile: a second profile of each process over the lease load.
    if (values['cpu-profile']) for (const p of parts) process.kill(p.pid, 'SIGURG');
    const leases = await leaseFigures(apiPort, leaseOnlyPort);
    const lease = leases?.api;
    const leaseOnly = leases?.leaseOnly;
    if (values['cpu-profile']) for (const p of parts) process.kill(p.pid, 'SIGURG');
    const sweep = await timedDriftSweep(client);
    const actionsPerProxyHour = await windowCost(
      client,
      objects,
      steadyFrom,
      steadyTo,
      N,
      tracker.counts().ready,
    );
    const kubectl = timeKubectl(binDir, kube.kubeconfigPath);
    const listing = await timeVisibility(client);
    console.log(
      `${elapsed()}  drift sweep ${sweep ? `${sweep.seconds.toFixed(2)} s comparing ${sweep.compared ?? '?'}` : 'did not run'}; ` +
        `actions per Ready proxy-hour in the window ${actionsPerProxyHour?.toFixed(2) ?? '?'}; ` +
        `kubectl get px -A ${kubectl.seconds.toFixed(2)} s (${kubectl.lines} lines); ` +
        `visibility: count ${listing.countSeconds.toFixed(2)} s, list all ${listing.listSeconds.toFixed(2)} s (${listing.listed} Ready); ` +
        (lease
          ? `lease API (medians of ${lease.rounds} rounds) ${describeLease(lease)}`
          : 'lease API not measured') +
        (leaseOnly ? `; lease-only replica (--no-prober) ${describeLease(leaseOnly)}` : ''),
    );
    results.push({
      n: N,
      added,
      toProvisioned,
      toReady,
      ready: tracker.counts().ready,
      rssMiB,
      cpuPct,
      gcRssMiB,
      probesPerSecond: windowProbes / steadySeconds,
      lagP99,
      scrapeSeconds: metrics1.scrapeSeconds,
      scrapeMiB: metrics1.scrapeBytes / 2 ** 20,
      apiCpuPerProbeMs: windowProbes > 0 ? ((cpuPct.api! / 100) * steadySeconds * 1000) / windowProbes : NaN,
      sweepSeconds: sweep?.seconds,
      sweepCompared: sweep?.compared,
      lease,
      leaseOnly,
      actionsPerProxyHour,
      kubectlSeconds: kubectl.seconds,
      listCountSeconds: listing.countSeconds,
      listAllSeconds: listing.listSeconds,
      listed: listing.listed,
    });
    if (SIZES.length === 1)
      memoryReport(N, idle, idleGc, startupPeak, steady, steadyGc, steadySeconds, cpuBefore);
  }
  summary(results);

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
      `${socketFds(worker.pid)} socket fds and ${readProc(worker.pid)?.threads ?? '?'} threads, so the worker's RSS includes all ${applied} instances.`,
  );
  console.log(
    `total wall time ${((performance.now() - t0) / 1000).toFixed(0)} s; load average at the end ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );

  /** The memory bench's table for one size (idle → steady, after GC, per proxy). */
  function memoryReport(
    N: number,
    idle: Map<string, ProcSample[]>,
    idleGc: Map<string, AfterGc>,
    startupPeak: Map<string, number>,
    steady: Map<string, ProcSample[]>,
    steadyGc: Map<string, AfterGc>,
    steadySeconds: number,
    cpuBefore: Map<string, number>,
  ): void {
    console.log('');
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
      const cpu = (last.cpuTicks - cpuBefore.get(p.name)!) / CLOCK_TICKS_PER_SECOND / steadySeconds;
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
  }
}

/** Proxies' Provisioned and Ready as one watch sees them; a watch that ends is started again (its first events relist). */
async function trackProxies(
  kc: KubeConfig,
  objects: ProxyClient,
  namespace: string,
): Promise<{ counts(): { provisioned: number; ready: number }; stop(): void }> {
  const provisioned = new Set<string>();
  const ready = new Set<string>();
  const note = (p: Proxy): void => {
    const name = p.metadata.name;
    if (p.status?.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True'))
      provisioned.add(name);
    else provisioned.delete(name);
    if (p.status?.phase === 'Ready') ready.add(name);
    else ready.delete(name);
  };
  let stopped = false;
  let current: { abort(): void } | undefined;
  const watch = async (): Promise<void> => {
    // A list first (also after a watch ended): the watch then starts from its resourceVersion.
    const list = await objects.list(namespace);
    for (const p of list.items) note(p);
    current = await new Watch(kc).watch(
      `/apis/${API_VERSION}/namespaces/${namespace}/${PROXY_PLURAL}`,
      { resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true },
      (type: string, p: Proxy) => {
        if (type === 'ADDED' || type === 'MODIFIED') note(p);
      },
      () => {
        if (!stopped) setTimeout(() => void watch().catch(() => setTimeout(() => void watch(), 1_000)), 200);
      },
    );
  };
  await watch();
  return {
    counts: () => ({ provisioned: provisioned.size, ready: ready.size }),
    stop: () => {
      stopped = true;
      current?.abort();
    },
  };
}

interface ProberMetrics {
  /** How long the api took to answer /metrics, and how big the answer was (a Prometheus scrape). */
  scrapeSeconds: number;
  scrapeBytes: number;
  /** Cumulative bucket counts of the schedule-lag histogram, by upper bound (seconds). */
  lag: Map<number, number>;
  signals: Map<string, number>;
}

/** The prober's schedule-lag histogram and signal counters from the api's /metrics. */
async function proberMetrics(apiAddr: string): Promise<ProberMetrics> {
  const out: ProberMetrics = { scrapeSeconds: NaN, scrapeBytes: NaN, lag: new Map(), signals: new Map() };
  try {
    const t = performance.now();
    const text = await (
      await fetch(`http://${apiAddr}/metrics`, { headers: { authorization: `Bearer ${LEASE_TOKEN}` } })
    ).text();
    out.scrapeSeconds = (performance.now() - t) / 1000;
    out.scrapeBytes = Buffer.byteLength(text);
    for (const m of text.matchAll(
      /^egress_prober_schedule_lag_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)$/gm,
    )) {
      out.lag.set(m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2]));
    }
    for (const m of text.matchAll(
      /^egress_prober_signals_total\{[^}]*kind="([a-z]+)"[^}]*\} ([0-9.e+]+)$/gm,
    )) {
      out.signals.set(m[1]!, (out.signals.get(m[1]!) ?? 0) + Number(m[2]));
    }
  } catch {
    // a bench figure, not a failure
  }
  return out;
}

/** The smallest bucket bound holding quantile q of the observations between two scrapes (Infinity past the last bound). */
function histogramQuantile(before: Map<number, number>, after: Map<number, number>, q: number): number {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const total = (after.get(Infinity) ?? 0) - (before.get(Infinity) ?? 0);
  if (total <= 0) return NaN;
  for (const le of bounds) {
    if ((after.get(le) ?? 0) - (before.get(le) ?? 0) >= q * total) return le;
  }
  return Infinity;
}

/**
 * A drift sweep over the fleet as it is now: its Schedule triggered, its run
 * waited for, then its sweepDrift activity's time and how many Proxies it
 * compared (from the history).
 */
async function timedDriftSweep(client: Client): Promise<{ seconds: number; compared?: number } | undefined> {
  const schedule = client.schedule.getHandle(scheduleIds(TASK_QUEUE).driftSweep);
  const seen = new Set(
    (await schedule.describe()).info.recentActions.map((a) => a.action.workflow.workflowId),
  );
  await schedule.trigger();
  const deadline = Date.now() + 5 * 60_000;
  let workflowId: string | undefined;
  while (workflowId === undefined) {
    if (Date.now() > deadline) return undefined;
    await sleep(500);
    workflowId = (await schedule.describe()).info.recentActions
      .map((a) => a.action.workflow.workflowId)
      .find((id) => !seen.has(id));
  }
  const handle = client.workflow.getHandle(workflowId);
  await handle.result();
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes);
  const done = events.find((e) => e.activityTaskCompletedEventAttributes);
  if (!scheduled || !done) return undefined;
  let compared: number | undefined;
  const data = done.activityTaskCompletedEventAttributes?.result?.payloads?.[0]?.data;
  if (data) {
    const result = JSON.parse(Buffer.from(data).toString('utf8')) as {
      providers?: Array<{ compared?: number }>;
    };
    compared = result.providers?.reduce((sum, p) => sum + (p.compared ?? 0), 0);
  }
  return {
    seconds: (millis(done) - millis(scheduled)) / 1000,
    ...(compared !== undefined ? { compared } : {}),
  };
}

/**
 * Billable actions per Ready proxy-hour over the steady window: the Proxy
 * workflows' from a random sample of their histories (scaled to all N), the
 * Schedules' workflows in full. The per-Proxy safety poll (6 h) rarely
 * fires in a short window; the cost bench measures it (compressed).
 */
async function windowCost(
  client: Client,
  objects: ProxyClient,
  from: number,
  to: number,
  n: number,
  ready: number,
): Promise<number | undefined> {
  try {
    // A random sample of the fleet: the visibility list's order (newest
    // first) would take only Proxies made last, whose first latency report
    // (about 10 min after the first probe) has not come yet.
    const fleet = (await objects.list(NAMESPACE)).items;
    const sample: string[] = [];
    for (let i = 0; i < Math.min(COST_SAMPLE, fleet.length); i++) {
      const j = i + Math.floor(Math.random() * (fleet.length - i));
      [fleet[i], fleet[j]] = [fleet[j]!, fleet[i]!];
      const { name, namespace, uid } = fleet[i]!.metadata;
      sample.push(proxyWorkflowId({ name, namespace: namespace ?? NAMESPACE, uid: uid ?? '' }));
    }
    const proxyActions = await proxyWorkflowActions(client, sample, from, to);
    const scheduleActions = await scheduleWorkflowActions(client, from, to);
    const hours = (to - from) / 3_600_000;
    if (sample.length === 0 || ready === 0) return undefined;
    return ((proxyActions / sample.length) * n + scheduleActions) / ready / hours;
  } catch (error) {
    console.log(`cost not counted: ${(error as Error).message}`);
    return undefined;
  }
}

/** `kubectl get px -A`, as a user types it (the table with the CRD's printer columns). */
function timeKubectl(binDir: string, kubeconfig: string): { seconds: number; lines: number } {
  const t = performance.now();
  const out = spawnSync(join(binDir, 'kubectl'), ['--kubeconfig', kubeconfig, 'get', 'px', '-A'], {
    encoding: 'utf8',
    maxBuffer: 256 * 2 ** 20,
  });
  const seconds = (performance.now() - t) / 1000;
  if (out.status !== 0) throw new Error(`kubectl get px -A failed: ${out.stderr}`);
  return { seconds, lines: out.stdout.trimEnd().split('\n').length - 1 };
}

/** The Web UI's queries for one ProxyPhase: the count it shows, and every page of the list. */
async function timeVisibility(
  client: Client,
): Promise<{ countSeconds: number; listSeconds: number; listed: number }> {
  const query = `WorkflowType = 'proxyWorkflow' AND ProxyPhase = 'Ready'`;
  let t = performance.now();
  await client.workflow.count(query);
  const countSeconds = (performance.now() - t) / 1000;
  t = performance.now();
  let listed = 0;
  for await (const _ of client.workflow.list({ query, pageSize: 1000 })) listed++;
  return { countSeconds, listSeconds: (performance.now() - t) / 1000, listed };
}

/**
 * Acquire+release pairs against bare Hono, the api process (auth on, request
 * logs, the prober) and a lease-only replica (`--no-prober`), one after the
 * other, --lease-rounds times. Each replica has its own memory store: the
 * figure is one replica's.
 */
async function leaseFigures(
  apiPort: number,
  leaseOnlyPort: number,
): Promise<{ api: LeaseFigures; leaseOnly: LeaseFigures } | undefined> {
  const seconds = Number(values['lease-seconds']);
  const rounds = Math.max(1, Math.floor(Number(values['lease-rounds'])));
  if (!(seconds > 0)) return undefined;
  const opts = { token: LEASE_TOKEN, clients: 64, warmupMs: 1_500, measureMs: seconds * 1000 };
  const bare = await startBareHono();
  const samples = { bare: [] as Sample[], api: [] as Sample[], leaseOnly: [] as Sample[] };
  try {
    for (let i = 0; i < rounds; i++) {
      samples.bare.push(await load({ ...opts, ports: [bare.port] }));
      samples.api.push(await load({ ...opts, ports: [apiPort] }));
      samples.leaseOnly.push(await load({ ...opts, ports: [leaseOnlyPort] }));
    }
  } finally {
    bare.stop();
  }
  const rate = (s: Sample) => s.pairs / s.seconds;
  const figures = (of: Sample[]): LeaseFigures => {
    const ratios = of.map((s, i) => rate(s) / rate(samples.bare[i]!));
    return {
      pairsPerSecond: median(of.map(rate)),
      ratio: median(ratios),
      ratioMin: Math.min(...ratios),
      ratioMax: Math.max(...ratios),
      p99: median(of.map((s) => quantile(s.pair, 0.99))),
      p99Ratio: median(of.map((s, i) => quantile(s.pair, 0.99) / quantile(samples.bare[i]!.pair, 0.99))),
      bare: median(samples.bare.map(rate)),
      errors: of.reduce((n, s) => n + s.errors, 0),
      rounds,
    };
  };
  return { api: figures(samples.api), leaseOnly: figures(samples.leaseOnly) };
}

/** One replica's lease figures on one line. */
function describeLease(l: LeaseFigures): string {
  return `${l.pairsPerSecond.toFixed(0)} pairs/s, ${l.ratio.toFixed(2)} (${l.ratioMin.toFixed(2)}-${l.ratioMax.toFixed(2)}) of bare Hono's ${l.bare.toFixed(0)}, pair p99 ${l.p99.toFixed(1)} ms (${l.p99Ratio.toFixed(2)}x), ${l.errors} errors`;
}

/** One table for all sizes, then how each figure grows with N (the exponent k in figure ∝ N^k between sizes). */
function summary(results: SizeFigures[]): void {
  const f = (v: number | undefined, d = 1) => (v === undefined || Number.isNaN(v) ? '?' : v.toFixed(d));
  console.log('\n## scale: one row per size (steady figures over the window after all Ready)');
  const columns: Array<[string, (r: SizeFigures) => number | undefined, number]> = [
    ['apply→Provisioned s', (r) => r.toProvisioned, 1],
    ['Provisioned/s', (r) => r.added / r.toProvisioned, 1],
    ['apply→Ready s', (r) => r.toReady, 1],
    ['worker RSS MiB', (r) => r.rssMiB.worker, 0],
    ['bridge RSS MiB', (r) => r.rssMiB.bridge, 0],
    ['api RSS MiB', (r) => r.rssMiB.api, 0],
    ['worker CPU %', (r) => r.cpuPct.worker, 1],
    ['bridge CPU %', (r) => r.cpuPct.bridge, 1],
    ['api CPU %', (r) => r.cpuPct.api, 1],
    ['temporal RSS MiB', (r) => r.rssMiB.temporal, 0],
    ['temporal CPU %', (r) => r.cpuPct.temporal, 1],
    ['apiserver RSS MiB', (r) => r.rssMiB.apiserver, 0],
    ['apiserver CPU %', (r) => r.cpuPct.apiserver, 1],
    ['etcd RSS MiB', (r) => r.rssMiB.etcd, 0],
    ['etcd CPU %', (r) => r.cpuPct.etcd, 1],
    ['probes/s', (r) => r.probesPerSecond, 1],
    ['prober lag p99 ≤ s', (r) => r.lagP99, 3],
    ['api CPU ms/probe', (r) => r.apiCpuPerProbeMs, 2],
    ['api /metrics scrape s', (r) => r.scrapeSeconds, 2],
    ['api /metrics MiB', (r) => r.scrapeMiB, 1],
    ['drift sweep s', (r) => r.sweepSeconds, 2],
    ['lease pairs/s', (r) => r.lease?.pairsPerSecond, 0],
    ['lease x bare', (r) => r.lease?.ratio, 2],
    ['lease p99 x bare', (r) => r.lease?.p99Ratio, 2],
    ['lease-only replica x bare', (r) => r.leaseOnly?.ratio, 2],
    ['lease-only p99 x bare', (r) => r.leaseOnly?.p99Ratio, 2],
    ['actions/Ready proxy-h', (r) => r.actionsPerProxyHour, 2],
    ['kubectl get px -A s', (r) => r.kubectlSeconds, 2],
    ['visibility count s', (r) => r.listCountSeconds, 2],
    ['visibility list s', (r) => r.listAllSeconds, 2],
  ];
  console.log(
    `| figure | ${results.map((r) => `N=${r.n}`).join(' | ')} |${results.length > 1 ? ' growth k (∝ N^k) |' : ''}`,
  );
  console.log(`|---|${results.map(() => '---|').join('')}${results.length > 1 ? '---|' : ''}`);
  for (const [name, get, d] of columns) {
    const vals = results.map(get);
    let growth = '';
    if (results.length > 1) {
      const first = vals[0];
      const last = vals.at(-1);
      const k =
        first !== undefined && last !== undefined && first > 0 && last > 0
          ? Math.log(last / first) / Math.log(results.at(-1)!.n / results[0]!.n)
          : NaN;
      growth = ` ${Number.isNaN(k) ? '?' : k.toFixed(2)}${k > 1.1 ? ' (faster than linear)' : ''} |`;
    }
    console.log(`| ${name} | ${vals.map((v) => f(v, d)).join(' | ')} |${growth}`);
  }
  console.log(
    '(growth k: from the first size to the last; 1 is linear in N, 0 is flat. CPU % is of one core. The lease API runs with auth on and info request logs, against bare Hono in the same run)',
  );
  const last = results.at(-1)!;
  const checks: Array<[string, boolean | undefined]> = [
    [`all ${last.n} Ready`, last.ready >= last.n],
    ['worker ≤ 1 GiB', (last.rssMiB.worker ?? Infinity) <= 1024],
    ['bridge ≤ 512 MiB', (last.rssMiB.bridge ?? Infinity) <= 512],
    ['api ≤ 512 MiB', (last.rssMiB.api ?? Infinity) <= 512],
    ['≤ 3 actions per Ready proxy-hour', (last.actionsPerProxyHour ?? Infinity) <= 3],
    ['prober on schedule (lag p99 ≤ 1 s)', Number.isNaN(last.lagP99) ? undefined : last.lagP99 <= 1],
    [
      'lease API ≥ 0.5 of bare Hono (the probing replica)',
      last.lease !== undefined && last.lease.ratio >= 0.5,
    ],
    [
      'lease API pair p99 ≤ 2x bare Hono (the probing replica)',
      last.lease !== undefined && last.lease.p99Ratio <= 2,
    ],
    ['lease-only replica ≥ 0.5 of bare Hono', last.leaseOnly !== undefined && last.leaseOnly.ratio >= 0.5],
  ];
  console.log(
    `at N=${last.n}: ${checks.map(([what, ok]) => `${what}: ${ok === undefined ? '? (no probe in the window)' : ok ? 'yes' : 'NO'}`).join('; ')}`,
  );
}

try {
  await run();
} catch (error) {
  // After SIGINT/SIGTERM the failures are ours: the handler stops everything and exits.
  if (cleaning) await new Promise(() => undefined);
  console.error(`scale bench failed: ${error instanceof Error ? error.message : String(error)}`);
  for (const c of children)
    console.error(`--- ${c.name} log tail:\n${logTail(join(dir, 'logs', `${c.name}.log`))}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
