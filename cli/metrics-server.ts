import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/** A readiness verdict: not ready carries the reason /readyz answers with. */
export type Readiness = { ready: true } | { ready: false; reason: string };

/**
 * /metrics, /healthz and /readyz for processes without the lease API (the
 * worker and the bridge). /healthz answers 200 while the event loop runs;
 * /readyz asks `readiness` (connected to Temporal; the bridge: informers
 * synced) and answers 503 with the reason when not ready. The server is up
 * before the process is ready, so a kubelet sees "not ready" rather than
 * "connection refused" while it starts.
 */
export async function serveMetrics(
  registry: Registry,
  host: string,
  port: number,
  readiness: () => Promise<Readiness> = () => Promise.resolve({ ready: true }),
  /** More exposition text appended to the registry's (the Temporal SDK's metrics on the worker). */
  extra?: () => Promise<string>,
): Promise<{ url: string; baseUrl: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
      return;
    }
    if (path === '/readyz') {
      readiness().then(
        (r) =>
          r.ready
            ? res.writeHead(200, { 'content-type': 'text/plain' }).end('ready\n')
            : res.writeHead(503, { 'content-type': 'text/plain' }).end(`not ready: ${r.reason}\n`),
        (error: unknown) =>
          res
            .writeHead(503, { 'content-type': 'text/plain' })
            .end(`not ready: ${error instanceof Error ? error.message.split('\n')[0] : 'error'}\n`),
      );
      return;
    }
    if (path !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    Promise.all([registry.metrics(), extra ? extra().catch(() => '') : '']).then(
      ([text, more]) =>
        res
          .writeHead(200, { 'content-type': registry.contentType })
          .end(more ? `${text.endsWith('\n') ? text : `${text}\n`}${more}` : text),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host || undefined, resolve);
  });
  const address = server.address() as AddressInfo;
  const baseUrl = `http://${host || '0.0.0.0'}:${address.port}`;
  return {
    url: `${baseUrl}/metrics`,
    baseUrl,
    close: () =>
      new Promise((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}

/**
 * Reads another exporter's text (the Temporal SDK's, on a loopback port only
 * this process knows) for appending to /metrics. Gives up after `timeoutMs`
 * so a stuck exporter cannot hold a scrape; the scrape then has our own
 * metrics only.
 */
export function scrapeText(url: string, timeoutMs = 2_000): () => Promise<string> {
  return async () => {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    if (!response.ok) return '';
    return response.text();
  };
}
