/**
 * Compute Engine calls per proxy-hour at steady state (issue 26, item 7).
 *
 *   npm run bench:gcp-calls -- [--n 50] [--window 4m]
 *
 * Starts its own Temporal dev server and kube-apiserver, runs the real
 * worker (drift sweep on) and bridge in this process with one `gcp`
 * provider driving the real `@google-cloud/compute` client against the TLS
 * fake (tests/helpers/gcp-fake.ts, GCE-like delays on), brings N Proxies to
 * Running with their IP, then counts the HTTP requests the fake receives
 * over a window, by what sent them:
 *
 *   fleet      aggregated lists (pages of 500) of the drift sweep and orphan
 *              GC, and the provider checks' one-page calls (maxResults 1):
 *              each answered from the provider's kept list while the read
 *              budget allows (gcp.listCallsPerVmHour, 0.75 by default), so
 *              their number depends on N and on time, not on fires;
 *   per Proxy  instances.get and operations from the Proxy's own polls (the
 *              safety poll, 6 h by default).
 *
 * Everything periodic runs SCALE (6) times faster than shipped so it is
 * measured in minutes: sweep 20 s, checks 10 s, GC 100 s, the read budget
 * 6 × 0.75 calls per VM-hour, listMaxAgeSeconds and the check's reuse
 * window a sixth (GC's own reuse window, 150 s, is not scaled: it never
 * decides, since the budget keeps a list at least one sweep period). The
 * fleet's calls per hour measured are divided by SCALE to give the shipped
 * rate. The safety poll runs every half window and is scaled by its own
 * ratio to 6 h. "Ready" here is Running with an IP: the prober's verdict,
 * which also makes a Proxy Ready, calls nothing at Compute.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { OAuth2Client } from 'google-auth-library';
import { pino } from 'pino';
import { parseDuration } from '../../api/config.js';
import { ensureSchedules, scheduleIds } from '../../cli/schedules.js';
import { bundleWorkflows, createProxyWorker } from '../../cli/worker.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { createBridge } from '../../k8s-bridge/bridge.js';
import { createProxyClient } from '../../kube/proxies.js';
import type { ProviderRegistry } from '../../providers/config.js';
import { gcpConfigSchema } from '../../providers/gcp/config.js';
import { createGcpProvider } from '../../providers/gcp/provider.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { DRIFT_SWEEP_DEFAULTS } from '../../workflows/drift-sweep/types.js';
import { DEFAULT_TIMING } from '../../workflows/proxy/types.js';
import { FAKE_PLACEMENT, FakeCompute, type RecordedRequest } from '../helpers/gcp-fake.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '50' },
    window: { type: 'string', default: '4m' },
  },
});
const N = Number(args.n);
const WINDOW_MS = parseDuration(args.window);
/** Compressed intervals, and the shipped defaults they are scaled to. */
const RUN = { sweepMs: 20_000, checksMs: 10_000, gcMs: 100_000, safetyMs: Math.round(WINDOW_MS / 2) };
const SHIPPED = {
  sweepMs: DRIFT_SWEEP_DEFAULTS.intervalMs,
  checksMs: 60_000,
  gcMs: 10 * 60_000,
  safetyMs: DEFAULT_TIMING.safetyPollMs,
};
const HOUR = 3_600_000;
const SCALE = SHIPPED.sweepMs / RUN.sweepMs;
if (SHIPPED.checksMs / RUN.checksMs !== SCALE || SHIPPED.gcMs / RUN.gcMs !== SCALE)
  throw new Error('every periodic interval must be compressed by the same factor');
const BUDGET = gcpConfigSchema.parse({ project: 'bench-project' });
if (!(N > 0) || WINDOW_MS < 2 * RUN.gcMs) throw new Error('--n must be positive and --window at least 2m');

Runtime.install({ logger: new DefaultLogger('ERROR') });
const logger = pino({ level: process.env.EP_BENCH_LOG_LEVEL ?? 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'ep-bench-gcp-'));
const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
const [temporalServer, kube] = await Promise.all([
  startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
  startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
]);
const kc = new KubeConfig();
kc.loadFromFile(kube.kubeconfigPath);
await installCrds(kc);
const objects = createProxyClient(kc);
const core = kc.makeApiClient(CoreV1Api);
const connection = await Connection.connect({ address: temporalServer.address });
const client = new Client({ connection });
const native = await NativeConnection.connect({ address: temporalServer.address });

const fake = await FakeCompute.start('bench-project');
const auth = new OAuth2Client();
auth.setCredentials({ access_token: fake.token, expiry_date: Date.now() + 24 * HOUR });
const gcp = createGcpProvider({
  name: 'gcp',
  config: gcpConfigSchema.parse({
    project: fake.project,
    ...fake.connection,
    listCallsPerVmHour: BUDGET.listCallsPerVmHour * SCALE,
    listMaxAgeSeconds: Math.round(BUDGET.listMaxAgeSeconds / SCALE),
  }),
  logger,
  authClient: auth,
  checkReuseMs: Math.round(150_000 / SCALE),
});
const registry: ProviderRegistry = {
  get: (n) => (n === 'gcp' ? gcp : undefined),
  names: () => ['gcp'],
  close: () => gcp.close(),
};

