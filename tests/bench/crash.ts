/**
 * Crash benchmark at fleet scale: nothing is lost when processes die.
 *
 *   nice npx tsx tests/bench/crash.ts [N] [--kills 50] [--kill-every 5] [--ops-per-second 1]
 *   (npm run bench:crash -- ...)
 *
 * Starts its own Temporal dev server (with a database file, so it survives a
 * SIGKILL) and kube-apiserver with persistent etcd, and runs `worker`,
 * `bridge` and `api` as separate OS processes through the project's CLI, each
 * under a supervisor that starts it again when it exits (as a Deployment
 * would). N `local` Proxies (default 200) are kept under churn at a steady
 * rate: created, edited on a replacing field (the port), deleted and created
 * again. Leases are taken and released through the lease API all along.
 * Every few seconds (uniformly 0.5-1.5 x --kill-every) one of worker,
 * bridge, api, Temporal or the apiserver+etcd is SIGKILLed at that random
 * moment and restarted.
 *
 * After the last kill the churn stops and the bench waits for convergence,
 * then prints kills per process, the time to converge and the losses, each
 * of which must be 0: leaked instances (local provider records whose UID no
 * Proxy has), duplicate instances per UID, Proxies without an instance,
 * Proxies not Ready (or not at their generation), finalizers left on deleted
 * Proxies, lost or doubled lease slots. It exits 1 when any is not 0.
 *
 * Lease slots: the api's lease store is in memory, so a SIGKILL of the api
 * forgets the leases granted before it (by design of that store; the Redis
 * store keeps them). Those are counted apart; "lost" and "doubled" compare
 * the leases granted since the api's last start with the api's own counts.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pace } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';
import { createProxyClient } from '../../kube/proxies.js';
import { FINALIZER, type ProxySpecInput } from '../../resources/proxy-schema.js';
import { deleteProxy, editProxySpec } from '../helpers/kube-objects.js';
import { MARK_UID } from '../../providers/types.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { freePort } from '../../local-servers/ports.js';
import { spawnServer, type ManagedProcess } from '../../local-servers/process.js';
import { startTemporalDevServer, type TemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    kills: { type: 'string', default: '50' },
    'kill-every': { type: 'string', default: '5' },
    'ops-per-second': { type: 'string', default: '1' },
    'converge-timeout': { type: 'string', default: '900' },
    'keep-dir': { type: 'boolean', default: false },
  },
});
const N = positionals.length > 0 ? Number(positionals[0]) : 200;
const KILLS = Number(values.kills);
const KILL_EVERY_MS = Number(values['kill-every']) * 1000;
const OPS_PER_SECOND = Number(values['ops-per-second']);
const CONVERGE_TIMEOUT_MS = Number(values['converge-timeout']) * 1000;
for (const [name, v] of Object.entries({ N, KILLS, KILL_EVERY_MS, OPS_PER_SECOND, CONVERGE_TIMEOUT_MS })) {
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number, got ${v}`);
}
const NAMESPACE = 'default';
const TASK_QUEUE = 'ep-bench-crash';
/** Not used by any test, `dev` or the other benches. */
const ADDRESS_RANGE = '127.95.0.0/16';
const REPO = fileURLToPath(new URL('../../', import.meta.url));
const t0 = performance.now();
const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0).padStart(5)} s`;
const say = (text: string) => console.log(`${elapsed()}  ${text}`);

const dir = mkdtempSync(join(tmpdir(), 'ep-bench-crash-'));
let temporal: TemporalDevServer | undefined;
let kube: LocalKubeApiServer | undefined;
let probeTarget: Server | undefined;
let stopping = false;

// ---------------------------------------------------------------- processes

type PartName = 'worker' | 'bridge' | 'api';
type Victim = PartName | 'temporal' | 'apiserver';

interface Supervised {
  name: PartName;
  current?: ManagedProcess;
  /** Exits the bench did not cause (a failed start while a server was down, ...). */
  selfExits: number;
  loop?: Promise<void>;
}

/** The PIDs of a process whose command line mentions `needle` and whose executable is `exe`. */
function findPids(exe: string, needle: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const argv = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (argv[0]?.endsWith(`/${exe}`) && argv.some((a) => a.includes(needle))) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}

function killGroup(proc: ManagedProcess): void {
  try {
    if (proc.child.pid) process.kill(-proc.child.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function cleanup(): Promise<void> {
  stopping = true;
  for (const s of supervised) if (s.current) await s.current.stop(10_000).catch(() => undefined);
  await Promise.all(supervised.map((s) => s.loop ?? Promise.resolve()));
  await temporal?.stop().catch(() => undefined);
  await kube?.stop().catch(() => undefined);
  await new Promise<void>((r) => (probeTarget ? probeTarget.close(() => r()) : r()));
  probeTarget?.closeAllConnections();
  if (!values['keep-dir']) rmSync(dir, { recursive: true, force: true });
}

const supervised: Supervised[] = (['worker', 'bridge', 'api'] as const).map((name) => ({
  name,
  selfExits: 0,
}));

// ---------------------------------------------------------------- the run

async function run(): Promise<number> {
  console.log(
    `# crash bench: N=${N} local Proxies, ${KILLS} kills every ~${KILL_EVERY_MS / 1000} s, churn ${OPS_PER_SECOND} ops/s (${process.version})`,
  );
  console.log(`  temp dir ${dir}`);
  const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
  let temporalPort: number | undefined;
  let kubePort: number | undefined;
  const startTemporal = async () => {
    temporal = await startTemporalDevServer({
      cli,
      dataDir: join(dir, 'temporal'),
      persist: true,
      headless: true,
      port: temporalPort,
    });
    temporalPort = Number(temporal.address.split(':')[1]);
  };
  const startKube = async () => {
    kube = await startLocalKubeApiServer({
      binDir,
      dataDir: join(dir, 'kube'),
      persist: true,
      port: kubePort,
    });
    kubePort = Number(new URL(kube.url).port);
  };
  await Promise.all([startTemporal(), startKube()]);
  const kc = new KubeConfig();
  kc.loadFromFile(kube!.kubeconfigPath);
  await installCrds(kc);
  const objects = createProxyClient(kc);
  // The apiserver may answer 429 right after the CRDs are installed.
  for (let ok = 0; ok < 3;) {
    ok = await objects.list(NAMESPACE).then(
      () => ok + 1,
      () => 0,
    );
    await pace(200);
  }

  probeTarget = createServer((_req, res) => res.writeHead(204, { 'content-length': 0 }).end());
  await new Promise<void>((r) => probeTarget!.listen(0, '127.0.0.1', r));
  const probeURL = `http://127.0.0.1:${(probeTarget.address() as AddressInfo).port}/generate_204`;

  const stateDir = join(dir, 'state');
  const providersConfig = join(dir, 'providers.yaml');
  writeFileSync(
    providersConfig,
    `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${join(stateDir, 'local')}, addressRange: ${ADDRESS_RANGE} }\n`,
  );
  const apiUrl = `http://127.0.0.1:${await freePort()}`;
  const logs = join(dir, 'logs');
  mkdirSync(logs);
  const common = [
    '--temporal-address',
    temporal!.address,
    '--kubeconfig',
    kube!.kubeconfigPath,
    '--log-level',
    'info',
  ];
  // Each command takes only the flags of the part it runs.
  const argsOf: Record<PartName, string[]> = {
    worker: [
      ...common,
      '--task-queue',
      TASK_QUEUE,
      '--installation',
      'bench-crash',
      '--provisioning-poll',
      '2s',
      '--providers-config',
      providersConfig,
      '--state-dir',
      stateDir,
      '--gc-min-age',
      '1m',
    ],
    bridge: [...common, '--task-queue', TASK_QUEUE, '--reconcile-period', '30s'],
    api: [...common, '--discovery-addr', new URL(apiUrl).host],
  };
  /** When the api last started: leases granted before it are forgotten by its in-memory store. */
  let apiEpoch = 0;
  for (const s of supervised) {
    s.loop = (async () => {
      while (!stopping) {
        if (s.name === 'api') apiEpoch += 1;
        const proc = spawnServer(
          s.name,
          process.execPath,
          ['--import', 'tsx', join(REPO, 'cli/entry.ts'), s.name, ...argsOf[s.name]],
          join(logs, `${s.name}.log`),
        );
        s.current = proc;
        await proc.exited;
        if (stopping) return;
        if (proc.child.signalCode !== 'SIGKILL') s.selfExits += 1;
        // A restart delay, as a kubelet's back-off would give.
        await pace(1_000);
      }
    })();
  }

  // -------------------------------------------------------------- churn
  interface Want {
    port: number;
  }
  const wanted = new Map<string, Want>();
  const ops = { create: 0, edit: 0, delete: 0, failed: 0 };
  let nextName = 0;
  const freshPort = () => 20_000 + Math.floor(Math.random() * 20_000);
  const spec = (port: number): ProxySpecInput => ({
    mode: 'Managed',
    provider: 'local',
    port,
    attributes: { purpose: 'bench-crash' },
    healthCheck: { probeURL, intervalSeconds: 5 },
  });
  async function churnOnce(): Promise<void> {
    const names = [...wanted.keys()];
    const r = Math.random();
    try {
      if (names.length < N && (names.length < N * 0.9 || r < 0.34)) {
        // Created below N: the fill, and churn that makes up for deletions.
        const name = `crash-${nextName++}`;
        const port = freshPort();
        await objects.create({ metadata: { name, namespace: NAMESPACE }, spec: spec(port) });
        wanted.set(name, { port });
        ops.create += 1;
      } else if (r < 0.67 && names.length > 0) {
        const name = names[Math.floor(Math.random() * names.length)]!;
        const port = freshPort();
        await editProxySpec(objects, NAMESPACE, name, (s) => ({ ...s, port }));
        wanted.set(name, { port });
        ops.edit += 1;
      } else if (names.length > 0) {
        const name = names[Math.floor(Math.random() * names.length)]!;
        wanted.delete(name);
        await deleteProxy(objects, NAMESPACE, name);
        ops.delete += 1;
      }
    } catch {
      // The apiserver was down: the write may or may not have happened; the
      // end state is read back from the apiserver, not from `wanted`.
      ops.failed += 1;
    }
  }
  // The fleet first: N Proxies created 10 at a time, then the churn at its steady rate.
  while (wanted.size < N) {
    await Promise.all(Array.from({ length: Math.min(10, N - wanted.size) }, () => churnOnce()));
  }
  say(`${N} Proxies created (${ops.failed} failed writes)`);
  let churning = true;
  const churn = (async () => {
    while (churning) {
      await churnOnce();
      await pace(1_000 / OPS_PER_SECOND);
    }
  })();

  // -------------------------------------------------------------- leases
  interface Held {
    id: string;
    proxy: string;
    epoch: number;
  }
  const held = new Map<string, Held>();
  const leaseOps = { granted: 0, released: 0, noMatch: 0, failed: 0 };
  async function leaseOnce(): Promise<void> {
    try {
      if (held.size > 0 && Math.random() < 0.3) {
        const ids = [...held.keys()];
        const id = ids[Math.floor(Math.random() * ids.length)]!;
        const res = await fetch(`${apiUrl}/v1/leases/${id}`, {
          method: 'DELETE',
          signal: AbortSignal.timeout(5_000),
        });
        if (res.status === 204) {
          held.delete(id);
          leaseOps.released += 1;
        } else leaseOps.failed += 1;
        return;
      }
      const epoch = apiEpoch;
      const res = await fetch(`${apiUrl}/v1/leases`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ttlSeconds: 3600 }),
        signal: AbortSignal.timeout(5_000),
      });
      if (res.status === 201) {
        const body = (await res.json()) as { leaseID: string; proxy: { id: string } };
        held.set(body.leaseID, { id: body.leaseID, proxy: body.proxy.id, epoch });
        leaseOps.granted += 1;
      } else if (res.status === 409) leaseOps.noMatch += 1;
      else leaseOps.failed += 1;
    } catch {
      leaseOps.failed += 1;
    }
  }
  const leasing = (async () => {
    while (churning) {
      await leaseOnce();
      await pace(250);
    }
  })();

  // -------------------------------------------------------------- warm-up
  // Kills start once half the fleet is Ready, so leases are being granted
  // (and the kills land on a working fleet, not on a start-up).
  const readyCount = async () => {
    const list = await objects.list(NAMESPACE);
    return list.items.filter((p) => p.status?.phase === 'Ready').length;
  };
  const warmDeadline = Date.now() + 600_000;
  for (let ready = 0; ready < N / 2;) {
    if (Date.now() > warmDeadline)
      throw new Error(`warm-up: only ${ready} of ${N} Proxies Ready after 10 min`);
    await pace(2_000);
    ready = await readyCount().catch(() => 0);
  }
  say(`warm-up done: ${await readyCount()} Ready; leases ${JSON.stringify(leaseOps)}`);

  // -------------------------------------------------------------- kills
  const kills: Record<Victim, number> = { worker: 0, bridge: 0, api: 0, temporal: 0, apiserver: 0 };
  const victims: Victim[] = ['worker', 'bridge', 'api', 'temporal', 'apiserver'];
  say(`worker, bridge, api starting; churn and leases running; ${KILLS} kills to go`);
  for (let k = 0; k < KILLS; k++) {
    await pace(KILL_EVERY_MS * (0.5 + Math.random()));
    const victim = victims[Math.floor(Math.random() * victims.length)]!;
    kills[victim] += 1;
    if (victim === 'temporal') {
      killGroup(temporal!.process);
      await temporal!.stop().catch(() => undefined);
      await startTemporal();
    } else if (victim === 'apiserver') {
      // etcd too: the whole store goes down hard, and comes back from its data dir.
      for (const exe of ['kube-apiserver', 'etcd']) {
        for (const pid of findPids(exe, join(dir, 'kube'))) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // gone
          }
        }
      }
      await kube!.stop().catch(() => undefined);
      await startKube();
    } else {
      const s = supervised.find((x) => x.name === victim)!;
      if (s.current) killGroup(s.current);
    }
    say(`kill ${k + 1}/${KILLS}: ${victim}; ops ${JSON.stringify(ops)}; leases ${JSON.stringify(leaseOps)}`);
  }
  churning = false;
  await Promise.all([churn, leasing]);
  const quietAt = performance.now();
  say(`kills done; churn stopped (${JSON.stringify(ops)}); waiting for convergence`);

  // -------------------------------------------------------------- convergence
  interface Figures {
    proxies: number;
    leaked: number;
    duplicates: number;
    withoutInstance: number;
    notReady: number;
    finalizersLeft: number;
  }
  const records = (): Array<{ name: string; uid: string }> => {
    const d = join(stateDir, 'local', 'instances');
    let files: string[] = [];
    try {
      files = readdirSync(d).filter((f) => f.endsWith('.json') && !f.startsWith('.'));
    } catch {
      return [];
    }
    const out: Array<{ name: string; uid: string }> = [];
    for (const f of files) {
      try {
        const r = JSON.parse(readFileSync(join(d, f), 'utf8')) as {
          name: string;
          labels: Record<string, string>;
        };
        out.push({ name: r.name, uid: r.labels[MARK_UID] ?? '' });
      } catch {
        out.push({ name: f, uid: '' });
      }
    }
    return out;
  };
  const measure = async (): Promise<Figures> => {
    const list = await objects.list(NAMESPACE);
    const live = list.items.filter((p) => !p.metadata.deletionTimestamp);
    const uids = new Set(live.map((p) => p.metadata.uid!));
    const recs = records();
    const perUid = new Map<string, number>();
    for (const r of recs) perUid.set(r.uid, (perUid.get(r.uid) ?? 0) + 1);
    return {
      proxies: live.length,
      leaked: recs.filter((r) => !uids.has(r.uid)).length,
      duplicates: [...perUid.values()].reduce((a, n) => a + Math.max(0, n - 1), 0),
      withoutInstance: live.filter((p) => !perUid.has(p.metadata.uid!)).length,
      notReady: live.filter(
        (p) =>
          p.status?.phase !== 'Ready' ||
          p.status.observedGeneration !== p.metadata.generation ||
          !(p.metadata.finalizers ?? []).includes(FINALIZER),
      ).length,
      finalizersLeft: list.items.length - live.length,
    };
  };
  const zero = (f: Figures) =>
    f.leaked + f.duplicates + f.withoutInstance + f.notReady + f.finalizersLeft === 0;
  let figures: Figures | undefined;
  const deadline = Date.now() + CONVERGE_TIMEOUT_MS;
  let lastReport = 0;
  for (;;) {
    figures = await measure().catch(() => figures);
    if (figures && zero(figures)) break;
    if (Date.now() > deadline) break;
    if (Date.now() - lastReport > 15_000) {
      lastReport = Date.now();
      say(`converging: ${JSON.stringify(figures)}`);
    }
    await pace(1_000);
  }
  const convergeSeconds = (performance.now() - quietAt) / 1000;
  const converged = figures !== undefined && zero(figures);

  // -------------------------------------------------------------- lease slots
  // The api's counts must settle too (its cache follows the apiserver).
  const leaseFigures = async () => {
    const res = await fetch(`${apiUrl}/v1/proxies`, { signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as {
      proxies: Array<{ id: string; activeLeases: number; maxLeases: number }>;
    };
    const api = new Map(body.proxies.map((p) => [p.id, p]));
    const ours = new Map<string, number>();
    let forgotten = 0;
    let onDeleted = 0;
    for (const h of held.values()) {
      if (!api.has(h.proxy)) onDeleted += 1;
      else if (h.epoch !== apiEpoch) forgotten += 1;
      else ours.set(h.proxy, (ours.get(h.proxy) ?? 0) + 1);
    }
    let lost = 0;
    let doubled = 0;
    for (const [id, p] of api) {
      const mine = ours.get(id) ?? 0;
      if (p.activeLeases < mine) lost += mine - p.activeLeases;
      if (p.activeLeases > mine) doubled += p.activeLeases - mine;
      if (p.activeLeases > p.maxLeases) doubled += p.activeLeases - p.maxLeases;
    }
    return {
      lost,
      doubled,
      forgotten,
      onDeleted,
      held: held.size,
      compared: [...ours.values()].reduce((a, b) => a + b, 0),
    };
  };
  // The last api restart may have come late in the run and forgotten every
  // lease: take more from the converged fleet, so the comparison below has
  // leases of the api's current start to check (and its slots are full).
  const grantedBefore = leaseOps.granted;
  for (let i = 0; i < 400 && leaseOps.granted - grantedBefore < 100; i++) await leaseOnce();
  say(`after convergence: ${leaseOps.granted - grantedBefore} more leases granted`);
  let leases = await leaseFigures().catch((e: unknown) => ({ error: String(e) }) as const);
  // Forgotten leases of a restarted api free their slots there; the api's counts are what it knows now.
  if ('error' in leases) leases = await leaseFigures();

  const selfExits = Object.fromEntries(supervised.map((s) => [s.name, s.selfExits]));
  console.log('');
  console.log(`## result (${converged ? 'converged' : 'NOT converged'})`);
  console.log(
    `kills per process        ${JSON.stringify(kills)} (total ${Object.values(kills).reduce((a, b) => a + b, 0)})`,
  );
  console.log(
    `exits not caused by a kill (failed starts while a server was down) ${JSON.stringify(selfExits)}`,
  );
  console.log(`churn                    ${JSON.stringify(ops)}; leases ${JSON.stringify(leaseOps)}`);
  console.log(`time to converge         ${convergeSeconds.toFixed(1)} s after the last kill`);
  console.log(`Proxies at the end       ${figures?.proxies ?? '?'}`);
  console.log(`leaked instances         ${figures?.leaked ?? '?'}`);
  console.log(`duplicate instances      ${figures?.duplicates ?? '?'}`);
  console.log(`Proxies without instance ${figures?.withoutInstance ?? '?'}`);
  console.log(`Proxies not Ready        ${figures?.notReady ?? '?'}`);
  console.log(`finalizers left          ${figures?.finalizersLeft ?? '?'}`);
  console.log(`lease slots lost         ${leases.lost}`);
  console.log(`lease slots doubled      ${leases.doubled}`);
  console.log(
    `leases compared ${leases.compared}; forgotten by api restarts (in-memory store, by design) ${leases.forgotten}; on deleted Proxies ${leases.onDeleted}; held ${leases.held}`,
  );
  const ok = converged && leases.lost === 0 && leases.doubled === 0;
  return ok ? 0 : 1;
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    process.stderr.write(`\n${signal}: stopping everything ...\n`);
    void cleanup().finally(() => process.exit(130));
  });
}

run()
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  })
  .catch(async (error: unknown) => {
    console.error(error);
    await cleanup();
    process.exit(1);
  });
