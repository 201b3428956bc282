/**
 * Serves a Hono app on Node's HTTP server, with Go-like timeouts and a
 * bounded graceful shutdown.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import type { Hono } from 'hono';

export interface ServeOptions {
  /** '' or undefined: every interface. Tests and `dev` pass 127.0.0.1. */
  host?: string;
  /** 0 picks a free port. */
  port: number;
  /** How long `close` waits for in-flight requests before cutting connections (default 10 s). */
  shutdownGraceMs?: number;
}

export interface RunningServer {
  server: Server;
  host: string;
  port: number;
  /** `http://host:port`, for clients and tests. */
  url: string;
  close(): Promise<void>;
}

export async function serveApi(app: Hono, options: ServeOptions): Promise<RunningServer> {
  const server = createAdaptorServer({
    fetch: app.fetch,
    serverOptions: {
      headersTimeout: 5_000,
      requestTimeout: 10_000,
      keepAliveTimeout: 60_000,
    },
  }) as Server;
  const host = options.host || undefined;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const grace = options.shutdownGraceMs ?? 10_000;
  let closing: Promise<void> | undefined;
  return {
    server,
    host: address.address,
    port: address.port,
    url: `http://${urlHost}:${address.port}`,
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        const force = setTimeout(() => server.closeAllConnections(), grace);
        force.unref();
        server.close((err) => {
          clearTimeout(force);
          if (err) reject(err);
          else resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
