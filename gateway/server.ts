/**
 * The gateway: one HTTP proxy endpoint for crawlers. CONNECT (HTTPS) is a
 * tunnel through a leased upstream proxy's own CONNECT (connect.ts); an
 * absolute-form request (plain HTTP) is forwarded to the upstream proxy in
 * absolute form (plain-http.ts); which proxy, how often and what is reported
 * is the upstream policy (upstream-policy.ts). Node's HTTP parser reads what
 * the crawler sends (bad request lines, oversized headers and slow headers
 * end there with 400/431/408, client-errors.ts); the relay above it is
 * hand-written (docs/architecture.md, Decisions: the gateway's relay),
 * because it must choose, retry and report per attempt, which a library's
 * one-shot upstream hook does not allow.
 *
 * Bodies are never buffered: tunnels and bodies are piped, so a slow reader
 * slows its writer (backpressure) and memory per connection stays a few
 * socket buffers.
 *
 * A second front door, the SOCKS5 listener (socks.ts), runs the same
 * tunnel code (tunnel.ts) as CONNECT, on an address of its own.
 *
 * This module wires it once per gateway: the listeners, the shared context,
 * and shutdown.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Server as NetServer, Socket } from 'node:net';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { LeaseStore } from '../api/lease-store.js';
import type { ProxyCatalog, ProxyView } from '../api/proxy-catalog.js';
import type { TraceHook } from '../tracing/http.js';
import type { PoolDemand } from '../api/pool-demand.js';
import { createEgressPolicy } from '../forwarding/egress-policy.js';
import { createTenantDirectory, type TenantDirectory } from '../tenants/directory.js';
import { createGuessLimiter, DEFAULT_MAX_AUTH_FAILURES } from '../tenants/guess-limiter.js';
import { createTenantRates } from '../tenants/rate.js';
import {
  DEFAULT_MAX_CONNECTIONS,
  DEFAULT_MAX_TUNNELS_PER_CLIENT,
  DEFAULT_RESPONSE_TIMEOUT_MS,
  DEFAULT_TUNNEL_IDLE_TIMEOUT_MS,
} from './limits-config.js';
import { createConnectionSlots } from './connection-slots.js';
import { createAccessLog } from './access-log.js';
import { answerClientError } from './client-errors.js';
import { handleConnect } from './connect.js';
import { createDestinationResolver } from './destination.js';
import type { GatewayContext, GatewaySettings } from './context.js';
import { createGatewayLeases } from './leases.js';
import { registerGatewayMetrics } from './metrics.js';
import { handleRequest } from './plain-http.js';
import { createSocksListener } from './socks.js';
import { createUpstreamAgents } from './upstream-request.js';
import { createTrafficHealth, type TrafficHealth, type TrafficSink } from './traffic-health.js';
import type { CredentialsLookup } from '../credentials/proxy-credentials.js';
import type { CostMeter } from '../api/cost-meter.js';

export type { GatewaySettings } from './context.js';

export interface CreateGatewayOptions {
  catalog: ProxyCatalog;
  leaseStore: LeaseStore;
  logger: Logger;
  registry: Registry;
  settings: GatewaySettings;
  traceHook?: TraceHook;
  /** Who may connect; by default built from settings.token and settings.tenantsFile (closed with the gateway). */
  tenants?: TenantDirectory;
  /** The lease API's pool demand, when it runs in this process (`dev`): refusals and session bans reach the pools. */
  demand?: Pick<PoolDemand, 'noteDenied' | 'noteBanned'>;
  /** The upstream proxies' credentials; none: the gateway sends none. */
  credentials?: CredentialsLookup;
  /**
   * Where traffic reports go (passive health): the prober in this process
   * (`dev`). None: through the lease store when it is shared (the probing
   * api replica takes them), else nowhere.
   */
  traffic?: TrafficSink;
  /** How long traffic reports gather before they are sent (default 1 s). */
  trafficFlushMs?: number;
  /** Counts what the relayed bytes cost and each tenant's traffic (api/cost-meter.ts); none: not counted. */
  cost?: Pick<CostMeter, 'traffic'>;
}

