/**
 * Provisioning and steady-state benchmark (DESIGN.md §6).
 *
 *   npx tsx tests/bench/provisioning.ts [N ...]     (default: 25 100)
 *
 * Starts its own Temporal dev server and kube-apiserver, runs the real worker
 * and bridge with the `local` provider, and prints:
 *  - time from creating N Proxy objects to all of them Provisioned (Running
 *    with an IP, status written), against N trivial workflows started and
 *    completed on the same server in the same run (the ratio is the figure),
 *    after one untimed round of each (printed as the warm-up);
 *  - when the first, half, 90 %, 99 % and all Proxies were Provisioned, and
 *    where a sample of 100 Proxies' time went, leg by leg, from their
 *    histories (create → run started → its task picked up → completed);
 *  - the CPU each took per item, by process (and this process's busiest
 *    threads), the threads started per item, and the apiserver requests per
 *    Proxy (from its own metrics);
 *
 * Steady-state cost (billable actions per Ready proxy-hour) is
 * `npm run bench:cost`'s.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
// A CommonJS module: its named exports are not visible to an ES import under tsx.
import protoModule from '@temporalio/proto';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { CoreV1Api, Watch } from '@kubernetes/client-node';
import { loadKubeConfig } from '../../cli/kube.js';
import { API_VERSION, PROXY_PLURAL } from '../../kube/coordinates.js';
import { pino } from 'pino';
import { createProxyClient, refOf } from '../../kube/proxies.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import type { ProxyRef } from '../../workflows/proxy/types.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { createBridge } from '../../k8s-bridge/bridge.js';
import { bundleWorkflows, createProxyWorker } from '../../cli/worker.js';
import { installCrds, installFinalizerPolicy } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { DEFAULT_TIMING } from '../../workflows/proxy/types.js';
import { apiserverRequests } from '../helpers/apiserver-metrics.js';
import { CLOCK_TICKS_PER_SECOND, descendants, readProc, threadCpuTicks, threadsStarted } from './proc.js';

const sizes = process.argv
  .slice(2)
  .map(Number)
  .filter((n) => n > 0);
const SIZES = sizes.length > 0 ? sizes : [25, 100];

/** Proxies (and trivial workflows) in the untimed first round. */
const WARM_UP = 50;

/** Creates in flight at once while applying the Proxies. */
const CREATES_IN_FLIGHT = 16;

Runtime.install({ logger: new DefaultLogger('ERROR') });
const logger = pino({ level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'ep-bench-prov-'));
const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
const [temporal, kube] = await Promise.all([
  startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
  startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
]);
// As the CLI loads it: requests share keep-alive connections (a TLS
// handshake per request was a third of this process's CPU at N = 1,000).
const kc = loadKubeConfig(kube.kubeconfigPath);
await installCrds(kc);
// As a cluster-wide install has it (infra/k8s/overlays/cluster-wide): the
// apiserver puts the finalizer on each new Managed Proxy.
const finalizerPolicy = await installFinalizerPolicy(kc);
const api = createProxyClient(kc);
const core = kc.makeApiClient(CoreV1Api);
const connection = await Connection.connect({ address: temporal.address });
const client = new Client({ connection });
const native = await NativeConnection.connect({ address: temporal.address });
const registry = buildProviders(
  parseProvidersConfig(
    `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: 127.91.0.0/16 }\n`,
    'bench',
  ),
  { logger, stateRoot: dir, installation: 'bench' },
);
const bundle = await bundleWorkflows();
const worker = await createProxyWorker({
  connection: native,
  namespace: 'default',
  taskQueue: 'bench',
  kubeConfig: kc,
  registry,
  installation: 'bench',
  logger,
  workflowBundle: bundle,
  maxCachedWorkflows: 2_000,
  timing: { ...DEFAULT_TIMING, provisioningPollMs: 1_000, deletionPollMs: 1_000 },
});
const noopWorker = await Worker.create({
  connection: native,
  taskQueue: 'bench-noop',
  workflowsPath: fileURLToPath(new URL('./workflows/noop.ts', import.meta.url)),
});
const running = Promise.all([worker.run(), noopWorker.run()]);
const bridge = createBridge({
  kubeConfig: kc,
  client,
  taskQueue: 'bench',
  logger,
});
await bridge.start();

