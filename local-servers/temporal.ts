import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import { SEARCH_ATTRIBUTES } from '../resources/search-attributes.js';
import { readyOrStopped, retryWhenPortTaken, spawnServer, type ManagedProcess } from './process.js';
import { preferredOrFreePort } from './ports.js';

export interface TemporalDevServer {
  /** host:port of the frontend (gRPC). */
  address: string;
  namespace: string;
  uiUrl?: string;
  logPath: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

export interface TemporalDevServerOptions {
  cli: string;
  dataDir: string;
  /** Preferred ports; another free one is taken when in use. */
  port?: number;
  uiPort?: number;
  /** No Web UI (tests that do not need it). */
  headless?: boolean;
  /** Keep state in dataDir/temporal.db across restarts. */
  persist?: boolean;
  namespace?: string;
  /** Record the server's pid here (dev: reaped by the next start if we die). */
  pidDir?: string;
}

function tcpReady(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Starts `temporal server start-dev` on the loopback with our search
 * attributes registered, and waits until the namespace answers. The dev
 * server picks its internal services' ports itself (a free port, probed then
 * bound): one taken in between makes it exit with "address already in use"
 * (seen once in a full test run), and it is started again.
 */
export function startTemporalDevServer(opts: TemporalDevServerOptions): Promise<TemporalDevServer> {
  return retryWhenPortTaken(join(opts.dataDir, 'temporal.log'), () => startOnce(opts));
}

async function startOnce(opts: TemporalDevServerOptions): Promise<TemporalDevServer> {
  mkdirSync(opts.dataDir, { recursive: true });
  const host = '127.0.0.1';
  const namespace = opts.namespace ?? 'default';
  const port = await preferredOrFreePort(opts.port, host);
  const uiPort = opts.headless ? undefined : await preferredOrFreePort(opts.uiPort, host);
  // Every port is chosen here, so several servers (tests, dev) coexist.
  const httpPort = await preferredOrFreePort(undefined, host);
  const metricsPort = await preferredOrFreePort(undefined, host);
  const args = [
    'server',
    'start-dev',
    '--ip',
    host,
    '--port',
    String(port),
    '--http-port',
    String(httpPort),
    '--metrics-port',
    String(metricsPort),
    '--namespace',
    namespace,
    '--log-level',
    'warn',
    // One partition per task queue: with the default four, a task written to
    // a partition no poller is on can wait for one (up to a poll's minute)
    // when traffic is low, as it is for one developer or one test
    // (temporalio/temporal#6160); one server process gains nothing from more.
    '--dynamic-config-value',
    'matching.numTaskqueueReadPartitions=1',
    '--dynamic-config-value',
    'matching.numTaskqueueWritePartitions=1',
  ];
  if (opts.persist) args.push('--db-filename', join(opts.dataDir, 'temporal.db'));
  if (uiPort === undefined) args.push('--headless');
  else args.push('--ui-port', String(uiPort), '--ui-ip', host, '--ui-disable-news-fetch');
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES))
    args.push('--search-attribute', `${name}=${type}`);
  const logPath = join(opts.dataDir, 'temporal.log');
  const proc = spawnServer('temporal', opts.cli, args, logPath, { pidDir: opts.pidDir });
  await readyOrStopped(proc, logPath, [
    { what: 'Temporal dev server', probe: () => tcpReady(host, port), timeoutMs: 60_000 },
    ...(uiPort === undefined
      ? []
      : [{ what: 'Temporal Web UI', probe: () => tcpReady(host, uiPort), timeoutMs: 30_000 }]),
  ]);
  return {
    address: `${host}:${port}`,
    namespace,
    uiUrl: uiPort === undefined ? undefined : `http://${host}:${uiPort}`,
    logPath,
    process: proc,
    stop: () => proc.stop(),
  };
}
