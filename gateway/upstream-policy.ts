/**
 * The upstream policy: which proxy a connection tries, when it tries
 * another, what is reported, and what the crawler is told in the end. The
 * relay (connect.ts, plain-http.ts) supplies the attempt; this module only
 * decides, so it runs without sockets.
 *
 * - An attempt that fails before anything of the crawler's was carried
 *   (refused, timed out, CONNECT answered with another status than 200,
 *   reset) is an UpstreamAttemptError: the proxy is reported rate_limited
 *   for the target, let go of and excluded, and another is leased, up to
 *   `maxAttempts` proxies. Any other error ends the connection as it is.
 * - Nothing leasable on the first attempt: 503 (no_match), with why. On a
 *   later one, or after the last attempt: 502 (upstream_failed), naming the
 *   last failure. A catalog not loaded yet or an unreachable lease store: 503
 *   (unavailable).
 * - A crawler that went away is no fault of the proxy: nothing is reported,
 *   the lease is let go of, and there is no answer to give (undefined).
 * - A plain-HTTP answer with a rate-limit status is passed on as it is (no
 *   retry: the request was carried) and reported rate_limited for the target.
 */
import type { Logger } from 'pino';
import { LeaseStoreUnavailableError } from '../api/lease-store.js';
import type { ProxyView } from '../api/proxy-catalog.js';
import { CatalogNotSyncedError, type ConnectionLease, type LeaseOutcome } from './leases.js';
import type { ConnectionKind, GatewayMetrics, UpstreamErrorReason } from './metrics.js';
import { Refusal } from './refusal.js';
import type { ProxyFault, TrafficHealth } from './traffic-health.js';

/** An upstream attempt failed in a way another proxy may not share. */
export class UpstreamAttemptError extends Error {
  override name = 'UpstreamAttemptError';
  constructor(
    readonly reason: UpstreamErrorReason,
    message: string,
    /**
     * Set when the failure is the proxy's own whatever the target (it
     * refused the TCP connection, did not complete it, closed before
     * answering, refused its credentials): counted as a failed probe
     * (passive health). A CONNECT answered 502 or a slow answer may be the
     * target's doing: not counted.
     */
    readonly fault?: ProxyFault,
  ) {
    super(message);
  }
}

/** A socket error while reaching the upstream proxy (before it carried anything): another may be tried. */
export function dialFailure(error: NodeJS.ErrnoException): UpstreamAttemptError {
  return new UpstreamAttemptError(
    error.code === 'ECONNREFUSED' ? 'refused' : 'reset',
    socketFailure(error),
    'ConnectFailed',
  );
}

/** What one carried exchange says of its proxy's health: `ok`, a fault of its own, or nothing either way. */
export type PassiveOutcome = 'ok' | 'ambiguous' | { fault: ProxyFault; message: string };

/**
 * A plain-HTTP answer's status, judged as passive health: 407 is the proxy
 * refusing its credentials; a 5xx may be the proxy's own error page or the
 * target's answer (nothing either way, so the prober keeps probing); any
 * other status means the proxy carried the exchange.
 */
export function passiveOutcomeOfStatus(status: number): PassiveOutcome {
  if (status === 407) return { fault: 'AuthFailed', message: 'answered 407 (refused its credentials)' };
  if (status >= 500) return 'ambiguous';
  return 'ok';
}

/**
 * What a crawler may read of a socket error: what happened, by its code.
 * Node's own message names the upstream's internal address
 * (`connect ECONNREFUSED 10.1.2.3:3128`), which is the operator's business.
 */
function socketFailure(error: NodeJS.ErrnoException): string {
  if (error.code === 'ECONNREFUSED') return 'refused the connection';
  if (error.code === 'ECONNRESET') return 'reset the connection';
  if (error.code !== undefined) return `connection failed (${error.code})`;
  return error.message;
}

/**
 * A plain-HTTP upstream request's error: retryable until the crawler's body
 * started flowing (`connected`); after that the crawler gets a 502.
 */
export function requestFailure(
  error: NodeJS.ErrnoException,
  proxyId: string,
  connected: boolean,
): UpstreamAttemptError | Refusal {
  if (error instanceof UpstreamAttemptError) return error;
  if (!connected) return dialFailure(error);
  return new Refusal(502, `the upstream proxy ${proxyId} failed: ${socketFailure(error)}`, 'upstream_failed');
}