export interface Gateway {
  /** Listens; '' or undefined host: every interface; port 0 picks one. */
  listen(host: string | undefined, port: number): Promise<{ host: string; port: number; url: string }>;
  /** The SOCKS5 listener (socks.ts) on its own address; the same leases, limits and logs. */
  listenSocks(host: string | undefined, port: number): Promise<{ host: string; port: number; url: string }>;
  /** Stops accepting, closes open tunnels and requests, lets go of every lease. */
  close(): Promise<void>;
  /** Open tunnels and plain-HTTP requests in flight. */
  activeConnections(): number;
  readonly server: Server;
}

export function createGateway(opts: CreateGatewayOptions): Gateway {
  const { settings } = opts;
  const log = opts.logger.child({ component: 'gateway' });
  const leases = createGatewayLeases({
    catalog: opts.catalog,
    store: opts.leaseStore,
    logger: log,
    defaultTtlSeconds: settings.defaultLeaseTtlSeconds,
  });
  let knownOf: { list: readonly ProxyView[]; ids: ReadonlySet<string> } | undefined;
  const metrics = registerGatewayMetrics(opts.registry, {
    maxTargetLabels: settings.maxTargetLabels,
    sessions: () => leases.sessionCount(),
    knownProxies: () => {
      if (!opts.catalog.synced()) return undefined;
      // The catalog hands out the same array until it changes.
      const list = opts.catalog.list();
      if (knownOf?.list !== list) knownOf = { list, ids: new Set(list.map((v) => v.id)) };
      return knownOf.ids;
    },
  });
  let active = 0;
  const ownTenants = opts.tenants === undefined;
  const tenants =
    opts.tenants ??
    createTenantDirectory({ token: settings.token, tenantsFile: settings.tenantsFile, logger: log });
  const ctx: GatewayContext = {
    settings,
    limits: {
      tunnelIdleTimeoutMs: settings.tunnelIdleTimeoutMs ?? DEFAULT_TUNNEL_IDLE_TIMEOUT_MS,
      tunnelMaxLifetimeMs: settings.tunnelMaxLifetimeMs ?? 0,
      responseTimeoutMs: settings.responseTimeoutMs ?? DEFAULT_RESPONSE_TIMEOUT_MS,
    },
    tenants,
    guesses: createGuessLimiter({ maxFailures: settings.authFailuresPerMinute ?? DEFAULT_MAX_AUTH_FAILURES }),
    rates: createTenantRates(),
    slots: createConnectionSlots(settings.maxTunnelsPerClient ?? DEFAULT_MAX_TUNNELS_PER_CLIENT, metrics),
    demand: opts.demand ?? poolEventsThrough(opts.leaseStore, log),
    rateLimitStatuses: new Set(settings.rateLimitStatuses),
    leases,
    metrics,
    log,
    accessLog: createAccessLog(log),
    traceHook: opts.traceHook,
    egress: createEgressPolicy({
      denyCidrs: settings.egressDenyCidrs,
      allowCidrs: settings.egressAllowCidrs,
      allowPorts: settings.egressAllowPorts,
    }),
    resolver: createDestinationResolver(settings.egressResolver),
    agents: createUpstreamAgents(),
    credentials: opts.credentials,
    cost: opts.cost,
    traffic: trafficHealthFor(opts, log),
    carrying: {
      opened() {
        metrics.tunnelOpened();
        active++;
      },
      closed() {
        active--;
        metrics.tunnelClosed();
      },
    },
  };
  const server = listenerFor(ctx);
  const socks = createSocksListener(ctx);
  const open = new Set<Socket>();
  for (const listener of [server, socks]) {
    // Each listener holds up to the maximum (Node counts per server).
    listener.maxConnections = settings.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    listener.on('drop', () => metrics.limitTripped('max_connections'));
    listener.on('connection', (socket: Socket) => {
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      socket.setNoDelay(true);
    });
  }

  return {
    server,
    activeConnections: () => active,
    listen: (host, port) => listenOn(server, 'http', host, port),
    listenSocks: (host, port) => listenOn(socks, 'socks5', host, port),
    async close() {
      const closing = Promise.all(
        [server, socks].map(
          (listener) =>
            new Promise<void>((resolve) => {
              if (!listener.listening) resolve();
              else listener.close(() => resolve());
            }),
        ),
      );
      for (const socket of open) socket.destroy();
      server.closeAllConnections();
      await closing;
      await ctx.traffic.close();
      ctx.agents.destroy();
      if (ownTenants) tenants.close();
      await leases.close();
    },
  };
}