const taskQueue = 'bench-gcp-calls';
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
  timing: { ...DEFAULT_TIMING, provisioningPollMs: 1_000, deletionPollMs: 1_000, safetyPollMs: RUN.safetyMs },
  driftSweepOn: true,
});
const running = worker.run();
await ensureSchedules(
  client,
  {
    taskQueue,
    gc: { intervalMs: RUN.gcMs },
    providerChecks: { intervalMs: RUN.checksMs },
    driftSweep: { intervalMs: RUN.sweepMs },
  },
  logger,
);
const bridge = createBridge({ kubeConfig: kc, client, taskQueue, logger });
await bridge.start();

const NS = 'bench-gcp';
const listProxies = (): Promise<Proxy[]> => objects.listAll({ namespaces: [NS], pageSize: 500 });
const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fires = async (): Promise<Record<'sweep' | 'checks' | 'gc', number>> => {
  const ids = scheduleIds(taskQueue);
  const taken = async (id: string) => (await client.schedule.getHandle(id).describe()).info.numActionsTaken;
  return {
    sweep: await taken(ids.driftSweep),
    checks: await taken(ids.providerChecks),
    gc: await taken(ids.gc),
  };
};

console.log(
  `# gcp calls benchmark: N=${N}, ${process.version}; run ${SCALE}x compressed (sweep ${RUN.sweepMs / 1000} s, checks ${RUN.checksMs / 1000} s, GC ${RUN.gcMs / 1000} s, read budget ${BUDGET.listCallsPerVmHour * SCALE} calls/VM-h, list max age ${Math.round(BUDGET.listMaxAgeSeconds / SCALE)} s; safety poll ${RUN.safetyMs / 1000} s); scaled to sweep ${SHIPPED.sweepMs / 1000} s, checks ${SHIPPED.checksMs / 1000} s, GC ${SHIPPED.gcMs / 1000} s, budget ${BUDGET.listCallsPerVmHour}, max age ${BUDGET.listMaxAgeSeconds} s, safety poll ${SHIPPED.safetyMs / HOUR} h`,
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
          provider: 'gcp',
          port: 3128,
          placement: { ...FAKE_PLACEMENT },
        },
      } as never),
    ),
  );
}
for (;;) {
  const ready = (await listProxies()).filter((p) => Boolean(p.status?.ip)).length;
  if (ready === N) break;
  if (Date.now() - t0 > 20 * 60_000) throw new Error(`only ${ready} of ${N} Running after 20 min`);
  await sleepMs(1_000);
}
console.log(`all ${N} Running with an IP in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
// Let provisioning's tail (its last polls, the first sweeps) pass before counting.
await sleepMs(RUN.sweepMs);

const loads: number[] = [];
const sampler = setInterval(() => loads.push(loadavg()[0]!), 5_000);
const fromReq = fake.requests.length;
const fromFires = await fires();
const from = Date.now();
await sleepMs(WINDOW_MS);
const to = Date.now();
const toFires = await fires();
clearInterval(sampler);
const window = fake.requests.slice(fromReq);

/** What sent a request, from its shape. */
function sourceOf(r: RecordedRequest): 'check' | 'list' | 'proxy' {
  if (r.path.endsWith('/aggregated/instances')) return r.query.get('maxResults') === '1' ? 'check' : 'list';
  return 'proxy';
}
const count = (s: ReturnType<typeof sourceOf>) => window.filter((r) => sourceOf(r) === s).length;
const byPath = new Map<string, number>();
for (const r of window) {
  const key = `${r.method} ${r.path.replace(/\/instances\/[^/]+$/, '/instances/<name>').replace(/\/operations\/[^/]+/, '/operations/<op>')}`;
  byPath.set(key, (byPath.get(key) ?? 0) + 1);
}
const sweepFires = toFires.sweep - fromFires.sweep;
const gcFires = toFires.gc - fromFires.gc;
const checkFires = toFires.checks - fromFires.checks;
const windowHours = (to - from) / HOUR;
// The fleet part: every list and check call in the window, per compressed hour, then per shipped hour.
const fleetPerHour = (count('list') + count('check')) / windowHours / SCALE;
// The safety poll ran every RUN.safetyMs; at the default it runs every SHIPPED.safetyMs.
const perProxyPerHour = (count('proxy') / N / windowHours) * (RUN.safetyMs / SHIPPED.safetyMs);
const perProxyHour = fleetPerHour / N + perProxyPerHour;

console.log(
  `\nwindow ${((to - from) / 1000).toFixed(0)} s, load ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)} (1-min avg)`,
);
console.log(`  requests by path: ${JSON.stringify(Object.fromEntries([...byPath].sort()))}`);
console.log(
  `  fleet: ${sweepFires} sweep, ${gcFires} GC and ${checkFires} check fires; ${count('list')} aggregated-list pages, ${count('check')} check calls: ${fleetPerHour.toFixed(2)} calls per hour at the shipped rates`,
);
console.log(
  `  per Proxy: ${count('proxy')} calls in the window with a ${RUN.safetyMs / 1000} s safety poll; ${perProxyPerHour.toFixed(3)} per proxy-hour at ${SHIPPED.safetyMs / HOUR} h`,
);
console.log(
  `\nCompute calls per Ready proxy-hour at the shipped defaults, N=${N}: ${perProxyHour.toFixed(3)}${perProxyHour <= 1 ? '' : '  (> 1)'}`,
);

await bridge.stop();
worker.shutdown();
await running;
await gcp.close();
await fake.stop();
await native.close();
await connection.close();
await Promise.allSettled([temporalServer.stop(), kube.stop()]);
rmSync(dir, { recursive: true, force: true });
