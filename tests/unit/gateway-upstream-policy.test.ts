/**
 * The gateway's upstream policy (gateway/upstream-policy.ts), without
 * sockets: which failure is retried on another proxy, what is reported
 * rate_limited, how many proxies are tried, and what the crawler is told.
 */
import { describe, expect, it, vi } from 'vitest';
import { LeaseStoreUnavailableError } from '../../api/lease-store.js';
import type { ProxyView } from '../../api/proxy-catalog.js';
import { CatalogNotSyncedError, type ConnectionLease, type LeaseOutcome } from '../../gateway/leases.js';
import { Refusal } from '../../gateway/refusal.js';
import {
  attemptUpstream,
  dialFailure,
  passiveOutcomeOfStatus,
  reportAnswer,
  requestFailure,
  UpstreamAttemptError,
  type UpstreamAttempts,
} from '../../gateway/upstream-policy.js';

const TARGET = 'example.test';

function proxy(id: string): ProxyView {
  return { id, host: '127.0.0.1', port: 3128 } as ProxyView;
}

/** A lease that records what the policy did with it. */
function fakeLease(id: string) {
  const calls: string[] = [];
  const lease: ConnectionLease = {
    proxy: proxy(id),
    session: undefined,
    done: vi.fn(() => {
      calls.push('done');
      return Promise.resolve();
    }),
    failed: vi.fn((target: string) => {
      calls.push(`failed ${target}`);
      return Promise.resolve();
    }),
    rateLimited: vi.fn((target: string) => {
      calls.push(`rateLimited ${target}`);
      return Promise.resolve();
    }),
  };
  return { lease, calls };
}

const noMatch: LeaseOutcome = {
  granted: null,
  stats: { considered: 2, inCooldown: 1, atCapacity: 1, outranked: 0, unhealthy: 1 },
};

/**
 * A run over the proxies p1, p2, ... (each acquire grants the next, until
 * `grants` run out); `attempt` decides per proxy id.
 */
function run<T>(
  attempt: (proxy: ProxyView) => Promise<T>,
  overrides: Partial<UpstreamAttempts<T>> & { grants?: number } = {},
) {
  const leases = Array.from({ length: overrides.grants ?? 10 }, (_, i) => fakeLease(`p${i + 1}`));
  const excludedSeen: string[][] = [];
  let next = 0;
  const metrics = { retry: vi.fn(), leaseWait: vi.fn(), upstreamError: vi.fn() };
  const log = { warn: vi.fn() };
  const acquire = vi.fn((excluded: ReadonlySet<string>): Promise<LeaseOutcome> => {
    excludedSeen.push([...excluded]);
    const granted = leases[next++];
    return Promise.resolve(granted ? { granted: granted.lease } : noMatch);
  });
  const promise = attemptUpstream<T>({
    kind: 'connect',
    target: TARGET,
    maxAttempts: 3,
    acquire,
    isAborted: () => false,
    attempt: vi.fn(attempt),
    metrics,
    log,
    ...overrides,
  });
  return { promise, leases, acquire, excludedSeen, metrics, log };
}

async function refusalOf(promise: Promise<unknown>): Promise<Refusal> {
  const error: unknown = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (error instanceof Refusal) return error;
  throw new Error(`expected a Refusal, got ${String(error)}`);
}

const refused = () => Promise.reject(new UpstreamAttemptError('refused', 'connect ECONNREFUSED'));

