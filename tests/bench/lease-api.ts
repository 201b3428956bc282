/**
 * Lease API throughput and latency: acquire+release pairs from 64
 * concurrent keep-alive clients over loopback HTTP against 1,000 Ready
 * proxies, beside a bare Hono app with the same two routes (a JSON 201 and
 * a 204) served the same way in the same run. Measures, in one run: bare
 * Hono, the lease API on the in-memory store, on the Redis store with one
 * replica, and with two replicas on the same Redis (the clients split
 * between them; each acquires on one and releases on the other). Prints
 * each as a ratio of bare Hono, with p50/p99 latencies.
 *
 *   npx tsx tests/bench/lease-api.ts [--seconds 5] [--clients 64] [--proxies 1000] [--rounds 1]
 *
 * With --rounds N the four targets run N times, interleaved, and each
 * ratio is taken against the bare Hono run of its own round (a shared
 * machine's load drifts between rounds); the summary gives the medians.
 *
 * Each server runs in its own child process so the load generator does not
 * share its event loop; on a 2-core machine they still share the CPUs (and
 * with Redis), which affects every target alike. The lease server runs as in
 * production: auth on, info-level request logs by the CLI's logger (its
 * stdout is /dev/null), process metrics, the sweep (memory store). Redis is Debian's redis-server from
 * infra/scripts/install-redis.sh, on 127.0.0.1, no persistence.
 *
 * `--cpu-prof-dir DIR` writes a CPU profile of each server process (they exit
 * on the SIGTERM that ends a target) into DIR.
 *
 * Beside the ratios, each target's server CPU time per pair (its api
 * processes, plus Redis's for the Redis targets, from INFO cpu; warm-up
 * included): on a machine loaded by other work the ratios measure the
 * scheduler's share as much as cost (a target with one more process gets
 * more of the CPUs), while CPU time per pair stays near the cost.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { parseArgs } from 'node:util';
import { Hono } from 'hono';
import { createLogger } from '../../cli/logger.js';
import { Registry } from 'prom-client';
import { createApi } from '../../api/app.js';
import { MemoryLeaseStore, type LeaseStore } from '../../api/lease-store.js';
import { RedisLeaseStore } from '../../api/redis-lease-store.js';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';
import { serveApi } from '../../api/server.js';
import { API_VERSION } from '../../kube/coordinates.js';
import type { Proxy, ProxySpec, ProxySpecInput } from '../../resources/proxy-schema.js';
import { startRedis } from '../../local-servers/redis.js';
import { load, quantile, type Sample } from './lease-load.js';

const TOKEN = 'bench-token';
/** Fewer measured pairs than this in any target leaves its round out of the summary. */
const MIN_PAIRS = 100;
type Kind = 'bare' | 'memory' | 'redis';
type Target = 'bare' | 'memory' | 'redis' | 'redis2';

function spec(geo: string): ProxySpec {
  const input: ProxySpecInput = {
    mode: 'Managed',
    provider: 'local',
    port: 3128,
    maxLeases: 5,
    attributes: { geo },
  };
  return input as ProxySpec;
}

function fleet(n: number): Proxy[] {
  return Array.from({ length: n }, (_, i) => ({
    apiVersion: API_VERSION,
    kind: 'Proxy' as const,
    metadata: {
      name: `proxy-${String(i).padStart(4, '0')}`,
      namespace: 'bench',
      uid: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    },
    spec: spec(i % 2 ? 'eu' : 'us'),
    status: {
      phase: 'Ready' as const,
      ip: `10.0.${i >> 8}.${i & 255}`,
      latencyMillis: 5 + (i % 50),
      conditions: [
        {
          type: 'Healthy',
          status: 'True' as const,
          lastTransitionTime: '2026-01-01T00:00:00Z',
          reason: 'Probe',
          message: '',
        },
      ],
    },
  }));
}

