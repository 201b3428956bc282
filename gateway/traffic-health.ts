/**
 * What the gateway tells the prober of its traffic (passive health): per
 * proxy instance, the exchanges it carried and the failures that were the
 * proxy's own since the last success, gathered for `flushMs` (1 s) and sent
 * as one report per proxy that had traffic. A proxy carrying traffic costs
 * one report a second however busy it is; one without traffic, nothing.
 *
 * Where the reports go is the caller's: the prober in this process (`dev`),
 * a shared lease store (a standalone gateway on Redis, taken by the probing
 * api replica), or nowhere (a standalone gateway on a memory store).
 * Sending is best effort: a report lost only means the prober probes.
 */
import type { Logger } from 'pino';
import type { TrafficReport } from '../api/lease-store.js';
import type { ProxyView } from '../api/proxy-catalog.js';

/** A failure that is the proxy's own, as a probe would have named it. */
export type ProxyFault = 'ConnectFailed' | 'ConnectTimeout' | 'ProtocolError' | 'AuthFailed';

export interface TrafficHealth {
  /** The proxy carried an exchange (CONNECT answered 200, or an answer that is not a proxy error). */
  ok(proxy: ProxyView): void;
  /** The proxy failed an exchange by its own fault. */
  failed(proxy: ProxyView, reason: ProxyFault, message: string): void;
  /** Sends what is gathered and stops the timer. */
  close(): Promise<void>;
}

export type TrafficSink = (reports: TrafficReport[]) => Promise<void> | void;

/** The default gathering window. */
export const TRAFFIC_FLUSH_MS = 1_000;

/** At most this many proxies' reports are gathered between flushes (the rest wait for the next window). */
const MAX_PENDING = 10_000;

export function createTrafficHealth(opts: {
  sink: TrafficSink;
  log: Logger;
  flushMs?: number;
}): TrafficHealth {
  const flushMs = opts.flushMs ?? TRAFFIC_FLUSH_MS;
  let pending = new Map<string, TrafficReport>();
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  let sending: Promise<void> = Promise.resolve();

  const entry = (proxy: ProxyView): TrafficReport | undefined => {
    if (closed || !proxy.uid || !proxy.host) return undefined;
    const key = `${proxy.uid}@${proxy.host}:${proxy.port}`;
    let report = pending.get(key);
    if (!report) {
      if (pending.size >= MAX_PENDING) return undefined;
      report = { proxy: proxy.id, uid: proxy.uid, host: proxy.host, port: proxy.port, ok: 0, failures: 0 };
      pending.set(key, report);
    }
    timer ??= setTimeout(flush, flushMs).unref();
    return report;
  };

  function flush(): void {
    timer = undefined;
    if (pending.size === 0) return;
    const reports = [...pending.values()];
    pending = new Map();
    sending = sending.then(async () => {
      try {
        await opts.sink(reports);
      } catch (error) {
        opts.log.warn(
          { err: error instanceof Error ? error.message : String(error), proxies: reports.length },
          'gateway: could not pass traffic reports on; the prober probes those proxies meanwhile',
        );
      }
    });
  }

  return {
    ok(proxy) {
      const report = entry(proxy);
      if (!report) return;
      report.ok++;
      // A success ends the run of failures before it.
      report.failures = 0;
      delete report.reason;
      delete report.message;
    },
    failed(proxy, reason, message) {
      const report = entry(proxy);
      if (!report) return;
      report.failures++;
      report.reason = reason;
      report.message = message;
    },
    async close() {
      if (timer) clearTimeout(timer);
      flush();
      closed = true;
      await sending;
    },
  };
}