describe('attemptUpstream', () => {
  it('a first attempt that carries the connection is the answer: one lease, no retry, nothing reported', async () => {
    const r = run((p) => Promise.resolve(`via ${p.id}`));
    const carried = await r.promise;
    expect(carried).toMatchObject({ result: 'via p1', attempts: 1 });
    expect(carried?.lease).toBe(r.leases[0]!.lease);
    expect(r.metrics.retry).not.toHaveBeenCalled();
    expect(r.metrics.leaseWait).toHaveBeenCalledTimes(1);
    expect(r.metrics.upstreamError).not.toHaveBeenCalled();
    // The lease stays held: the relay lets go of it when the connection ends.
    expect(r.leases[0]!.calls).toEqual([]);
  });

  it('an upstream attempt error moves to another proxy: the failed one is reported for the target and excluded', async () => {
    const r = run((p) => (p.id === 'p1' ? refused() : Promise.resolve('ok')));
    const carried = await r.promise;
    expect(carried).toMatchObject({ result: 'ok', attempts: 2 });
    expect(carried?.lease.proxy.id).toBe('p2');
    expect(r.leases[0]!.calls).toEqual([`failed ${TARGET}`]);
    expect(r.excludedSeen).toEqual([[], ['p1']]);
    expect(r.metrics.retry).toHaveBeenCalledTimes(1);
    expect(r.metrics.upstreamError).toHaveBeenCalledWith('p1', TARGET, 'refused');
    expect(r.log.warn).toHaveBeenCalledWith(
      expect.objectContaining({
        kind: 'connect',
        proxy: 'p1',
        target: TARGET,
        reason: 'refused',
        attempt: 1,
      }),
      expect.stringContaining('reported rate_limited for the target'),
    );
  });

  it.each(['refused', 'timeout', 'rejected', 'reset'] as const)('a %s attempt is retried', async (reason) => {
    const r = run((p) =>
      p.id === 'p1' ? Promise.reject(new UpstreamAttemptError(reason, reason)) : Promise.resolve('ok'),
    );
    expect(await r.promise).toMatchObject({ attempts: 2 });
    expect(r.metrics.upstreamError).toHaveBeenCalledWith('p1', TARGET, reason);
  });

  it('tries at most maxAttempts proxies, then answers 502 naming the last failure', async () => {
    const r = run(refused);
    const refusal = await refusalOf(r.promise);
    expect(refusal.status).toBe(502);
    expect(refusal.outcome).toBe('upstream_failed');
    expect(refusal.message).toBe(
      'no upstream proxy could carry the request (last: p3: connect ECONNREFUSED)',
    );
    expect(r.acquire).toHaveBeenCalledTimes(3);
    expect(r.excludedSeen).toEqual([[], ['p1'], ['p1', 'p2']]);
    expect(r.metrics.retry).toHaveBeenCalledTimes(2);
    for (const l of r.leases.slice(0, 3)) expect(l.calls).toEqual([`failed ${TARGET}`]);
    expect(r.leases[3]!.calls).toEqual([]);
  });

  it('maxAttempts 1: no retry at all', async () => {
    const r = run(refused, { maxAttempts: 1 });
    expect((await refusalOf(r.promise)).status).toBe(502);
    expect(r.acquire).toHaveBeenCalledTimes(1);
    expect(r.metrics.retry).not.toHaveBeenCalled();
  });

  it('nothing leasable on the first attempt: 503 no_match, saying why', async () => {
    const r = run(() => Promise.resolve('ok'), { grants: 0 });
    const refusal = await refusalOf(r.promise);
    expect(refusal.status).toBe(503);
    expect(refusal.outcome).toBe('no_match');
    expect(refusal.message).toBe(
      `no healthy proxy with free capacity matched (considered 3: 1 at capacity, 1 cooling down for ${TARGET}, 1 unhealthy)`,
    );
  });

  it('nothing leasable on a later attempt: 502 upstream_failed with the failure before', async () => {
    const r = run(refused, { grants: 1 });
    const refusal = await refusalOf(r.promise);
    expect(refusal.status).toBe(502);
    expect(refusal.outcome).toBe('upstream_failed');
    expect(refusal.message).toContain('(last: p1: connect ECONNREFUSED)');
    expect(r.acquire).toHaveBeenCalledTimes(2);
  });

  it.each([
    ['the catalog has not loaded', new CatalogNotSyncedError()],
    ['the lease store is unreachable', new LeaseStoreUnavailableError('redis down')],
  ])('%s: 503 unavailable', async (_what, error) => {
    const r = run(() => Promise.resolve('ok'), { acquire: () => Promise.reject(error) });
    const refusal = await refusalOf(r.promise);
    expect(refusal.status).toBe(503);
    expect(refusal.outcome).toBe('unavailable');
    expect(refusal.message).toBe(error.message);
  });

  it('any other error while leasing is passed on as it is', async () => {
    const bug = new TypeError('bug');
    const r = run(() => Promise.resolve('ok'), { acquire: () => Promise.reject(bug) });
    await expect(r.promise).rejects.toBe(bug);
  });

  it('an error that is not an upstream attempt error is not retried: the lease is let go of, nothing reported', async () => {
    const late = new Refusal(502, 'the upstream proxy p1 failed: socket hang up', 'upstream_failed');
    const r = run(() => Promise.reject(late));
    await expect(r.promise).rejects.toBe(late);
    expect(r.acquire).toHaveBeenCalledTimes(1);
    expect(r.leases[0]!.calls).toEqual(['done']);
    expect(r.metrics.upstreamError).not.toHaveBeenCalled();
  });

  it('a crawler gone before the attempt: the lease is let go of, no attempt, no answer', async () => {
    const r = run(() => Promise.resolve('ok'), { isAborted: () => true });
    expect(await r.promise).toBeUndefined();
    expect(r.leases[0]!.calls).toEqual(['done']);
  });

  it('a crawler gone during a failed attempt is no fault of the proxy: nothing reported, no retry', async () => {
    let aborted = false;
    const r = run(
      () => {
        aborted = true;
        return refused();
      },
      { isAborted: () => aborted },
    );
    expect(await r.promise).toBeUndefined();
    expect(r.leases[0]!.calls).toEqual(['done']);
    expect(r.metrics.upstreamError).not.toHaveBeenCalled();
    expect(r.acquire).toHaveBeenCalledTimes(1);
  });

  it('a crawler gone while a failure was reported: no further attempt', async () => {
    let aborted = false;
    const r = run(refused, { isAborted: () => aborted });
    r.leases[0]!.lease.failed = vi.fn(() => {
      aborted = true;
      return Promise.resolve();
    });
    // isAborted is asked after the attempt too: the crawler leaves only once the failure is reported.
    expect(await r.promise).toBeUndefined();
    expect(r.metrics.upstreamError).toHaveBeenCalledTimes(1);
    expect(r.acquire).toHaveBeenCalledTimes(1);
  });
});