/** Child process: serve one kind on 127.0.0.1:0 and report the port. */
async function serve(kind: Kind, proxies: number, redisUrl: string): Promise<void> {
  let app: Hono;
  // The CLI's own logger (redaction, trace ids, stdout), as `egress-proxies api` builds it;
  // the parent points this process's stdout at /dev/null.
  const logger = createLogger('info');
  if (kind === 'bare') {
    app = new Hono();
    // The floor: Hono reading and parsing the same JSON body, answering 201 with JSON.
    app.post('/v1/leases', async (c) => c.json({ leaseID: 'X', request: await c.req.json<unknown>() }, 201));
    app.delete('/v1/leases/:id', (c) => c.body(null, 204));
  } else {
    let store: LeaseStore;
    if (kind === 'redis') {
      const redisStore = new RedisLeaseStore({ url: redisUrl, logger });
      await redisStore.connect();
      store = redisStore;
    } else {
      const memoryStore = new MemoryLeaseStore();
      memoryStore.startSweeping();
      store = memoryStore;
    }
    app = createApi({
      catalog: createStaticProxyCatalog(fleet(proxies)),
      leaseStore: store,
      token: TOKEN,
      logger,
      registry: new Registry(),
    });
  }
  const server = await serveApi(app, { host: '127.0.0.1', port: 0 });
  process.on('message', (m: { cpu?: boolean }) => {
    if (m.cpu) {
      const u = process.cpuUsage();
      process.send?.({ cpuMicros: u.user + u.system });
    }
  });
  // Exit (not die) on the parent's SIGTERM, so that the profile
  // --cpu-prof-dir asks for is written.
  process.once('SIGTERM', () => process.exit(0));
  process.send?.({ port: server.port });
}

function childCpu(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    const on = (m: { cpuMicros?: number }) => {
      if (m.cpuMicros === undefined) return;
      child.off('message', on);
      resolve(m.cpuMicros);
    };
    child.on('message', on);
    child.send({ cpu: true });
  });
}

async function redisCpuMicros(admin: Redis): Promise<number> {
  const info = await admin.info('cpu');
  const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? NaN);
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1e6;
}

