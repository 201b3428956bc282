/**
 * The lease API's load: keep-alive clients each running acquire+release
 * pairs against one or two servers on the loopback, timed per call. Shared by
 * the lease API bench (tests/bench/lease-api.ts) and the scale bench
 * (tests/bench/scale.ts), so both measure the same thing.
 */
import { fork } from 'node:child_process';
import { Agent, request } from 'node:http';
import { fileURLToPath } from 'node:url';

export interface Sample {
  pairs: number;
  seconds: number;
  acquire: number[];
  release: number[];
  pair: number[];
  errors: number;
  /** Pairs completed, warm-up included. */
  allPairs: number;
  /** Server CPU microseconds per pair (api processes + Redis), warm-up included. */
  cpuPerPair: number;
}

function call(
  agent: Agent,
  token: string,
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
          authorization: `Bearer ${token}`,
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

export async function load(opts: {
  ports: number[];
  token: string;
  clients: number;
  warmupMs: number;
  measureMs: number;
}): Promise<Sample> {
  const { ports, token, clients, warmupMs, measureMs } = opts;
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const sample: Sample = {
    pairs: 0,
    seconds: measureMs / 1000,
    acquire: [],
    release: [],
    pair: [],
    errors: 0,
    allPairs: 0,
    cpuPerPair: NaN,
  };
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const stopAt = measureFrom + measureMs;
  const body = JSON.stringify({ ttlSeconds: 60, target: 'example.com' });
  // With two replicas, client i acquires on one and releases on the other.
  const client = async (i: number) => {
    const port = ports[i % ports.length]!;
    const releasePort = ports[(i + 1) % ports.length]!;
    for (;;) {
      const t0 = performance.now();
      if (t0 >= stopAt) return;
      const acquired = await call(agent, token, port, 'POST', '/v1/leases', body);
      const t1 = performance.now();
      if (acquired.status !== 201) {
        sample.errors++;
        continue;
      }
      const id = (JSON.parse(acquired.text) as { leaseID: string }).leaseID;
      const released = await call(agent, token, releasePort, 'DELETE', `/v1/leases/${id}`);
      const t2 = performance.now();
      if (released.status !== 204) sample.errors++;
      sample.allPairs++;
      if (t0 >= measureFrom && t2 <= stopAt) {
        sample.pairs++;
        sample.acquire.push(t1 - t0);
        sample.release.push(t2 - t1);
        sample.pair.push(t2 - t0);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
  agent.destroy();
  return sample;
}

export function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

/**
 * The floor the lease API is compared with: a bare Hono app with the same two
 * routes (lease-api.ts's `--serve bare`), in a child process of its own.
 */
export async function startBareHono(): Promise<{ port: number; stop(): void }> {
  const child = fork(fileURLToPath(new URL('./lease-api.ts', import.meta.url)), ['--serve', 'bare'], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`bare Hono server exited with ${code}`)));
  });
  return {
    port,
    stop: () => void child.kill('SIGTERM'),
  };
}
