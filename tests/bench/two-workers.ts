/**
 * Two worker processes on one task queue (issue 33, item 5).
 *
 *   npm run bench:two-workers -- [--n 1000] [--window 120]
 *
 * Starts its own Temporal dev server and kube-apiserver, the gcp TLS fake
 * (tests/helpers/gcp-fake.ts: instances live there, not in a worker, so a
 * killed worker takes none with it), the Schedules (shipped intervals) and a
 * bridge in this process, and two worker processes (two-workers-worker.ts,
 * the real Proxy worker with a gcp provider) on one task queue. Then:
 *
 *  1. applies N gcp Proxies; all Running (status ip), then a health report
 *     for each (what the prober sends) and all Ready;
 *  2. a steady window (--window seconds) with both workers: billable actions
 *     per Ready proxy-hour, counted from the histories of a sample of 200
 *     Proxy workflows (scaled to the fleet) and all Schedule workflows;
 *  3. applies N more; once half of them are Running, SIGKILLs worker A (its
 *     in-flight create activities, its cached workflows and their sticky
 *     queues with it); all 2N Running, then a health report for each of the
 *     2N, and all Ready: every Proxy, the ones worker A was caching included,
 *     was served by worker B;
 *  4. the steady window again with worker B alone.
 *
 * Prints which worker started each workflow task and each activity (the
 * `identity` on WorkflowTaskStarted and ActivityTaskStarted in the sampled
 * histories) before and after the kill, the instances at the fake (one per
 * Proxy, none left over), and the two steady costs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { CoreV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { loadKubeConfig } from '../../cli/kube.js';
import { ensureSchedules } from '../../cli/schedules.js';
import { bundleWorkflows } from '../../cli/worker.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { createBridge } from '../../k8s-bridge/bridge.js';
import { createProxyClient, refOf } from '../../kube/proxies.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { signalProxy } from '../../workflows/proxy/client.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { healthChangedSignal } from '../../workflows/proxy/messages.js';
import { LABEL_UID } from '../../providers/gcp/instance.js';
import { FAKE_PLACEMENT, FakeCompute } from '../helpers/gcp-fake.js';
import { millis, proxyWorkflowActions, scheduleWorkflowActions } from './actions.js';
import type { TwoWorkersChildConfig } from './two-workers-worker.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '1000' },
    window: { type: 'string', default: '120' },
  },
});
const N = Number(args.n);
const WINDOW_MS = Number(args.window) * 1000;
if (!(N > 0) || !(WINDOW_MS > 0)) throw new Error('--n and --window must be positive');
const SAMPLE = 200;
const IN_FLIGHT = 16;
const TASK_QUEUE = 'bench-two-workers';

const logger = pino({ level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'ep-bench-two-workers-'));
const children: ChildProcess[] = [];
const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));
const t00 = Date.now();
const say = (line: string) =>
  console.log(
    `${String(Math.round((Date.now() - t00) / 1000)).padStart(5)} s  ${line}  (load ${loadavg()[0]!.toFixed(1)})`,
  );

const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
const [temporalServer, kube] = await Promise.all([
  startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
  startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
]);
const stopAll = async () => {
  for (const child of children) child.kill('SIGKILL');
  await temporalServer.stop().catch(() => undefined);
  await kube.stop().catch(() => undefined);
};
process.once('SIGINT', () => void stopAll().finally(() => process.exit(130)));

try {
  const kc = loadKubeConfig(kube.kubeconfigPath);
  await installCrds(kc);
  const objects = createProxyClient(kc);
  const core = kc.makeApiClient(CoreV1Api);
  const connection = await Connection.connect({ address: temporalServer.address });
  const client = new Client({ connection });
  const fake = await FakeCompute.start('bench-project');

  const bundle = await bundleWorkflows();
  const bundlePath = join(dir, 'workflow-bundle.js');
  writeFileSync(bundlePath, bundle.code);
  await ensureSchedules(
    client,
    {
      taskQueue: TASK_QUEUE,
      gc: { intervalMs: 10 * 60_000 },
      providerChecks: { intervalMs: 60_000 },
      driftSweep: { intervalMs: 2 * 60_000 },
    },
    logger,
  );

  /** Starts a worker process; resolves once it polls. */
  const startWorker = async (name: string): Promise<ChildProcess> => {
    const config: TwoWorkersChildConfig = {
      temporal: temporalServer.address,
      kubeconfig: kube.kubeconfigPath,
      taskQueue: TASK_QUEUE,
      bundlePath,
      project: fake.project,
      ...fake.connection,
      token: fake.token,
      maxCachedWorkflows: 2 * N,
    };
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(new URL('./two-workers-worker.ts', import.meta.url))],
      {
        env: { ...process.env, EP_TWO_WORKERS: JSON.stringify(config), METADATA_SERVER_DETECTION: 'none' },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    children.push(child);
    await new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout }).on('line', (line) => {
        if (line === 'ready') resolve();
      });
      child.once('exit', (code) => reject(new Error(`worker ${name} exited (${code}) before it was ready`)));
    });
    say(`worker ${name} polling (pid ${child.pid})`);
    return child;
  };
  const [workerA, workerB] = [await startWorker('A'), await startWorker('B')];
  const nameOf = (identity: string | null | undefined): string => {
    const pid = Number(/^(\d+)@/.exec(identity ?? '')?.[1]);
    return pid === workerA.pid ? 'A' : pid === workerB.pid ? 'B' : (identity ?? '?');
  };

  const bridge = createBridge({ kubeConfig: kc, client, taskQueue: TASK_QUEUE, logger });
  await bridge.start();

  const apply = async (ns: string, count: number): Promise<void> => {
    await core.createNamespace({ body: { metadata: { name: ns } } });
    let next = 0;
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        for (let i = next++; i < count; i = next++) {
          await objects.create({
            metadata: { name: `p${i}`, namespace: ns },
            spec: {
              mode: 'Managed',
              provider: 'gcp',
              port: 3128,
              placement: { ...FAKE_PLACEMENT },
            },
          } as never);
        }
      }),
    );
  };
  const list = (namespaces: string[]): Promise<Proxy[]> => objects.listAll({ namespaces, pageSize: 500 });
  const isReady = (p: Proxy) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
  /** Polls until `done` holds for `want` Proxies; returns them. */
  const until = async (what: string, namespaces: string[], want: number, done: (p: Proxy) => boolean) => {
    const t0 = Date.now();
    for (;;) {
      const all = await list(namespaces);
      const count = all.filter(done).length;
      if (count >= want) {
        say(`${what}: ${count}/${want} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
        return all;
      }
      if (Date.now() - t0 > 20 * 60_000) throw new Error(`${what}: only ${count}/${want} after 20 min`);
      await sleepMs(2_000);
    }
  };
  /** The health report the prober would send, to every Proxy given. */
  const reportHealthy = async (proxies: Proxy[]) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        for (let i = next++; i < proxies.length; i = next++) {
          const p = proxies[i]!;
          await signalProxy(client, refOf(p), healthChangedSignal, {
            ip: p.status!.ip!,
            healthy: true,
            latencyMillis: 5,
            checkedAt: new Date().toISOString(),
          });
        }
      }),
    );
  };
  const sampleOf = (proxies: Proxy[]) =>
    [...proxies]
      .sort(() => Math.random() - 0.5)
      .slice(0, SAMPLE)
      .map((p) => proxyWorkflowId(refOf(p)));
  /** Workflow tasks and activities started by each worker in the sampled histories, split at `at`. */
  const split = async (ids: string[], at: number) => {
    const tally = new Map<string, number>();
    const add = (key: string) => tally.set(key, (tally.get(key) ?? 0) + 1);
    for (const id of ids) {
      for (const e of (await client.workflow.getHandle(id).fetchHistory()).events ?? []) {
        const phase = millis(e) < at ? 'before' : 'after';
        if (e.workflowTaskStartedEventAttributes)
          add(`${phase} workflow tasks ${nameOf(e.workflowTaskStartedEventAttributes.identity)}`);
        if (e.activityTaskStartedEventAttributes)
          add(`${phase} activities ${nameOf(e.activityTaskStartedEventAttributes.identity)}`);
      }
    }
    return [...tally].sort((a, b) => a[0].localeCompare(b[0]));
  };
  /** Billable actions per Ready proxy-hour over [from, to]: a sample of Proxy workflows scaled up, plus the Schedules'. */
  const cost = async (ids: string[], fleet: number, from: number, to: number) => {
    const proxyActions = await proxyWorkflowActions(client, ids, from, to);
    const scheduleActions = await scheduleWorkflowActions(client, from, to);
    const hours = (to - from) / 3_600_000;
    return {
      perProxyHour: ((proxyActions / ids.length) * fleet + scheduleActions) / fleet / hours,
      proxyActions,
      scheduleActions,
    };
  };

  console.log(
    `# two workers on one task queue: N=${N} gcp Proxies against the fake, then N more with worker A killed halfway (${process.version}, 2 cores)`,
  );
  // 1. Both workers.
  const t1 = Date.now();
  await apply('first', N);
  say(`applied ${N} Proxies`);
  const firstRunning = await until('first Running', ['first'], N, (p) => Boolean(p.status?.ip));
  await reportHealthy(firstRunning);
  await until('first Ready', ['first'], N, (p) => Boolean(isReady(p)));
  say(`first ${N}: apply → all Ready in ${((Date.now() - t1) / 1000).toFixed(1)} s`);
  const firstIds = sampleOf(firstRunning);

  // 2. Steady, both workers.
  await sleepMs(10_000);
  const w1from = Date.now();
  await sleepMs(WINDOW_MS);
  const w1 = await cost(firstIds, N, w1from, Date.now());
  say(
    `steady, two workers: ${w1.perProxyHour.toFixed(3)} actions per Ready proxy-hour (${w1.proxyActions} in ${firstIds.length} sampled Proxies, ${w1.scheduleActions} in the Schedules' workflows)`,
  );

  // 3. N more; worker A killed halfway.
  const t3 = Date.now();
  const applying = apply('second', N);
  await until('second Running (half)', ['second'], Math.ceil(N / 2), (p) => Boolean(p.status?.ip));
  const killedAt = Date.now();
  workerA.kill('SIGKILL');
  say(`worker A (pid ${workerA.pid}) SIGKILLed`);
  await applying;
  const all = await until('all Running', ['first', 'second'], 2 * N, (p) => Boolean(p.status?.ip));
  await reportHealthy(all);
  await until('all Ready after the kill', ['first', 'second'], 2 * N, (p) => Boolean(isReady(p)));
  say(`second ${N}: apply → all ${2 * N} Ready in ${((Date.now() - t3) / 1000).toFixed(1)} s`);
  const secondIds = sampleOf(all.filter((p) => p.metadata.namespace === 'second'));
  const uids = new Set(all.map((p) => p.metadata.uid));
  const instances = [...fake.instances.values()];
  const byUid = new Map<string, number>();
  for (const i of instances) {
    const uid = i.labels?.[LABEL_UID];
    if (uid) byUid.set(uid, (byUid.get(uid) ?? 0) + 1);
  }
  const leftOver = [...byUid.keys()].filter((u) => !uids.has(u)).length;
  const duplicated = [...byUid.values()].filter((c) => c > 1).length;
  say(
    `instances at the fake: ${instances.length} for ${2 * N} Proxies (${duplicated} Proxies with more than one, ${leftOver} of no Proxy)`,
  );

  // 4. Steady, worker B alone.
  await sleepMs(10_000);
  const w2from = Date.now();
  await sleepMs(WINDOW_MS);
  const w2 = await cost([...firstIds, ...secondIds], 2 * N, w2from, Date.now());
  say(
    `steady, worker B alone: ${w2.perProxyHour.toFixed(3)} actions per Ready proxy-hour (${w2.proxyActions} in ${firstIds.length + secondIds.length} sampled Proxies, ${w2.scheduleActions} in the Schedules' workflows)`,
  );

  console.log(
    `\n## who started what, in ${firstIds.length} sampled histories of each batch (before / after the kill)`,
  );
  for (const [name, ids] of [
    ['first batch', firstIds],
    ['second batch', secondIds],
  ] as const) {
    for (const [key, count] of await split(ids, killedAt))
      console.log(`${name.padEnd(13)} ${key.padEnd(30)} ${count}`);
  }
} finally {
  await stopAll();
  rmSync(dir, { recursive: true, force: true });
}
// The figures are printed; the in-process bridge, the fake and the clients still hold sockets open.
process.exit(0);