/** The key under which cpuNow() keeps the machine's count of threads started. */
const THREADS = 'threads started';
/** The prefix of cpuNow()'s keys for this process's threads. */
const THREAD = 'thread:';

/** CPU seconds so far of this process and of each server it started, by server. */
function cpuNow(): Map<string, number> {
  const cpu = new Map<string, number>();
  const self = process.cpuUsage();
  cpu.set('bench (worker, bridge, local provider)', (self.user + self.system) / 1e6);
  cpu.set(THREADS, threadsStarted());
  for (const [thread, ticks] of threadCpuTicks(process.pid))
    cpu.set(`${THREAD}${thread}`, ticks / CLOCK_TICKS_PER_SECOND);
  for (const pid of descendants(process.pid)) {
    const sample = readProc(pid);
    if (sample) cpu.set(sample.name, (cpu.get(sample.name) ?? 0) + sample.cpuTicks / CLOCK_TICKS_PER_SECOND);
  }
  return cpu;
}

/** Where the CPU went between two cpuNow() readings, per item of work. */
function cpuSplit(before: Map<string, number>, after: Map<string, number>, n: number): string {
  const started = (after.get(THREADS)! - before.get(THREADS)!) / n;
  const used = [...after]
    .filter(([name]) => name !== THREADS && !name.startsWith(THREAD))
    .map(([name, s]) => [name, s - (before.get(name) ?? 0)] as const);
  const total = used.reduce((sum, [, s]) => sum + s, 0);
  return `${((total / n) * 1000).toFixed(1)} ms CPU each: ${used
    .filter(([, s]) => s > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([name, s]) => `${name} ${((s / n) * 1000).toFixed(1)} (${((s / total) * 100).toFixed(0)} %)`)
    .join(', ')}; threads started ${started.toFixed(1)} each; the bench's busiest threads: ${[...after]
    .filter(([name]) => name.startsWith(THREAD))
    .map(([name, s]) => [name.slice(THREAD.length), s - (before.get(name) ?? 0)] as const)
    .filter(([, s]) => s > 0)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([name, s]) => `${name} ${((s / n) * 1000).toFixed(1)}`)
    .join(', ')}`;
}

/** One workflow's history so far, as event type x count in order of first appearance. */
async function historyOf(workflowId: string): Promise<string> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const counts = new Map<string, number>();
  for (const event of history.events ?? []) {
    const type = (protoModule.temporal.api.enums.v1.EventType[event.eventType ?? 0] ?? '?').replace(
      /^EVENT_TYPE_/,
      '',
    );
    counts.set(type, (counts.get(type) ?? 0) + 1);
  }
  return `${history.events?.length ?? 0} events: ${[...counts].map(([t, c]) => (c > 1 ? `${t} x${c}` : t)).join(', ')}`;
}

async function baseline(n: number): Promise<number> {
  const t0 = performance.now();
  const handles = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      client.workflow.start('noopWorkflow', {
        taskQueue: 'bench-noop',
        workflowId: `noop-${n}-${i}-${Date.now()}`,
        args: [],
      }),
    ),
  );
  await Promise.all(handles.map((h) => h.result()));
  return performance.now() - t0;
}

