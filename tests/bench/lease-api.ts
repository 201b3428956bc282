/**
 * Lease API throughput and latency: acquire+release pairs from 64
 * concurrent keep-alive clients over loopback HTTP against 1,000 Ready
 * proxies, beside a bare Hono app with the same two routes (a JSON 201 and
 * a 204) served the same way in the same run. Prints both and the ratio.
 *
 *   npx tsx tests/bench/lease-api.ts [--seconds 5] [--clients 64] [--proxies 1000]
 *
 * Each server runs in its own child process so the load generator does not
 * share its event loop; on a 2-core machine they still share the CPUs, which
 * affects both targets alike. The lease server runs as in production: auth
 * on, info-level request logs (to /dev/null), process metrics, the sweep.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Hono } from 'hono';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createApi } from '../../api/app.js';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';
import { serveApi } from '../../api/server.js';
import type { Proxy, ProxySpec, ProxySpecInput } from '../../resources/proxy-schema.js';

const TOKEN = 'bench-token';
type Kind = 'bare' | 'lease';

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
    apiVersion: 'crawl.example.com/v1alpha1' as const,
    kind: 'Proxy' as const,
    metadata: { name: `proxy-${String(i).padStart(4, '0')}`, namespace: 'bench' },
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
async function serve(kind: Kind, proxies: number): Promise<void> {
  let app: Hono;
  if (kind === 'bare') {
    app = new Hono();
    // The floor: Hono reading and parsing the same JSON body, answering 201 with JSON.
    app.post('/v1/leases', async (c) => c.json({ leaseID: 'X', request: await c.req.json<unknown>() }, 201));
    app.delete('/v1/leases/:id', (c) => c.body(null, 204));
  } else {
    const store = new MemoryLeaseStore();
    store.startSweeping();
    app = createApi({
      catalog: createStaticProxyCatalog(fleet(proxies)),
      leaseStore: store,
      token: TOKEN,
      logger: pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: false })),
      registry: new Registry(),
    });
  }
  const server = await serveApi(app, { host: '127.0.0.1', port: 0 });
  process.send?.({ port: server.port });
}

interface Sample {
  pairs: number;
  seconds: number;
  acquire: number[];
  release: number[];
  pair: number[];
  errors: number;
}

function call(
  agent: Agent,
  port: number,
  method: string,
  path: string,
  body?: string,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent,
        headers: {
          authorization: `Bearer ${TOKEN}`,
          ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function load(port: number, clients: number, warmupMs: number, measureMs: number): Promise<Sample> {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const sample: Sample = {
    pairs: 0,
    seconds: measureMs / 1000,
    acquire: [],
    release: [],
    pair: [],
    errors: 0,
  };
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const stopAt = measureFrom + measureMs;
  const body = JSON.stringify({ ttlSeconds: 60, target: 'example.com' });
  const client = async () => {
    for (;;) {
      const t0 = performance.now();
      if (t0 >= stopAt) return;
      const acquired = await call(agent, port, 'POST', '/v1/leases', body);
      const t1 = performance.now();
      if (acquired.status !== 201) {
        sample.errors++;
        continue;
      }
      const id = (JSON.parse(acquired.text) as { leaseID: string }).leaseID;
      const released = await call(agent, port, 'DELETE', `/v1/leases/${id}`);
      const t2 = performance.now();
      if (released.status !== 204) sample.errors++;
      if (t0 >= measureFrom && t2 <= stopAt) {
        sample.pairs++;
        sample.acquire.push(t1 - t0);
        sample.release.push(t2 - t1);
        sample.pair.push(t2 - t0);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  agent.destroy();
  return sample;
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

async function startChild(kind: Kind, proxies: number): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', kind, '--proxies', String(proxies)], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`${kind} server exited with ${code}`)));
  });
  return { child, port };
}

async function measure(
  kind: Kind,
  opts: { clients: number; proxies: number; seconds: number },
): Promise<Sample> {
  const { child, port } = await startChild(kind, opts.proxies);
  try {
    return await load(port, opts.clients, 1500, opts.seconds * 1000);
  } finally {
    child.kill('SIGTERM');
  }
}

const ms = (v: number) => `${v.toFixed(2)} ms`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      serve: { type: 'string' },
      seconds: { type: 'string', default: '5' },
      clients: { type: 'string', default: '64' },
      proxies: { type: 'string', default: '1000' },
    },
  });
  const proxies = Number(values.proxies);
  if (values.serve) return serve(values.serve as Kind, proxies);

  const opts = { clients: Number(values.clients), proxies, seconds: Number(values.seconds) };
  console.log(
    `lease API benchmark: ${opts.clients} keep-alive clients, ${opts.proxies} Ready proxies, ${opts.seconds}s measured after 1.5s warm-up, Node ${process.version}`,
  );
  const results: Array<[string, Sample]> = [];
  for (const kind of ['bare', 'lease'] as const) results.push([kind, await measure(kind, opts)]);

  const rows = results.map(([kind, s]) => ({
    target: kind === 'bare' ? 'bare Hono' : 'lease API',
    'pairs/s': Math.round(s.pairs / s.seconds),
    'acquire p50': ms(quantile(s.acquire, 0.5)),
    'acquire p99': ms(quantile(s.acquire, 0.99)),
    'release p99': ms(quantile(s.release, 0.99)),
    'pair p99': ms(quantile(s.pair, 0.99)),
    errors: s.errors,
  }));
  console.table(rows);
  const [bare, lease] = [results[0]![1], results[1]![1]];
  const throughputRatio = lease.pairs / bare.pairs;
  const p99Ratio = quantile(lease.pair, 0.99) / quantile(bare.pair, 0.99);
  console.log(
    `throughput: lease API at ${(throughputRatio * 100).toFixed(1)}% of bare Hono (ratio ${throughputRatio.toFixed(3)})`,
  );
  console.log(`pair p99 latency: lease API ${p99Ratio.toFixed(2)}x bare Hono`);
  if (bare.errors + lease.errors > 0) process.exitCode = 1;
}

await main();
