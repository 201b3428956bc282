/**
 * Tells a draining Proxy's workflow when no lease is left on it.
 *
 * Only the lease store knows the leases, and only the workflow may write the
 * Proxy's status, so the api process watches the draining Proxies in its
 * catalog and, once the store holds no lease on one, sends its workflow one
 * `leasesDrained` report (through `signal`, injected so this room needs no
 * Temporal import). With Redis every replica sees the same store; each may
 * send, and the workflow takes the first report for the address it drains.
 *
 * A proxy must have been seen draining for `graceMs` before its count is
 * trusted: a replica whose catalog had not yet seen the Draining condition
 * may still grant a lease in that window, and that lease is in the store by
 * the time the grace ends. A report is re-sent every `resendMs` while the
 * Proxy still shows Draining (a report lost with a worker restart, or a
 * workflow that was not running yet).
 */
import type { Logger } from 'pino';
import { createPeriodic } from './periodic.js';
import { Counter, type Registry } from 'prom-client';
import { storeKey, type LeaseStore } from './lease-store.js';
import type { ProxyCatalog, ProxyView } from './proxy-catalog.js';

export interface DrainedTarget {
  namespace: string;
  name: string;
  uid: string;
}

export interface DrainNotifierOptions {
  catalog: ProxyCatalog;
  leaseStore: Pick<LeaseStore, 'activeCounts'>;
  /** Sends the workflow of this Proxy its report; may throw (logged, retried at the next resend). */
  signal: (target: DrainedTarget, report: { ip: string }) => Promise<void>;
  logger: Logger;
  /** Where egress_drain_checks_total is registered (not registered when unset). */
  registry?: Registry;
  /** How often draining proxies are checked (default 500 ms; nothing is read when none drains). */
  checkEveryMs?: number;
  /** How long a proxy is seen draining before its lease count is trusted (default 2 s). */
  graceMs?: number;
  /** How often a report is repeated while the Proxy still drains (default 10 s). */
  resendMs?: number;
  now?: () => number;
}

export interface DrainNotifier {
  start(): void;
  stop(): Promise<void>;
  /** Reports sent so far (tests, metrics). */
  sent(): number;
  /** Check passes completed so far: a test waits on these to see that something did not happen. */
  passes(): number;
}

interface Watched {
  /** The address being drained, and when it was first seen draining. */
  host: string;
  firstSeenMs: number;
  lastSentMs?: number;
}

export function createDrainNotifier(opts: DrainNotifierOptions): DrainNotifier {
  const log = opts.logger.child({ component: 'drain-notifier' });
  const checkEveryMs = opts.checkEveryMs ?? 500;
  const graceMs = opts.graceMs ?? 2_000;
  const resendMs = opts.resendMs ?? 10_000;
  const now = opts.now ?? Date.now;
  const watched = new Map<string, Watched>();
  let sent = 0;
  const checks = opts.registry
    ? new Counter({
        name: 'egress_drain_checks_total',
        help: 'Lease counts read for draining proxies past their grace, by outcome (held: leases remain; drained: none, its workflow told)',
        labelNames: ['outcome'] as const,
        registers: [opts.registry],
      })
    : undefined;
  checks?.inc({ outcome: 'held' }, 0);
  checks?.inc({ outcome: 'drained' }, 0);

  const targetOf = (view: ProxyView): DrainedTarget | undefined => {
    const [namespace, name] = view.id.split('/');
    if (!namespace || !name || !view.uid) return undefined;
    return { namespace, name, uid: view.uid };
  };

  async function check(): Promise<void> {
    const draining = opts.catalog.list().filter((v) => v.draining && v.host !== '');
    const seen = new Set<string>();
    const due: ProxyView[] = [];
    const t = now();
    for (const view of draining) {
      const key = storeKey(view);
      seen.add(key);
      let entry = watched.get(key);
      if (!entry || entry.host !== view.host) {
        entry = { host: view.host, firstSeenMs: t };
        watched.set(key, entry);
      }
      if (t - entry.firstSeenMs < graceMs) continue;
      if (entry.lastSentMs !== undefined && t - entry.lastSentMs < resendMs) continue;
      due.push(view);
    }
    for (const key of watched.keys()) if (!seen.has(key)) watched.delete(key);
    if (due.length === 0) return;
    const counts = await opts.leaseStore.activeCounts();
    await Promise.all(
      due.map(async (view) => {
        const key = storeKey(view);
        if ((counts.get(key) ?? 0) > 0) {
          checks?.inc({ outcome: 'held' });
          return;
        }
        checks?.inc({ outcome: 'drained' });
        const target = targetOf(view);
        const entry = watched.get(key);
        if (!target || !entry) return;
        entry.lastSentMs = now();
        try {
          await opts.signal(target, { ip: view.host });
          sent++;
          log.info({ proxy: view.id, ip: view.host }, 'no lease left on a draining proxy; told its workflow');
        } catch (error) {
          log.warn(
            { proxy: view.id, err: error instanceof Error ? error.message : String(error) },
            'could not tell a drained proxy’s workflow; trying again later',
          );
        }
      }),
    );
  }

  const periodic = createPeriodic(check, checkEveryMs, log, 'drain check failed');

  return {
    start: () => periodic.start(),
    stop: () => periodic.stop(),
    sent: () => sent,
    passes: () => periodic.passes(),
  };
}
