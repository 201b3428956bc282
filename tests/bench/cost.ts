/**
 * Steady-state Temporal cost benchmark (issue 10, DESIGN.md §6).
 *
 *   npm run bench:cost -- [--n 200] [--window 5m] [--outage 10m] [--cases steady,jitter,outage]
 *
 * Starts its own Temporal dev server and kube-apiserver, runs the real
 * worker (with the drift sweep, provider-check and orphan-GC Schedules at
 * their defaults), bridge and api process (lease API and prober) in this
 * process, brings N `local` Proxies to Ready, then counts billable actions
 * from the real workflow histories over each window:
 *
 *   steady  the fleet as it is;
 *   jitter  the probe target answers after a random 5-400 ms, so the prober
 *           sends latency reports;
 *   outage  every call to the provider fails (Transient) for --outage; prints
 *           provider calls per second and the time to recover;
 *   pool    a ProxyPool of --pool-replicas members is made and
 *           settles; its workflow's actions over a window are counted,
 *           with its resync compressed as the safety poll is and scaled to
 *           the 30 min default: actions per pool-hour.
 *   autoscale  (last) a ProxyPool with autoscaling (min 2, max 20,
 *           maxLeases 5) under a steady demand of --demand crawler sessions
 *           (3 s leases, released and taken again, through the lease API):
 *           once its size settles, its workflow's actions over the window
 *           (the api's demand reports included), per pool-hour at the
 *           default resync.
 *
 * Billable actions, counted per history event inside the window: workflow
 * start and continue-as-new (1; a schedule-started run 3, the note's figure
 * for a schedule fire), each activity attempt (scheduled + retries), timer
 * started, signal, search-attribute upsert, child workflow, external signal,
 * and local activities as one action per workflow task that ran any
 * (a local-activity batch). Heartbeats are not in histories: the local
 * provider's calls finish long before the first heartbeat (3 s) is due.
 *
 * The per-proxy safety poll is compressed (default: half the window) so its
 * cost is measured, not assumed; "at the defaults" scales the Proxy
 * workflows' timer-driven part to the 6 h default. Schedules run at their
 * real defaults, so their cost is measured as shipped.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { parseDuration, readApiConfig } from '../../api/config.js';
import { startApi } from '../../cli/processes.js';
import { ensureSchedules } from '../../cli/schedules.js';
import { bundleWorkflows, createProxyWorker } from '../../cli/worker.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { createBridge } from '../../k8s-bridge/bridge.js';
import { buildProviders, parseProvidersConfig, type ProviderRegistry } from '../../providers/config.js';
import { providerError } from '../../providers/errors.js';
import type { Provider } from '../../providers/types.js';
import { createProxyClient } from '../../kube/proxies.js';
import { createProxyPoolClient } from '../../kube/proxy-pools.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { DEFAULT_POOL_TIMING } from '../../workflows/pool/types.js';
import { DRIFT_SWEEP_DEFAULTS } from '../../workflows/drift-sweep/types.js';
import { DEFAULT_TIMING } from '../../workflows/proxy/types.js';
import { runLeaseRamp } from '../helpers/lease-load.js';
import { sampleLoad } from './plane.js';
import { countActions, KIND_ORDER, millis, type Kind, type SignalKind, type Source } from './actions.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '200' },
    window: { type: 'string', default: '5m' },
    outage: { type: 'string', default: '10m' },
    cases: { type: 'string', default: 'steady,jitter,outage,pool,autoscale' },
    demand: { type: 'string', default: '30' },
    'pool-replicas': { type: 'string', default: '20' },
    'safety-poll': { type: 'string' },
  },
});
const N = Number(args.n);
const WINDOW_MS = parseDuration(args.window);
const OUTAGE_MS = parseDuration(args.outage);
const CASES = new Set(args.cases.split(','));
const SWEEP_MS = DRIFT_SWEEP_DEFAULTS.intervalMs;
const SAFETY_MS = args['safety-poll'] ? parseDuration(args['safety-poll']) : Math.round(WINDOW_MS / 2);
if (!(N > 0) || WINDOW_MS < 2 * SWEEP_MS) {
  throw new Error(
    `--n must be positive and --window at least two sweep periods (${(2 * SWEEP_MS) / 1000} s)`,
  );
}

Runtime.install({ logger: new DefaultLogger('ERROR') });
const logger = pino({ level: process.env.EP_BENCH_LOG_LEVEL ?? 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'ep-bench-cost-'));
const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
const [temporalServer, kube] = await Promise.all([
  startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
  startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
]);
const kc = new KubeConfig();
kc.loadFromFile(kube.kubeconfigPath);
await installCrds(kc);
const objects = createProxyClient(kc);
const pools = createProxyPoolClient(kc);
const core = kc.makeApiClient(CoreV1Api);
const connection = await Connection.connect({ address: temporalServer.address });
const client = new Client({ connection });
const native = await NativeConnection.connect({ address: temporalServer.address });

// The provider as the worker sees it: the real local provider behind a
// switch that makes every call fail (the outage) and a call counter.
const base = buildProviders(
  parseProvidersConfig(
    `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: 127.93.0.0/16 }\n`,
    'bench',
  ),
  { logger, stateRoot: dir, installation: 'bench' },
);
const inner = base.get('local')!;
let outage = false;
let providerCalls = 0;
const guard = <T>(operation: 'create' | 'get' | 'delete' | 'list', call: () => Promise<T>): Promise<T> => {
  providerCalls += 1;
  if (outage) {
    return Promise.reject(
      providerError({
        errorClass: 'Transient',
        operation,
        provider: 'local',
        instance: '',
        message: 'outage',
      }),
    );
  }
  return call();
};
const local: Provider = {
  name: inner.name,
  type: inner.type,
  ...(inner.capabilities ? { capabilities: inner.capabilities } : {}),
  create: (req, signal) => guard('create', () => inner.create(req, signal)),
  get: (id, signal) => guard('get', () => inner.get(id, signal)),
  delete: (id, signal) => guard('delete', () => inner.delete(id, signal)),
  listByTag: (signal) => guard('list', () => inner.listByTag(signal)),
  close: () => inner.close?.() ?? Promise.resolve(),
};
const registry: ProviderRegistry = {
  get: (n) => (n === 'local' ? local : undefined),
  names: () => ['local'],
  close: () => base.close(),
};

// The probe target: 204 after a delay the jitter case makes random.
let jitter = false;
const target: Server = createServer((_req, res) => {
  const delay = jitter ? 5 + Math.floor(Math.random() * 395) : 0;
  setTimeout(() => res.writeHead(204).end(), delay);
});
await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
const targetPort = (target.address() as { port: number }).port;

const taskQueue = 'bench-cost';
const worker = await createProxyWorker({
  connection: native,
  namespace: 'default',
  taskQueue,
  kubeConfig: kc,
  registry,
  installation: 'bench',
  logger,
  workflowBundle: await bundleWorkflows(),
  maxCachedWorkflows: 2 * N,
  timing: { ...DEFAULT_TIMING, provisioningPollMs: 1_000, deletionPollMs: 1_000, safetyPollMs: SAFETY_MS },
  driftSweepOn: true,
});
const running = worker.run();
const schedules = await ensureSchedules(
  client,
  {
    taskQueue,
    gc: { intervalMs: 10 * 60_000 },
    providerChecks: { intervalMs: 60_000 },
    driftSweep: { intervalMs: SWEEP_MS },
  },
  logger,
);
// The pool's resync compressed like the safety poll, so its cost is measured, then scaled.
const bridge = createBridge({
  kubeConfig: kc,
  client,
  taskQueue,
  logger,
  poolTiming: { resyncMs: SAFETY_MS },
});
await bridge.start();
const api = await startApi(
  readApiConfig({}, { discoveryAddr: '127.0.0.1:0' }),
  { temporalAddress: temporalServer.address, temporalNamespace: 'default' },
  kc,
  logger,
);

const NS = 'bench-cost';
function listProxies(): Promise<Proxy[]> {
  return objects.listAll({ namespaces: [NS], pageSize: 500 });
}
const readyCount = async (test: (p: Proxy) => boolean = (p) => p.status?.phase === 'Ready') =>
  (await listProxies()).filter(test).length;
async function waitUntil(what: string, test: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const t0 = Date.now();
  while (!(await test())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1_000));
  }
  return Date.now() - t0;
}
const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface WindowCount {
  bySource: Map<Source, number>;
  byKind: Map<Kind, number>;
  signals: Map<SignalKind, number>;
  timersFired: number;
  proxies: number;
}

async function countWindow(from: number, to: number): Promise<WindowCount> {
  const bySource = new Map<Source, number>();
  const byKind = new Map<Kind, number>();
  const signals = new Map<SignalKind, number>();
  let timersFired = 0;
  const executions: Array<{ workflowId: string; runId: string; type: string }> = [];
  for await (const w of client.workflow.list()) {
    executions.push({ workflowId: w.workflowId, runId: w.runId, type: w.type });
  }
  for (let i = 0; i < executions.length; i += 32) {
    await Promise.all(
      executions.slice(i, i + 32).map(async ({ workflowId, runId, type }) => {
        const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
        const events = history.events ?? [];
        for (const [source, n] of countActions(type, events, from, to, signals, byKind)) {
          bySource.set(source, (bySource.get(source) ?? 0) + n);
        }
        if (type === 'proxyWorkflow') {
          timersFired += events.filter(
            (e) => e.timerFiredEventAttributes && millis(e) >= from && millis(e) < to,
          ).length;
        }
      }),
    );
  }
  return { bySource, byKind, signals, timersFired, proxies: N };
}

/** The 1-minute load average, sampled every 10 s while a window runs: the figures carry their machine's load. */
function report(label: string, c: WindowCount, windowMs: number, load: string): number {
  const hours = windowMs / 3_600_000;
  const per = (n: number) => n / c.proxies / hours;
  const total = [...c.bySource.values()].reduce((a, b) => a + b, 0);
  console.log(`\n## ${label}: ${c.proxies} Ready proxies, window ${(windowMs / 1000).toFixed(0)} s, ${load}`);
  const order: Source[] = [
    'proxy:timer-driven',
    'proxy:signals',
    'proxy:other',
    'drift sweep',
    'provider checks',
    'orphan gc',
  ];
  for (const s of order) {
    const n = c.bySource.get(s) ?? 0;
    console.log(
      `  ${s.padEnd(20)} ${String(n).padStart(6)} actions  ${per(n).toFixed(2).padStart(7)} per proxy-hour`,
    );
  }
  console.log(
    `  ${'all sources'.padEnd(20)} ${String(total).padStart(6)} actions  ${per(total).toFixed(2).padStart(7)} per proxy-hour (safety poll ${SAFETY_MS / 1000} s)`,
  );
  const byKind = KIND_ORDER.filter((k) => (c.byKind.get(k) ?? 0) > 0)
    .map((k) => `${k} ${c.byKind.get(k)}`)
    .join(', ');
  console.log(`  by kind: ${byKind || 'none'}`);
  const kinds = [...c.signals].map(([kind, n]) => `${kind} ${n}`).join(', ');
  console.log(`  signals: ${kinds || 'none'}`);
  // The safety poll's part scaled from the compressed poll to the 6 h default.
  const timerDriven = c.bySource.get('proxy:timer-driven') ?? 0;
  const scaled = total - timerDriven + timerDriven * (SAFETY_MS / DEFAULT_TIMING.safetyPollMs);
  console.log(
    `  at the defaults (safety poll ${DEFAULT_TIMING.safetyPollMs / 3_600_000} h, sweep ${SWEEP_MS / 1000} s): ${per(scaled).toFixed(2)} actions per Ready proxy-hour` +
      (c.timersFired > 0 ? `; ${(timerDriven / c.timersFired).toFixed(2)} actions per safety poll` : ''),
  );
  return per(scaled);
}