/** Where a sample of Proxies' time went, from their histories: median and 90th percentile of each leg. */
async function phasesOf(
  createdAt: Map<string, number>,
  provisioned: Map<string, { atMs: number; ref: ProxyRef }>,
  t0: number,
): Promise<string> {
  // performance.now() and the server's event times on one scale: ms after the first create.
  const origin = performance.timeOrigin + t0;
  const legs = {
    'create→run started': [] as number[],
    'started→task picked up': [] as number[],
    'task→completed': [] as number[],
    'task picked up→seen Provisioned': [] as number[],
  };
  const names = [...provisioned.keys()].filter(
    (_, i) => i % Math.max(1, Math.floor(provisioned.size / 100)) === 0,
  );
  const EventType = protoModule.temporal.api.enums.v1.EventType;
  await Promise.all(
    names.map(async (name) => {
      const { atMs, ref } = provisioned.get(name)!;
      const history = await client.workflow.getHandle(proxyWorkflowId(ref)).fetchHistory();
      type EventTypeValue = (typeof EventType)[keyof typeof EventType];
      const at = (type: EventTypeValue) => {
        const e = history.events?.find((x) => x.eventType === type);
        const t = e?.eventTime;
        return t ? Number(t.seconds) * 1000 + (t.nanos ?? 0) / 1e6 - origin : NaN;
      };
      const started = at(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED);
      const picked = at(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED);
      const completed = at(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED);
      legs['create→run started'].push(started - createdAt.get(name)!);
      legs['started→task picked up'].push(picked - started);
      legs['task→completed'].push(completed - picked);
      // The status is written inside the task, before it completes.
      legs['task picked up→seen Provisioned'].push(atMs - picked);
    }),
  );
  // (A task still running when its history was read has no completion: left out.)
  const q = (xs: number[], f: number) => {
    const known = xs.filter(Number.isFinite).sort((a, b) => a - b);
    return known[Math.min(known.length - 1, Math.floor(f * known.length))] ?? NaN;
  };
  return Object.entries(legs)
    .map(([leg, xs]) => `${leg} ${q(xs, 0.5).toFixed(0)} / ${q(xs, 0.9).toFixed(0)} ms`)
    .join(', ');
}

/**
 * Creates N Proxies and times them to all Provisioned, seen through one
 * watch (a list of the namespace every 100 ms, as this bench first did,
 * costs the apiserver and this process more at N = 1,000 than what it
 * measures).
 */
async function provision(
  n: number,
  ns: string,
): Promise<{ ms: number; spread: string; sample: () => Promise<{ history: string; phases: string }> }> {
  await core.createNamespace({ body: { metadata: { name: ns } } });
  /** When each Proxy was first seen Provisioned, ms after the first create, in that order. */
  const doneAt: number[] = [];
  let t0 = 0;
  let done: (ms: number) => void = () => undefined;
  const all = new Promise<number>((resolve) => (done = resolve));
  /** When each create returned, ms after the first create, by name. */
  const createdAt = new Map<string, number>();
  /** The same, by name, with the Proxy's reference (for its workflow). */
  const provisioned = new Map<string, { atMs: number; ref: ProxyRef }>();
  const note = (p: Proxy): void => {
    if (!p.status?.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True')) return;
    if (provisioned.has(p.metadata.name)) return;
    const atMs = performance.now() - t0;
    provisioned.set(p.metadata.name, { atMs, ref: refOf(p) });
    doneAt.push(atMs);
    if (provisioned.size === n) done(atMs);
  };
  const watching = await new Watch(kc).watch(
    `/apis/${API_VERSION}/namespaces/${ns}/${PROXY_PLURAL}`,
    {},
    (_type, p: Proxy) => note(p),
    // A watch the apiserver or the client ends early: count from lists instead.
    (err: unknown) => {
      if (provisioned.size === n) return;
      console.error(`watch ended (${String(err)}); counting from lists`);
      void (async () => {
        while (provisioned.size < n) {
          for (const p of (await api.list(ns)).items) note(p);
          await new Promise((r) => setTimeout(r, 1_000));
        }
      })();
    },
  );
  t0 = performance.now();
  // As `kubectl apply` or a controller sends them: a bounded number in
  // flight over kept-alive connections. All N at once opened a TLS
  // connection per request, and the handshakes (both ends) cost more than
  // the creates.
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(CREATES_IN_FLIGHT, n) }, async () => {
      for (let i = next++; i < n; i = next++) {
        await api.create({
          metadata: { name: `p${i}`, namespace: ns },
          spec: { mode: 'Managed', provider: 'local', port: 20000 + i },
        });
        createdAt.set(`p${i}`, performance.now() - t0);
      }
    }),
  );
  const ms = await all;
  watching.abort();
  const at = (q: number) => (doneAt[Math.min(n - 1, Math.ceil(q * n) - 1)]! / 1000).toFixed(2);
  return {
    ms,
    sample: async () => ({
      history: provisioned.has('p0')
        ? await historyOf(proxyWorkflowId(provisioned.get('p0')!.ref))
        : 'not seen',
      phases: await phasesOf(createdAt, provisioned, t0),
    }),
    spread: `first Provisioned at ${(doneAt[0]! / 1000).toFixed(2)} s, half at ${at(0.5)} s, 90 % at ${at(0.9)} s, 99 % at ${at(0.99)} s, all at ${at(1)} s`,
  };
}

