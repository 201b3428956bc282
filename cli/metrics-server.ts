import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/** A bare /metrics endpoint for processes without the lease API (a standalone worker). */
export async function serveMetrics(
  registry: Registry,
  host: string,
  port: number,
): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host || undefined, resolve);
  });
  const address = server.address() as AddressInfo;
  return {
    url: `http://${host || '0.0.0.0'}:${address.port}/metrics`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}