console.log(
  `# cost benchmark: N=${N}, ${process.version}, 2 cores; sweep ${SWEEP_MS / 1000} s, provider checks 60 s, orphan GC 600 s, safety poll ${SAFETY_MS / 1000} s (compressed), schedules ${JSON.stringify(schedules)}`,
);
await core.createNamespace({ body: { metadata: { name: NS } } });
const t0 = Date.now();
for (let i = 0; i < N; i += 50) {
  await Promise.all(
    Array.from({ length: Math.min(50, N - i) }, (_, j) =>
      objects.create({
        metadata: { name: `p${i + j}`, namespace: NS },
        spec: {
          mode: 'Managed',
          provider: 'local',
          port: 20000 + i + j,
          healthCheck: { probeURL: `http://127.0.0.1:${targetPort}/`, intervalSeconds: 30 },
        },
      }),
    ),
  );
}
await waitUntil(`${N} Proxies Ready`, async () => (await readyCount()) === N, 30 * 60_000);
console.log(`all ${N} Ready in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
// Let provisioning's tail (its last status writes, the first sweeps) pass before counting.
await sleepMs(SWEEP_MS);

const figures: Record<string, string> = {};
if (CASES.has('steady')) {
  const load = sampleLoad();
  const from = Date.now();
  await sleepMs(WINDOW_MS);
  const to = Date.now();
  figures.steady = report('steady fleet', await countWindow(from, to), to - from, load.stop()).toFixed(2);
}
if (CASES.has('jitter')) {
  jitter = true;
  const load = sampleLoad();
  const from = Date.now();
  await sleepMs(WINDOW_MS);
  const to = Date.now();
  jitter = false;
  figures.jitter = report(
    'latency jitter (probe target answers after 5-400 ms)',
    await countWindow(from, to),
    to - from,
    load.stop(),
  ).toFixed(2);
}
if (CASES.has('outage')) {
  const callsBefore = providerCalls;
  outage = true;
  const load = sampleLoad();
  const from = Date.now();
  const perSecond: number[] = [];
  let last = providerCalls;
  while (Date.now() - from < OUTAGE_MS) {
    await sleepMs(1_000);
    perSecond.push(providerCalls - last);
    last = providerCalls;
  }
  outage = false;
  const to = Date.now();
  const calls = providerCalls - callsBefore;
  // Recovery is timed from the outage's end, before the histories are
  // counted (that takes a while at N = 1,000, and the fleet recovers meanwhile).
  const atEnd = await listProxies();
  const notReady = atEnd.filter((p) => p.status?.phase !== 'Ready').length;
  const withError = atEnd.filter((p) => p.status?.message).length;
  await waitUntil(
    'every Proxy Ready with no error in status',
    async () => (await readyCount((p) => p.status?.phase === 'Ready' && !p.status.message)) === N,
    10 * SWEEP_MS,
  );
  const settledMs = Date.now() - to;
  const sorted = [...perSecond].sort((a, b) => a - b);
  report(
    `provider outage (${OUTAGE_MS / 1000} s, every call fails)`,
    await countWindow(from, to),
    to - from,
    load.stop(),
  );
  console.log(
    `  provider calls during the outage: ${calls} in ${((to - from) / 1000).toFixed(0)} s = ${(calls / ((to - from) / 1000)).toFixed(2)}/s mean, p99 of 1 s buckets ${sorted[Math.floor(sorted.length * 0.99)] ?? 0}, max ${sorted.at(-1) ?? 0}`,
  );
  console.log(
    `  at the outage's end ${notReady} Proxies were not Ready and ${withError} showed the provider error in status; every Proxy Ready with no error in status ${(settledMs / 1000).toFixed(1)} s after it ended (sweep period ${SWEEP_MS / 1000} s)`,
  );
  figures.outageCallsPerSecond = (calls / ((to - from) / 1000)).toFixed(2);
  figures.recoverySeconds = (settledMs / 1000).toFixed(1);
}
if (CASES.has('pool')) {
  const replicas = Number(args['pool-replicas']);
  const poolName = 'bench-pool';
  await pools.create(NS, poolName, {
    replicas,
    template: {
      spec: {
        mode: 'Managed',
        provider: 'local',
        healthCheck: { probeURL: `http://127.0.0.1:${targetPort}/`, intervalSeconds: 30 },
      },
    },
  });
  const settledAt = await waitUntil(
    `pool of ${replicas} settled`,
    async () => {
      const pool = await pools.get(NS, poolName);
      return (
        pool?.status?.availableReplicas === replicas &&
        pool.status.conditions?.some((c) => c.type === 'Progressing' && c.status === 'False') === true
      );
    },
    10 * 60_000,
  );
  console.log(`\npool of ${replicas} settled in ${(settledAt / 1000).toFixed(0)} s`);
  // Its members' first health reports and latency writes pass first, as the fleet's did.
  await sleepMs(SWEEP_MS);
  const load = sampleLoad();
  const from = Date.now();
  await sleepMs(WINDOW_MS);
  const to = Date.now();
  const byKind = new Map<Kind, number>();
  let actions = 0;
  let resyncs = 0;
  for await (const w of client.workflow.list({ query: "WorkflowType = 'proxyPoolWorkflow'" })) {
    const events = (await client.workflow.getHandle(w.workflowId, w.runId).fetchHistory()).events ?? [];
    for (const n of countActions(w.type, events, from, to, undefined, byKind).values()) actions += n;
    resyncs += events.filter(
      (e) => e.timerFiredEventAttributes && millis(e) >= from && millis(e) < to,
    ).length;
  }
  const hours = (to - from) / 3_600_000;
  const perResync = resyncs > 0 ? actions / resyncs : 0;
  const atDefault = perResync * (3_600_000 / DEFAULT_POOL_TIMING.resyncMs);
  console.log(
    `\n## steady pool: ${replicas} members, window ${((to - from) / 1000).toFixed(0)} s, ${load.stop()}`,
  );
  console.log(
    `  pool workflow: ${actions} actions in the window (${(actions / hours).toFixed(2)} per pool-hour at resync ${SAFETY_MS / 1000} s), ${resyncs} resyncs, ${perResync.toFixed(2)} actions per resync`,
  );
  console.log(
    `  by kind: ${
      KIND_ORDER.filter((k) => (byKind.get(k) ?? 0) > 0)
        .map((k) => `${k} ${byKind.get(k)}`)
        .join(', ') || 'none'
    }`,
  );
  console.log(
    `  at the default resync (${DEFAULT_POOL_TIMING.resyncMs / 60_000} min): ${atDefault.toFixed(2)} actions per pool-hour (goal ≤ 10); member-driven wake-ups in the window: ${actions - resyncs * perResync}`,
  );
  figures.poolPerHour = atDefault.toFixed(2);
}
if (CASES.has('autoscale')) {
  const poolName = 'bench-autoscale';
  const demand = Number(args.demand);
  await pools.create(NS, poolName, {
    replicas: 2,
    template: {
      spec: {
        mode: 'Managed',
        provider: 'local',
        maxLeases: 5,
        healthCheck: { probeURL: `http://127.0.0.1:${targetPort}/`, intervalSeconds: 30 },
      },
    },
    autoscaling: { minReplicas: 2, maxReplicas: 20, targetUtilization: 0.8 },
  });
  const wanted = Math.ceil(demand / 4);
  // The crawlers run through the settling and the whole window.
  const settleBudgetMs = 10 * 60_000;
  const stopCrawling = new AbortController();
  const crawl = runLeaseRamp({
    signal: stopCrawling.signal,
    apiUrl: api.url,
    pool: poolName,
    targetPort,
    demand: () => demand,
    durationMs: settleBudgetMs + SWEEP_MS + WINDOW_MS,
    maxClients: demand,
    sessionMs: 3_000,
    sampleEveryMs: 10_000,
    observe: async () => {
      const s = (await pools.get(NS, poolName))?.status;
      return { ready: s?.readyReplicas ?? 0, desired: s?.desiredReplicas ?? 0 };
    },
  });
  const settledAt = await waitUntil(
    `autoscaled pool at ${wanted} members`,
    async () => (await pools.get(NS, poolName))?.status?.availableReplicas === wanted,
    settleBudgetMs,
  );
  console.log(
    `\nautoscaled pool at ${wanted} members for ${demand} sessions in ${(settledAt / 1000).toFixed(0)} s`,
  );
  await sleepMs(SWEEP_MS);
  const load = sampleLoad();
  const from = Date.now();
  await sleepMs(WINDOW_MS);
  const to = Date.now();
  const byKind = new Map<Kind, number>();
  let actions = 0;
  let resyncs = 0;
  for await (const w of client.workflow.list({ query: "WorkflowType = 'proxyPoolWorkflow'" })) {
    if (!w.workflowId.includes(`/${poolName}/`)) continue;
    const events = (await client.workflow.getHandle(w.workflowId, w.runId).fetchHistory()).events ?? [];
    for (const n of countActions(w.type, events, from, to, undefined, byKind).values()) actions += n;
    resyncs += events.filter(
      (e) => e.timerFiredEventAttributes && millis(e) >= from && millis(e) < to,
    ).length;
  }
  stopCrawling.abort();
  const ramp = await crawl;
  const hours = (to - from) / 3_600_000;
  // The resync is compressed here (a timer and a list each): taken out, and counted at the 30 min default.
  const atDefault = (actions - 2 * resyncs) / hours + 2 * (3_600_000 / DEFAULT_POOL_TIMING.resyncMs);
  const size = (await pools.get(NS, poolName))?.status?.desiredReplicas;
  console.log(
    `\n## autoscaled pool, steady demand: ${demand} sessions, size ${size}, window ${((to - from) / 1000).toFixed(0)} s, ${load.stop()}`,
  );
  console.log(
    `  pool workflow: ${actions} actions in the window, ${resyncs} resyncs; by kind: ${
      KIND_ORDER.filter((k) => (byKind.get(k) ?? 0) > 0)
        .map((k) => `${k} ${byKind.get(k)}`)
        .join(', ') || 'none'
    }`,
  );
  console.log(
    `  at the default resync: ${atDefault.toFixed(2)} actions per pool-hour (goal ≤ 30); crawlers: ${ramp.granted} leases, ${ramp.denials} refused, ${ramp.broken} broken`,
  );
  figures.autoscalePoolPerHour = atDefault.toFixed(2);
}
console.log(`\nsummary: ${JSON.stringify(figures)}`);

await api.stop();
await bridge.stop();
worker.shutdown();
await running;
await registry.close();
await native.close();
await connection.close();
target.close();
await temporalServer.stop();
await kube.stop();
rmSync(dir, { recursive: true, force: true });