console.log(
  `# provisioning benchmark (local provider, ${process.version}, 2 cores; finalizer admission policy ${finalizerPolicy ? 'on' : 'unavailable'})`,
);
// The first burst after start also pays for compiling the code on its path
// (the bridge, the kube client, the activities: ~8 ms a Proxy at N = 100)
// and for opening connections; a control plane meets its bursts warm. Both
// paths get the same warm-up, shown, and not counted.
{
  const base = await baseline(WARM_UP);
  const { ms } = await provision(WARM_UP, 'bench-warm-up');
  console.log(
    `warm-up (first burst after start, not the figure): ${WARM_UP} Proxies ${(ms / 1000).toFixed(2)} s   ${WARM_UP} trivial workflows ${(base / 1000).toFixed(2)} s   ratio ${(ms / base).toFixed(1)}x`,
  );
}
for (const n of SIZES) {
  const cpu0 = cpuNow();
  const base = await baseline(n);
  const cpu1 = cpuNow();
  const requests0 = await apiserverRequests(kc);
  const { ms, spread, sample } = await provision(n, `bench-${n}`);
  const cpu2 = cpuNow();
  const requests1 = await apiserverRequests(kc);
  // Read after the CPU window: these reads are the bench's, not provisioning's.
  const { history, phases } = await sample();
  const rssMiB = process.memoryUsage().rss / 2 ** 20;
  console.log(
    `N=${String(n).padStart(4)}  process RSS ${rssMiB.toFixed(0)} MiB (worker + bridge + local provider in one process)`,
  );
  console.log(
    `N=${String(n).padStart(4)}  apply→all Provisioned ${(ms / 1000).toFixed(2)} s   ${n} trivial workflows ${(base / 1000).toFixed(2)} s   ratio ${(ms / base).toFixed(2)}x (${(base / ms).toFixed(2)} of the trivial rate; goal ≥ 0.50)   per proxy ${(ms / n).toFixed(0)} ms`,
  );
  console.log(`N=${String(n).padStart(4)}  ${spread}`);
  console.log(
    `N=${String(n).padStart(4)}  legs, median / 90th percentile of ${Math.min(n, 100)} Proxies: ${phases}`,
  );
  console.log(`N=${String(n).padStart(4)}  trivial: ${cpuSplit(cpu0, cpu1, n)}`);
  console.log(`N=${String(n).padStart(4)}  Proxy:   ${cpuSplit(cpu1, cpu2, n)}`);
  console.log(
    `N=${String(n).padStart(4)}  apiserver requests per Proxy: ${[...requests1]
      .map(([key, count]) => [key, (count - (requests0.get(key) ?? 0)) / n] as const)
      .filter(([, each]) => each >= 0.05)
      .map(([key, each]) => `${key} ${each.toFixed(2)}`)
      .join(', ')}`,
  );
  console.log(`N=${String(n).padStart(4)}  one Proxy's history when all were Provisioned: ${history}`);
  console.log(`N=${String(n).padStart(4)}  load average ${loadavg()[0]!.toFixed(2)}`);
  await core.deleteNamespace({ name: `bench-${n}` }).catch(() => undefined);
}

await bridge.stop();
worker.shutdown();
noopWorker.shutdown();
await running;
await registry.close();
await native.close();
await connection.close();
await temporal.stop();
await kube.stop();
rmSync(dir, { recursive: true, force: true });