describe('passive health: what each attempt tells the prober', () => {
  function traffic() {
    const seen: string[] = [];
    return {
      seen,
      ok: (p: ProxyView) => seen.push(`ok ${p.id}`),
      failed: (p: ProxyView, reason: string) => seen.push(`failed ${p.id} ${reason}`),
    };
  }

  it("a carried attempt is ok; a failure of the proxy's own is a failure; one that may be the target's is nothing", async () => {
    const t = traffic();
    await run(
      (p) => {
        if (p.id === 'p1')
          return Promise.reject(dialFailure(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })));
        if (p.id === 'p2')
          return Promise.reject(new UpstreamAttemptError('rejected', 'answered CONNECT with 502'));
        return Promise.resolve('carried');
      },
      { traffic: t },
    ).promise;
    expect(t.seen).toEqual(['failed p1 ConnectFailed', 'ok p3']);
  });

  it('plain HTTP: 407 is a failure (AuthFailed), a 5xx nothing either way, anything else ok', async () => {
    for (const [status, expected] of [
      [407, ['failed p1 AuthFailed']],
      [502, []],
      [404, ['ok p1']],
    ] as const) {
      const t = traffic();
      await run(() => Promise.resolve(status), { traffic: t, passive: passiveOutcomeOfStatus }).promise;
      expect(t.seen).toEqual(expected);
    }
  });
});

describe('which upstream errors may be retried', () => {
  const errno = (code: string, message = code) => Object.assign(new Error(message), { code });

  it('a refused connection is "refused", any other socket error "reset"', () => {
    expect(dialFailure(errno('ECONNREFUSED'))).toMatchObject({
      reason: 'refused',
      message: 'refused the connection',
    });
    expect(dialFailure(errno('ECONNRESET'))).toMatchObject({
      reason: 'reset',
      message: 'reset the connection',
    });
    expect(dialFailure(errno('EHOSTUNREACH'))).toMatchObject({
      reason: 'reset',
      message: 'connection failed (EHOSTUNREACH)',
    });
  });

  it("never passes on Node's message, which names the upstream's internal address", () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.1.2.3:3128'), { code: 'ECONNREFUSED' });
    expect(dialFailure(refused).message).not.toContain('10.1.2.3');
    const reset = Object.assign(new Error('read ECONNRESET 10.1.2.3:3128'), { code: 'ECONNRESET' });
    expect((requestFailure(reset, 'ns/p1', true) as Refusal).message).toBe(
      'the upstream proxy ns/p1 failed: reset the connection',
    );
  });

  it('plain HTTP: retryable until the body started flowing, a 502 after', () => {
    expect(requestFailure(errno('ECONNREFUSED'), 'p1', false)).toBeInstanceOf(UpstreamAttemptError);
    const timeout = new UpstreamAttemptError('timeout', 'no connection within 50 ms');
    expect(requestFailure(timeout, 'p1', false)).toBe(timeout);
    const after = requestFailure(errno('ECONNRESET', 'socket hang up'), 'p1', true);
    expect(after).toBeInstanceOf(Refusal);
    expect(after).toMatchObject({
      status: 502,
      outcome: 'upstream_failed',
      message: 'the upstream proxy p1 failed: reset the connection',
    });
  });
});

describe('reportAnswer', () => {
  const statuses = new Set([429, 503]);

  it('a rate-limit status reports the proxy rate_limited for the target', async () => {
    const { lease, calls } = fakeLease('p1');
    const metrics = { rateLimited: vi.fn() };
    await reportAnswer(429, statuses, lease, TARGET, metrics, { warn: vi.fn() });
    expect(calls).toEqual([`rateLimited ${TARGET}`]);
    expect(metrics.rateLimited).toHaveBeenCalledWith('p1', TARGET);
  });

  it('any other status reports nothing', async () => {
    const { lease, calls } = fakeLease('p1');
    const metrics = { rateLimited: vi.fn() };
    for (const status of [200, 404, 500, 502]) {
      await reportAnswer(status, statuses, lease, TARGET, metrics, { warn: vi.fn() });
    }
    expect(calls).toEqual([]);
    expect(metrics.rateLimited).not.toHaveBeenCalled();
  });

  it('a report that fails is logged, never thrown (the answer is passed on regardless)', async () => {
    const { lease } = fakeLease('p1');
    lease.rateLimited = () => Promise.reject(new Error('store down'));
    const log = { warn: vi.fn() };
    await expect(reportAnswer(503, statuses, lease, TARGET, { rateLimited: vi.fn() }, log)).resolves.toBe(
      undefined,
    );
    expect(log.warn).toHaveBeenCalledWith({ err: 'store down' }, 'gateway: reporting rate_limited failed');
  });
});