/** Listens on host:port; the URL names the scheme (`http` or `socks5`) and brackets an IPv6 address. */
function listenOn(
  listener: NetServer,
  scheme: 'http' | 'socks5',
  host: string | undefined,
  port: number,
): Promise<{ host: string; port: number; url: string }> {
  return new Promise((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(port, host || undefined, () => {
      listener.off('error', reject);
      const address = listener.address() as AddressInfo;
      const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve({ host: address.address, port: address.port, url: `${scheme}://${urlHost}:${address.port}` });
    });
  });
}

/** The HTTP server, its timeouts, and which handler each kind of request goes to. */
function listenerFor(ctx: GatewayContext): Server {
  const { log } = ctx;
  const server = createServer({
    // Slow-loris: a client has this long to send its request head.
    headersTimeout: 10_000,
    // Bodies and tunnels may be long; only the head is bounded.
    requestTimeout: 0,
    keepAliveTimeout: 5_000,
    // How often Node checks the two timeouts above (default 30 s).
    connectionsCheckingInterval: 1_000,
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) =>
    answerClientError(log, err, socket),
  );
  server.on('connect', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => undefined);
    handleConnect(ctx, req, socket, head).catch((error: unknown) => {
      log.error({ err: error instanceof Error ? error.message : String(error) }, 'gateway: CONNECT failed');
      socket.destroy();
    });
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    handleRequest(ctx, req, res).catch((error: unknown) => {
      log.error({ err: error instanceof Error ? error.message : String(error) }, 'gateway: request failed');
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  return server;
}

/**
 * A standalone gateway on a shared store tells the pools through it (the
 * api replicas take the events and send the reports); on a store of its
 * own, nobody would take them.
 */
function poolEventsThrough(
  store: LeaseStore,
  log: Logger,
): Pick<PoolDemand, 'noteDenied' | 'noteBanned'> | undefined {
  const post = store.postPoolEvent?.bind(store);
  if (!post) return undefined;
  const send = (event: Parameters<typeof post>[0]) => {
    post(event).catch((error: unknown) =>
      log.warn(
        { err: (error as Error).message, kind: event.kind },
        'could not pass a pool event to the lease store',
      ),
    );
  };
  return {
    noteBanned: (proxy, target) => send({ kind: 'banned', proxy, target }),
    noteDenied: (selector, pool) =>
      send({ kind: 'denied', selector: [...selector], ...(pool !== undefined ? { pool } : {}) }),
  };
}

/** Where traffic reports go: the given sink, a shared store, or nowhere. */
function trafficHealthFor(opts: CreateGatewayOptions, log: Logger): TrafficHealth {
  const post = opts.leaseStore.postTraffic?.bind(opts.leaseStore);
  const sink: TrafficSink = opts.traffic ?? post ?? (() => undefined);
  return createTrafficHealth({
    sink,
    log,
    ...(opts.trafficFlushMs !== undefined ? { flushMs: opts.trafficFlushMs } : {}),
  });
}