async function startChild(
  kind: Kind,
  proxies: number,
  redisUrl: string,
  cpuProfDir: string,
): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(
    fileURLToPath(import.meta.url),
    ['--serve', kind, '--proxies', String(proxies), '--redis', redisUrl],
    {
      execArgv: ['--import', 'tsx', ...(cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`] : [])],
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`${kind} server exited with ${code}`)));
  });
  return { child, port };
}

async function measure(
  target: Target,
  opts: {
    clients: number;
    proxies: number;
    seconds: number;
    redisUrl: string;
    admin: Redis;
    /** Each server process writes a CPU profile here when it exits ('' for none). */
    cpuProfDir: string;
  },
): Promise<Sample> {
  const kind: Kind = target === 'redis2' ? 'redis' : target;
  const children = await Promise.all(
    Array.from({ length: target === 'redis2' ? 2 : 1 }, () =>
      startChild(kind, opts.proxies, opts.redisUrl, opts.cpuProfDir),
    ),
  );
  const cpu = async () =>
    (await Promise.all(children.map((c) => childCpu(c.child)))).reduce((a, b) => a + b, 0) +
    (kind === 'redis' ? await redisCpuMicros(opts.admin) : 0);
  try {
    const before = await cpu();
    const sample = await load({
      ports: children.map((c) => c.port),
      token: TOKEN,
      clients: opts.clients,
      warmupMs: 1500,
      measureMs: opts.seconds * 1000,
    });
    sample.cpuPerPair = (await cpu()) - before;
    sample.cpuPerPair /= sample.allPairs;
    return sample;
  } finally {
    for (const { child } of children) child.kill('SIGTERM');
  }
}

const ms = (v: number) => `${v.toFixed(2)} ms`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      serve: { type: 'string' },
      redis: { type: 'string', default: '' },
      seconds: { type: 'string', default: '5' },
      clients: { type: 'string', default: '64' },
      proxies: { type: 'string', default: '1000' },
      rounds: { type: 'string', default: '1' },
      'cpu-prof-dir': { type: 'string', default: '' },
    },
  });
  const proxies = Number(values.proxies);
  if (values.serve) return serve(values.serve as Kind, proxies, values.redis);
  const rounds = Number(values.rounds);

  const redis = await startRedis();
  const admin = new Redis(redis.url);
  const opts = {
    admin,
    clients: Number(values.clients),
    proxies,
    seconds: Number(values.seconds),
    redisUrl: redis.url,
    cpuProfDir: values['cpu-prof-dir'],
  };
  console.log(
    `lease API benchmark: ${opts.clients} keep-alive clients, ${opts.proxies} Ready proxies, ${opts.seconds}s measured after 1.5s warm-up, Node ${process.version}`,
  );
  const labels: Record<Target, string> = {
    bare: 'bare Hono',
    memory: 'lease API, memory store',
    redis: 'lease API, Redis, 1 replica',
    redis2: 'lease API, Redis, 2 replicas',
  };
  const targets = ['bare', 'memory', 'redis', 'redis2'] as const;
  const throughput = new Map<Target, number[]>(targets.map((t) => [t, []]));
  const p99x = new Map<Target, number[]>(targets.map((t) => [t, []]));
  const cpux = new Map<Target, number[]>(targets.map((t) => [t, []]));
  let errors = 0;
  let skipped = 0;
  try {
    for (let round = 1; round <= rounds; round++) {
      const results: Array<[Target, Sample]> = [];
      for (const target of targets) results.push([target, await measure(target, opts)]);
      const bare = results[0]![1];
      const bareP99 = quantile(bare.pair, 0.99);
      if (rounds > 1) console.log(`round ${round} of ${rounds}`);
      console.table(
        results.map(([target, s]) => ({
          target: labels[target],
          'pairs/s': Math.round(s.pairs / s.seconds),
          'x bare': (s.pairs / bare.pairs).toFixed(3),
          'acquire p50': ms(quantile(s.acquire, 0.5)),
          'acquire p99': ms(quantile(s.acquire, 0.99)),
          'release p99': ms(quantile(s.release, 0.99)),
          'pair p50': ms(quantile(s.pair, 0.5)),
          'pair p99': ms(quantile(s.pair, 0.99)),
          'p99 x bare': (quantile(s.pair, 0.99) / bareP99).toFixed(2),
          'CPU us/pair': Math.round(s.cpuPerPair),
          'CPU x bare': (s.cpuPerPair / bare.cpuPerPair).toFixed(2),
          errors: s.errors,
        })),
      );
      for (const [, s] of results) errors += s.errors;
      // A machine so loaded that a target completes almost nothing gives
      // ratios of noise (or 0/0): such a round is shown but not counted.
      const starved = results.filter(([, s]) => s.pairs < MIN_PAIRS).map(([t]) => labels[t]);
      if (starved.length > 0) {
        skipped++;
        console.log(
          `round ${round} not counted: fewer than ${MIN_PAIRS} measured pairs for ${starved.join(', ')} (machine too loaded)`,
        );
        continue;
      }
      for (const [target, s] of results) {
        throughput.get(target)!.push(s.pairs / bare.pairs);
        p99x.get(target)!.push(quantile(s.pair, 0.99) / bareP99);
        cpux.get(target)!.push(s.cpuPerPair / bare.cpuPerPair);
      }
    }
  } finally {
    admin.disconnect();
    await redis.stop();
  }

  const median = (v: number[]) => quantile(v, 0.5);
  const span = (v: number[]) =>
    v.length > 1 ? ` (${Math.min(...v).toFixed(2)}-${Math.max(...v).toFixed(2)})` : '';
  for (const target of targets.slice(1)) {
    const t = throughput.get(target)!;
    const p = p99x.get(target)!;
    const c = cpux.get(target)!;
    console.log(
      `${labels[target]}: throughput ${median(t).toFixed(3)}${span(t)} of bare Hono, pair p99 ${median(p).toFixed(2)}x${span(p)} bare Hono's, server CPU per pair ${median(c).toFixed(2)}x${span(c)} bare Hono's`,
    );
  }
  if (skipped === rounds) {
    console.log('no round counted: the machine was too loaded to compare anything; run again');
    process.exitCode = 1;
    return;
  }
  const met = median(throughput.get('redis')!) >= 0.3 && median(p99x.get('redis')!) <= 3;
  console.log(
    `goals for the Redis store, 1 replica (throughput >= 0.3 of bare, pair p99 <= 3x bare): ${met ? 'met' : 'NOT met'}`,
  );
  if (errors > 0) process.exitCode = 1;
}

await main();
