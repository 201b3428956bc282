/**
 * The probing api replica's side of passive health on a shared lease
 * store: every `everyMs` (1 s) it takes the traffic reports standalone
 * gateways queued in the store and gives them to the prober. Only a replica
 * that probes takes them (a `--no-prober` replica would only throw them
 * away); with several probing replicas each takes a share, and a proxy
 * whose reports went to another replica is probed here as before.
 */
import type { Logger } from 'pino';
import type { TrafficReport } from '../api/lease-store.js';
import { createPeriodic, type Periodic } from '../api/periodic.js';

/** Reports taken in one call; a pass takes up to ten such batches. */
const TAKE_BATCH = 1_000;

export function followGatewayTraffic(opts: {
  take: (max: number) => Promise<TrafficReport[]>;
  observe: (report: TrafficReport) => void;
  logger: Logger;
  everyMs?: number;
}): Periodic {
  const log = opts.logger.child({ component: 'prober' });
  return createPeriodic(
    async () => {
      for (let i = 0; i < 10; i++) {
        const reports = await opts.take(TAKE_BATCH);
        for (const report of reports) opts.observe(report);
        if (reports.length < TAKE_BATCH) return;
      }
    },
    opts.everyMs ?? 1_000,
    log,
    'could not take gateway traffic reports from the lease store; probing as usual meanwhile',
  );
}