export interface UpstreamAttempts<T> {
  kind: ConnectionKind;
  /** The lease target: the CONNECT host or the request's host. */
  target: string;
  /** At most this many proxies are tried. */
  maxAttempts: number;
  /** Leases a proxy, avoiding the proxies (ids) that already failed this connection. */
  acquire(excluded: ReadonlySet<string>): Promise<LeaseOutcome>;
  /** The crawler went away. */
  isAborted(): boolean;
  /** One try through `proxy`; throws UpstreamAttemptError when another proxy may do better. */
  attempt(proxy: ProxyView): Promise<T>;
  metrics: Pick<GatewayMetrics, 'retry' | 'leaseWait' | 'upstreamError'>;
  log: Pick<Logger, 'warn'>;
  /** Told each attempt's outcome for the prober (passive health); none: nobody is. */
  traffic?: Pick<TrafficHealth, 'ok' | 'failed'>;
  /** What a carried attempt's result says of the proxy (default: `ok`). */
  passive?: (result: T) => PassiveOutcome;
}

export interface Carried<T> {
  lease: ConnectionLease;
  result: T;
  /** Which attempt carried it (1 = the first). */
  attempts: number;
}

/**
 * Runs the attempts; resolves with the lease that carried the connection,
 * or undefined when the crawler went away. Throws Refusal when none did.
 */
export async function attemptUpstream<T>(a: UpstreamAttempts<T>): Promise<Carried<T> | undefined> {
  const excluded = new Set<string>();
  let lastError = '';
  for (let n = 1; n <= a.maxAttempts; n++) {
    if (n > 1) a.metrics.retry();
    const outcome = await leaseFor(a, excluded);
    if (!outcome.granted) {
      if (n > 1) break;
      const s = outcome.stats;
      throw new Refusal(
        503,
        `no healthy proxy with free capacity matched (considered ${s.considered + s.unhealthy}: ${s.atCapacity} at capacity, ${s.inCooldown} cooling down for ${a.target}, ${s.unhealthy} unhealthy)`,
        'no_match',
      );
    }
    const lease = outcome.granted;
    if (a.isAborted()) {
      await lease.done();
      return undefined;
    }
    try {
      const result = await a.attempt(lease.proxy);
      notePassive(a, lease.proxy, a.passive ? a.passive(result) : 'ok');
      return { lease, result, attempts: n };
    } catch (error) {
      if (a.isAborted()) {
        await lease.done();
        return undefined;
      }
      if (!(error instanceof UpstreamAttemptError)) {
        await lease.done();
        throw error;
      }
      reportFailed(a, lease, error, n);
      if (error.fault) notePassive(a, lease.proxy, { fault: error.fault, message: error.message });
      lastError = `${lease.proxy.id}: ${error.message}`;
      excluded.add(lease.proxy.id);
      await lease.failed(a.target);
      if (a.isAborted()) return undefined;
    }
  }
  throw new Refusal(502, `no upstream proxy could carry the request (last: ${lastError})`, 'upstream_failed');
}

function notePassive<T>(a: UpstreamAttempts<T>, proxy: ProxyView, outcome: PassiveOutcome): void {
  if (!a.traffic || outcome === 'ambiguous') return;
  if (outcome === 'ok') a.traffic.ok(proxy);
  else a.traffic.failed(proxy, outcome.fault, outcome.message);
}

async function leaseFor<T>(a: UpstreamAttempts<T>, excluded: ReadonlySet<string>): Promise<LeaseOutcome> {
  const started = performance.now();
  let outcome;
  try {
    outcome = await a.acquire(excluded);
  } catch (error) {
    if (error instanceof CatalogNotSyncedError || error instanceof LeaseStoreUnavailableError)
      throw new Refusal(503, error.message, 'unavailable');
    throw error;
  }
  a.metrics.leaseWait((performance.now() - started) / 1000);
  return outcome;
}

function reportFailed<T>(
  a: UpstreamAttempts<T>,
  lease: ConnectionLease,
  error: UpstreamAttemptError,
  attempt: number,
): void {
  a.metrics.upstreamError(lease.proxy.id, a.target, error.reason);
  a.log.warn(
    { kind: a.kind, proxy: lease.proxy.id, target: a.target, reason: error.reason, attempt },
    'gateway: upstream proxy failed; reported rate_limited for the target and trying another',
  );
}

/**
 * After a plain-HTTP answer: a rate-limit status cools the proxy down for
 * the target. Resolves (never rejects) once reported; the lease must be let
 * go of only after that (a released lease is forgotten by the store).
 */
export function reportAnswer(
  status: number,
  rateLimitStatuses: ReadonlySet<number>,
  lease: ConnectionLease,
  target: string,
  metrics: Pick<GatewayMetrics, 'rateLimited'>,
  log: Pick<Logger, 'warn'>,
): Promise<void> {
  if (!rateLimitStatuses.has(status)) return Promise.resolve();
  metrics.rateLimited(lease.proxy.id, target);
  return lease
    .rateLimited(target)
    .catch((err: unknown) =>
      log.warn(
        { err: err instanceof Error ? err.message : String(err) },
        'gateway: reporting rate_limited failed',
      ),
    );
}
