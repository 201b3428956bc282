/**
 * A crawler fleet in miniature, for the autoscaling test and bench: virtual
 * clients that lease from a pool through the real lease API, use the proxy
 * (a CONNECT through it) at the start and end of each session, release,
 * and lease again; `demand(t)` says how many clients are active at t. A
 * refused lease (409) is retried after a pause (1 s), as crawlers back off.
 *
 * Every CONNECT through a proxy whose lease is held must succeed: a failure
 * is a lease that pointed at a proxy that was removed (`broken`).
 */
import { authorizationOf, connectThrough, leaseApi } from './crawler.js';

export interface RampSample {
  /** Seconds since the ramp started. */
  t: number;
  /** Active clients (the demand). */
  demand: number;
  /** Leases held now. */
  held: number;
  /** 409s in this sample's interval. */
  denials: number;
  /** What `observe` returned (pool status figures). */
  ready: number;
  desired: number;
}

export interface RampResult {
  samples: RampSample[];
  granted: number;
  denials: number;
  /** CONNECTs through a leased proxy that failed (a lease pointing at a removed proxy). */
  broken: number;
  brokenDetails: string[];
  /** Seconds since start of the last 409. */
  lastDenialAt?: number;
}

export interface RampOptions {
  apiUrl: string;
  pool: string;
  /** Where CONNECTs go (a local target port). */
  targetPort: number;
  /** Active clients at t seconds. */
  demand: (t: number) => number;
  durationMs: number;
  maxClients: number;
  /** How long a client holds one lease before releasing and leasing again. */
  sessionMs?: number;
  /** How long a refused client waits before asking again (default 1 s). */
  retryMs?: number;
  sampleEveryMs?: number;
  /** Ends the run early (the clients release what they hold). */
  signal?: AbortSignal;
  /** Reads the pool's ready and desired counts for a sample. */
  observe: () => Promise<{ ready: number; desired: number }>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runLeaseRamp(opts: RampOptions): Promise<RampResult> {
  const api = leaseApi(opts.apiUrl);
  const sessionMs = opts.sessionMs ?? 3_000;
  const start = Date.now();
  const elapsed = () => (Date.now() - start) / 1000;
  const done = () => Date.now() - start >= opts.durationMs || opts.signal?.aborted === true;
  let held = 0;
  let granted = 0;
  let denials = 0;
  let intervalDenials = 0;
  let lastDenialAt: number | undefined;
  let broken = 0;
  const brokenDetails: string[] = [];

  const client = async (index: number): Promise<void> => {
    while (!done()) {
      if (index >= opts.demand(elapsed())) {
        await sleep(100);
        continue;
      }
      const answer = await api.acquire({ pool: opts.pool, ttlSeconds: 60, target: 'load.example' });
      if (answer.status !== 201) {
        denials++;
        intervalDenials++;
        lastDenialAt = elapsed();
        await sleep(opts.retryMs ?? 1_000);
        continue;
      }
      granted++;
      held++;
      const { leaseID, proxy } = answer.body;
      try {
        const check = async (when: string) => {
          const code = await connectThrough(
            proxy.ip,
            proxy.port,
            opts.targetPort,
            5_000,
            authorizationOf(answer.body.proxyURL),
          );
          if (code !== 200) {
            broken++;
            if (brokenDetails.length < 20)
              brokenDetails.push(`${when} ${proxy.id} ${proxy.ip}:${proxy.port} -> ${code}`);
          }
        };
        await check('at grant');
        const until = Date.now() + sessionMs;
        while (Date.now() < until && !done() && index < opts.demand(elapsed())) await sleep(100);
        await check('before release');
      } finally {
        held--;
        await api.release(leaseID);
      }
    }
  };

  const samples: RampSample[] = [];
  const sampler = (async () => {
    while (!done()) {
      const t = elapsed();
      const demand = Math.min(opts.maxClients, Math.floor(opts.demand(t)));
      const seen = await opts.observe().catch(() => ({ ready: -1, desired: -1 }));
      samples.push({ t: Math.round(t * 10) / 10, demand, held, denials: intervalDenials, ...seen });
      intervalDenials = 0;
      await sleep(opts.sampleEveryMs ?? 1_000);
    }
  })();

  await Promise.all([...Array.from({ length: opts.maxClients }, (_, i) => client(i)), sampler]);
  return {
    samples,
    granted,
    denials,
    broken,
    brokenDetails,
    ...(lastDenialAt !== undefined ? { lastDenialAt } : {}),
  };
}

/** The curve as a table, one line per sample. */
export function formatRamp(samples: readonly RampSample[]): string {
  const lines = ['t(s)  demand  held  ready  desired  denials'];
  for (const s of samples) {
    lines.push(
      `${s.t.toFixed(1).padStart(5)}  ${String(s.demand).padStart(6)}  ${String(s.held).padStart(4)}  ${String(s.ready).padStart(5)}  ${String(s.desired).padStart(7)}  ${String(s.denials).padStart(7)}`,
    );
  }
  return lines.join('\n');
}

/** Direction changes of a series (up then down counts one), with the times they happened. */
export function directionChanges(points: ReadonlyArray<{ t: number; value: number }>): number[] {
  const changes: number[] = [];
  let direction = 0;
  let last: number | undefined;
  for (const p of points) {
    if (last !== undefined && p.value !== last) {
      const d = Math.sign(p.value - last);
      if (direction !== 0 && d !== direction) changes.push(p.t);
      direction = d;
    }
    last = p.value;
  }
  return changes;
}
