/**
 * The gateway: one HTTP proxy endpoint for crawlers. CONNECT (HTTPS) is a
 * tunnel through a leased upstream proxy's own CONNECT; an absolute-form
 * request (plain HTTP) is forwarded to the upstream proxy in absolute form.
 * Node's HTTP parser reads what the crawler sends (bad request lines,
 * oversized headers and slow headers end there with 400/431/408); the relay
 * above it is hand-written (docs/architecture.md, Decisions: the gateway's
 * relay), because it must choose, retry and report per attempt, which a
 * library's one-shot upstream hook does not allow.
 *
 * Bodies are never buffered: tunnels and bodies are piped, so a slow reader
 * slows its writer (backpressure) and memory per connection stays a few
 * socket buffers.
 */
import { timingSafeEqual } from 'node:crypto';
import {
  Agent,
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type Server,
  type ServerResponse,
} from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { LeaseStoreUnavailableError, type LeaseStore } from '../api/lease-store.js';
import type { ProxyCatalog, ProxyView } from '../api/proxy-catalog.js';
import { parseTraceparent, type TraceHook, type TraceSpan } from '../tracing/http.js';
import {
  decodeProxyAuthorization,
  GatewayCredentialsError,
  parseUsername,
  type ConnectionOptions,
} from './credentials.js';
import type { GatewayOptions } from './config.js';
import { CatalogNotSyncedError, createGatewayLeases, type ConnectionLease } from './leases.js';
import {
  registerGatewayMetrics,
  type ConnectionKind,
  type GatewayOutcome,
  type UpstreamErrorReason,
} from './metrics.js';
import { connectionListed, endToEndHeaders } from '../forwarding/headers.js';

export type GatewaySettings = Pick<
  GatewayOptions,
  | 'token'
  | 'maxLeaseTtlSeconds'
  | 'defaultLeaseTtlSeconds'
  | 'connectTimeoutMs'
  | 'attempts'
  | 'rateLimitStatuses'
  | 'maxTargetLabels'
>;

export interface CreateGatewayOptions {
  catalog: ProxyCatalog;
  leaseStore: LeaseStore;
  logger: Logger;
  registry: Registry;
  settings: GatewaySettings;
  traceHook?: TraceHook;
}

export interface Gateway {
  /** Listens; '' or undefined host: every interface; port 0 picks one. */
  listen(host: string | undefined, port: number): Promise<{ host: string; port: number; url: string }>;
  /** Stops accepting, closes open tunnels and requests, lets go of every lease. */
  close(): Promise<void>;
  /** Open tunnels and plain-HTTP requests in flight. */
  activeConnections(): number;
  readonly server: Server;
}

/** A connection ends with an answer to the crawler: its status and a message (never a credential). */
class Refusal extends Error {
  override name = 'Refusal';
  constructor(
    readonly status: number,
    message: string,
    readonly outcome: GatewayOutcome,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** An upstream attempt failed in a way another proxy may not share. */
class UpstreamAttemptError extends Error {
  override name = 'UpstreamAttemptError';
  constructor(
    readonly reason: UpstreamErrorReason,
    message: string,
  ) {
    super(message);
  }
}

/** `host:port` of a CONNECT request (authority form); IPv6 in brackets. */
const AUTHORITY = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;
/** Longest upstream answer to CONNECT we read before giving up on it. */
const MAX_UPSTREAM_HEAD = 16 * 1024;
/** Plain HTTP: how long an upstream connection may stay silent once the request is sent. */
const UPSTREAM_IDLE_MS = 120_000;
const PROXY_AUTHENTICATE = { 'Proxy-Authenticate': 'Basic realm="egress-proxies"' };

export function createGateway(opts: CreateGatewayOptions): Gateway {
  const { catalog, leaseStore, logger, settings } = opts;
  const log = logger.child({ component: 'gateway' });
  const leases = createGatewayLeases({
    catalog,
    store: leaseStore,
    logger: log,
    defaultTtlSeconds: settings.defaultLeaseTtlSeconds,
  });
  const metrics = registerGatewayMetrics(opts.registry, {
    maxTargetLabels: settings.maxTargetLabels,
    sessions: () => leases.sessionCount(),
  });
  const rateLimitStatuses = new Set(settings.rateLimitStatuses);
  const token = Buffer.from(settings.token);
  /** Keep-alive connections to each upstream proxy for plain HTTP, by proxy UID (or id). */
  const agents = new Map<string, Agent>();
  const open = new Set<Socket>();
  let active = 0;

  const server = createServer({
    // Slow-loris: a client has this long to send its request head.
    headersTimeout: 10_000,
    // Bodies and tunnels may be long; only the head is bounded.
    requestTimeout: 0,
    keepAliveTimeout: 5_000,
    // How often Node checks the two timeouts above (default 30 s).
    connectionsCheckingInterval: 1_000,
  });

  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
    socket.setNoDelay(true);
  });
  // Malformed request lines, oversized heads, timeouts, resets: answer if we still can, never throw.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    const status =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? 431
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
          ? 408
          : 400;
    if (err.code !== 'ECONNRESET' && socket.writable && !socket.writableEnded) {
      const text =
        status === 431 ? 'request head too large' : status === 408 ? 'request timeout' : 'bad request';
      socket.end(
        `HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(text) + 1}\r\n\r\n${text}\n`,
      );
      // Read and drop what the client still sends, so closing sends FIN after the answer rather than
      // a reset that can overtake it; a client that keeps sending is cut off after a second.
      socket.on('error', () => undefined);
      socket.resume();
      const cutOff = setTimeout(() => socket.destroy(), 1_000);
      cutOff.unref();
      socket.once('close', () => clearTimeout(cutOff));
    } else {
      socket.destroy();
    }
    log.debug({ code: err.code, status }, 'gateway: malformed or abandoned request');
  });

  server.on('connect', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => undefined);
    handleConnect(req, socket, head).catch((error: unknown) => {
      log.error({ err: error instanceof Error ? error.message : String(error) }, 'gateway: CONNECT failed');
      socket.destroy();
    });
  });

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    handleRequest(req, res).catch((error: unknown) => {
      log.error({ err: error instanceof Error ? error.message : String(error) }, 'gateway: request failed');
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });

  /** Checks the token and parses the username; throws Refusal. */
  function credentialsOf(req: IncomingMessage): ConnectionOptions {
    try {
      const credentials = decodeProxyAuthorization(req.headers['proxy-authorization']);
      if (token.length > 0) {
        if (!credentials)
          throw new GatewayCredentialsError('proxy credentials required (password: the API token)', 407);
        const given = Buffer.from(credentials.password);
        if (given.length !== token.length || !timingSafeEqual(given, token))
          throw new GatewayCredentialsError('the proxy password is not the API token', 407);
      }
      return parseUsername(credentials?.username ?? '', settings.maxLeaseTtlSeconds);
    } catch (error) {
      if (error instanceof GatewayCredentialsError) {
        throw new Refusal(
          error.status,
          error.message,
          error.status === 407 ? 'unauthorized' : 'bad_request',
          error.status === 407 ? PROXY_AUTHENTICATE : {},
        );
      }
      throw error;
    }
  }

  function traceOf(req: IncomingMessage, path: string): TraceSpan | undefined {
    if (!opts.traceHook) return undefined;
    const traceparent = req.headers.traceparent;
    const header = Array.isArray(traceparent) ? traceparent[0] : traceparent;
    return opts.traceHook({
      method: req.method ?? '',
      path,
      traceparent: header,
      trace: parseTraceparent(header),
    });
  }

  /**
   * Leases a proxy and runs `attempt` on it; on an upstream failure the
   * proxy is reported for the target, let go of and another is tried, up
   * to `settings.attempts` proxies. Throws Refusal when none is left.
   */
  async function withUpstream<T>(
    kind: ConnectionKind,
    target: string,
    options: ConnectionOptions,
    isAborted: () => boolean,
    onLost: () => void,
    attempt: (proxy: ProxyView) => Promise<T>,
  ): Promise<{ lease: ConnectionLease; result: T; attempts: number } | undefined> {
    const excluded = new Set<string>();
    let lastError = '';
    for (let n = 1; n <= settings.attempts; n++) {
      if (n > 1) metrics.retry();
      const started = performance.now();
      let outcome;
      try {
        outcome = await leases.acquire({ target, options, excluded }, onLost);
      } catch (error) {
        if (error instanceof CatalogNotSyncedError || error instanceof LeaseStoreUnavailableError)
          throw new Refusal(503, error.message, 'unavailable');
        throw error;
      }
      metrics.leaseWait((performance.now() - started) / 1000);
      if (!outcome.granted) {
        if (n > 1) break;
        const s = outcome.stats;
        throw new Refusal(
          503,
          `no healthy proxy with free capacity matched (considered ${s.considered + s.unhealthy}: ${s.atCapacity} at capacity, ${s.inCooldown} cooling down for ${target}, ${s.unhealthy} unhealthy)`,
          'no_match',
        );
      }
      const lease = outcome.granted;
      if (isAborted()) {
        await lease.done();
        return undefined;
      }
      try {
        const result = await attempt(lease.proxy);
        return { lease, result, attempts: n };
      } catch (error) {
        // A crawler that went away is no fault of the proxy: nothing is reported.
        if (isAborted()) {
          await lease.done();
          return undefined;
        }
        if (!(error instanceof UpstreamAttemptError)) {
          await lease.done();
          throw error;
        }
        metrics.upstreamError(lease.proxy.id, target, error.reason);
        lastError = `${lease.proxy.id}: ${error.message}`;
        log.warn(
          { kind, proxy: lease.proxy.id, target, reason: error.reason, attempt: n },
          'gateway: upstream proxy failed; reported rate_limited for the target and trying another',
        );
        excluded.add(lease.proxy.id);
        await lease.failed(target);
        if (isAborted()) return undefined;
      }
    }
    throw new Refusal(
      502,
      `no upstream proxy could carry the request (last: ${lastError})`,
      'upstream_failed',
    );
  }

  function refuse(socket: Socket, refusal: Refusal): void {
    const body = `${refusal.message}\n`;
    const headers = Object.entries(refusal.headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    if (socket.writable)
      socket.end(
        `HTTP/1.1 ${refusal.status} ${statusText(refusal.status)}\r\n${headers}Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
  }

  async function handleConnect(req: IncomingMessage, client: Socket, head: Buffer): Promise<void> {
    const started = performance.now();
    const authority = req.url ?? '';
    let closed = false;
    let upstream: Socket | undefined;
    client.once('close', () => {
      closed = true;
      upstream?.destroy();
    });
    const m = AUTHORITY.exec(authority);
    const port = m ? Number(m[2]) : 0;
    let options: ConnectionOptions | undefined;
    try {
      if (!m || port < 1 || port > 65535)
        throw new Refusal(400, 'CONNECT needs host:port (authority form)', 'bad_request');
      options = credentialsOf(req);
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      metrics.outcome('connect', error.outcome);
      refuse(client, error);
      accessLog('connect', authority, undefined, error.status, started, 0, 0, 0, undefined);
      return;
    }
    const target = hostOf(m[1]!);
    const span = traceOf(req, authority);
    let picked;
    try {
      picked = await withUpstream(
        'connect',
        target,
        options,
        () => closed,
        () => {
          client.destroy();
          upstream?.destroy();
        },
        async (proxy) => {
          const { rest } = await openTunnel(proxy, authority, settings.connectTimeoutMs, (socket) => {
            // Known from the first moment, so a crawler that leaves mid-setup ends the attempt at once.
            upstream = socket;
            if (closed) socket.destroy();
          });
          return rest;
        },
      );
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      metrics.outcome('connect', error.outcome);
      span?.end(error.status);
      refuse(client, error);
      accessLog('connect', authority, undefined, error.status, started, 0, 0, 0, options.session);
      return;
    }
    if (!picked || closed || !upstream) {
      upstream?.destroy();
      if (picked) await picked.lease.done();
      metrics.outcome('connect', 'client_closed');
      span?.end(499);
      return;
    }
    const { lease, result: rest, attempts } = picked;
    const up = upstream;
    let sent = 0;
    let received = 0;
    // Whatever happens from here, the lease is let go of when the tunnel ends (a leaked one would renew forever).
    try {
      metrics.outcome('connect', 'ok');
      metrics.connection('connect', lease.proxy.id, target);
      metrics.tunnelOpened();
      active++;
      span?.end(200);
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const clientReadBefore = client.bytesRead;
      const clientWrittenBefore = client.bytesWritten;
      if (head.length > 0) up.write(head);
      if (rest.length > 0) client.write(rest);
      up.on('error', () => client.destroy());
      up.once('close', () => client.destroy());
      client.pipe(up);
      up.pipe(client);
      await new Promise<void>((resolve) => {
        if (client.destroyed) resolve();
        else client.once('close', () => resolve());
      });
      sent = client.bytesRead - clientReadBefore + head.length;
      received = client.bytesWritten - clientWrittenBefore;
    } finally {
      up.destroy();
      client.destroy();
      active--;
      metrics.tunnelClosed();
      await lease.done();
    }
    metrics.bytes(lease.proxy.id, target, sent, received);
    accessLog('connect', authority, lease.proxy.id, 200, started, attempts, sent, received, lease.session);
  }

  async function handleRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const rawUrl = req.url ?? '';
    let url: URL | undefined;
    let options: ConnectionOptions;
    let aborted = false;
    let upstreamRequest: ReturnType<typeof httpRequest> | undefined;
    res.once('close', () => {
      aborted = !res.writableFinished;
      // The crawler left: the upstream request ends now, and with it the lease.
      if (aborted) upstreamRequest?.destroy();
    });
    let sent = 0;
    try {
      if (!/^http:\/\//i.test(rawUrl)) {
        throw new Refusal(
          400,
          /^https:\/\//i.test(rawUrl)
            ? 'https:// URLs go through CONNECT (set this gateway as the proxy for https too)'
            : 'this is a proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port',
          'bad_request',
        );
      }
      try {
        url = new URL(rawUrl);
      } catch {
        throw new Refusal(400, 'the request URL cannot be parsed', 'bad_request');
      }
      options = credentialsOf(req);
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      metrics.outcome('http', error.outcome);
      answer(res, error);
      accessLog('http', url?.host ?? '', undefined, error.status, started, 0, 0, 0, undefined);
      return;
    }
    const target = hostOf(url.hostname);
    const span = traceOf(req, url.host);
    let picked;
    try {
      picked = await withUpstream(
        'http',
        target,
        options,
        () => aborted || res.destroyed,
        () => {
          upstreamRequest?.destroy();
          res.destroy();
        },
        (proxy) =>
          forward(
            proxy,
            req,
            rawUrl,
            settings.connectTimeoutMs,
            (r) => {
              upstreamRequest = r;
            },
            (n) => (sent += n),
          ),
      );
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      metrics.outcome('http', error.outcome);
      span?.end(error.status);
      answer(res, error);
      accessLog('http', url.host, undefined, error.status, started, 0, 0, 0, options.session);
      return;
    }
    if (!picked) {
      upstreamRequest?.destroy();
      metrics.outcome('http', 'client_closed');
      span?.end(499);
      return;
    }
    const { lease, result: upstreamResponse, attempts } = picked;
    const status = upstreamResponse.statusCode ?? 502;
    let received = 0;
    // Reported before the lease is let go of: a released lease is forgotten by the store.
    let reported: Promise<void> = Promise.resolve();
    // Whatever happens from here, the lease is let go of when the exchange ends (a leaked one would renew forever).
    try {
      metrics.outcome('http', 'ok');
      metrics.connection('http', lease.proxy.id, target);
      metrics.tunnelOpened();
      active++;
      span?.end(status);
      if (rateLimitStatuses.has(status)) {
        metrics.rateLimited(lease.proxy.id, target);
        reported = lease
          .rateLimited(target)
          .catch((err: unknown) =>
            log.warn(
              { err: err instanceof Error ? err.message : String(err) },
              'gateway: reporting rate_limited failed',
            ),
          );
      }
      upstreamResponse.on('data', (chunk: Buffer) => (received += chunk.length));
      upstreamResponse.on('error', () => res.destroy());
      res.writeHead(status, upstreamResponse.statusMessage, responseHeaders(upstreamResponse.headers));
      upstreamResponse.pipe(res);
      await new Promise<void>((resolve) => {
        if (res.destroyed || res.writableFinished) resolve();
        else res.once('close', () => resolve());
      });
    } finally {
      if (!res.writableFinished) {
        upstreamRequest?.destroy();
        res.destroy();
      }
      active--;
      metrics.tunnelClosed();
      await reported;
      await lease.done();
    }
    metrics.bytes(lease.proxy.id, target, sent, received);
    accessLog('http', url.host, lease.proxy.id, status, started, attempts, sent, received, lease.session);
  }

  /**
   * Sends the request to the upstream proxy in absolute form. The crawler's
   * body is piped only once the upstream connection is up, so a refused or
   * timed-out proxy can be retried with nothing consumed.
   */
  function forward(
    proxy: ProxyView,
    req: IncomingMessage,
    rawUrl: string,
    timeoutMs: number,
    expose: (r: ReturnType<typeof httpRequest>) => void,
    countBody: (bytes: number) => void,
  ): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const agent = agentFor(proxy);
      const upstream = httpRequest({
        host: proxy.host,
        port: proxy.port,
        method: req.method,
        path: rawUrl,
        headers: requestHeaders(req.headers),
        agent,
      });
      expose(upstream);
      let connected = false;
      const timer = setTimeout(() => {
        if (!connected)
          upstream.destroy(new UpstreamAttemptError('timeout', `no connection within ${timeoutMs} ms`));
      }, timeoutMs);
      timer.unref();
      upstream.once('socket', (socket: Socket) => {
        const ready = () => {
          connected = true;
          clearTimeout(timer);
          // Counted as it flows (a listener added only now: an earlier one would start the flow).
          req.on('data', (chunk: Buffer) => countBody(chunk.length));
          req.pipe(upstream);
        };
        if (socket.connecting) socket.once('connect', ready);
        else ready();
      });
      // An upstream that goes quiet mid-request must not hold the crawler (and the lease) forever.
      upstream.setTimeout(UPSTREAM_IDLE_MS, () =>
        upstream.destroy(new Error(`no data from the upstream proxy for ${UPSTREAM_IDLE_MS / 1000} s`)),
      );
      upstream.once('response', (response) => {
        clearTimeout(timer);
        resolve(response);
      });
      upstream.once('error', (error: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        if (error instanceof UpstreamAttemptError) reject(error);
        else if (!connected)
          reject(
            new UpstreamAttemptError(error.code === 'ECONNREFUSED' ? 'refused' : 'reset', error.message),
          );
        // After the body started flowing nothing can be retried: the crawler gets a 502.
        else
          reject(
            new Refusal(502, `the upstream proxy ${proxy.id} failed: ${error.message}`, 'upstream_failed'),
          );
      });
    });
  }

  function agentFor(proxy: ProxyView): Agent {
    const key = `${proxy.uid ?? proxy.id}@${proxy.host}:${proxy.port}`;
    let agent = agents.get(key);
    if (!agent) {
      agent = new Agent({ keepAlive: true, keepAliveMsecs: 1_000, maxFreeSockets: 64, timeout: 60_000 });
      agents.set(key, agent);
    }
    return agent;
  }

  function answer(res: ServerResponse, refusal: Refusal): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = `${refusal.message}\n`;
    res.writeHead(refusal.status, {
      ...refusal.headers,
      'Content-Type': 'text/plain; charset=utf-8',
      'Content-Length': Buffer.byteLength(body),
    });
    res.end(body);
  }

  function accessLog(
    kind: ConnectionKind,
    target: string,
    proxy: string | undefined,
    status: number,
    started: number,
    attempts: number,
    sentBytes: number,
    receivedBytes: number,
    session: string | undefined,
  ): void {
    // Never the Proxy-Authorization header, the password or a URL path (which may carry a crawler's own secrets).
    log.info(
      {
        kind,
        target,
        ...(proxy ? { proxy } : {}),
        ...(session !== undefined ? { session } : {}),
        status,
        attempts,
        sentBytes,
        receivedBytes,
        durationMs: Math.round((performance.now() - started) * 10) / 10,
      },
      'gateway access',
    );
  }

  return {
    server,
    activeConnections: () => active,
    listen(host, port) {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host || undefined, () => {
          server.off('error', reject);
          const address = server.address() as AddressInfo;
          const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
          resolve({ host: address.address, port: address.port, url: `http://${urlHost}:${address.port}` });
        });
      });
    },
    async close() {
      const closing = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of open) socket.destroy();
      server.closeAllConnections();
      await closing;
      for (const agent of agents.values()) agent.destroy();
      agents.clear();
      await leases.close();
    },
  };
}

/**
 * Dials the upstream proxy, asks it to CONNECT to `authority` and reads its
 * answer. Resolves with the socket and any bytes after the answer's head;
 * rejects with UpstreamAttemptError (refused, timeout, rejected with the
 * proxy's status).
 */
function openTunnel(
  proxy: ProxyView,
  authority: string,
  timeoutMs: number,
  onSocket: (socket: Socket) => void,
): Promise<{ socket: Socket; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: proxy.host, port: proxy.port });
    socket.setNoDelay(true);
    onSocket(socket);
    let buffered: Buffer = Buffer.alloc(0);
    const fail = (error: UpstreamAttemptError) => {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    };
    const timer = setTimeout(
      () => fail(new UpstreamAttemptError('timeout', `no answer to CONNECT within ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.once('connect', () => {
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    });
    socket.on('error', (error: NodeJS.ErrnoException) =>
      fail(new UpstreamAttemptError(error.code === 'ECONNREFUSED' ? 'refused' : 'reset', error.message)),
    );
    socket.once('close', () => fail(new UpstreamAttemptError('reset', 'closed before answering CONNECT')));
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end < 0) {
        if (buffered.length > MAX_UPSTREAM_HEAD)
          fail(new UpstreamAttemptError('rejected', 'answer to CONNECT too long'));
        return;
      }
      socket.off('data', onData);
      socket.pause();
      clearTimeout(timer);
      const statusLine = buffered.subarray(0, buffered.indexOf('\r\n')).toString('latin1');
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1];
      if (status !== '200') {
        return fail(
          new UpstreamAttemptError('rejected', `answered CONNECT with ${status ?? 'no status line'}`),
        );
      }
      socket.removeAllListeners('close');
      socket.removeAllListeners('error');
      resolve({ socket, rest: buffered.subarray(end + 4) });
    };
    socket.on('data', onData);
  });
}

/** The lease target of a host: lowercase, brackets and a trailing dot dropped. */
export function hostOf(host: string): string {
  return host
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase();
}

function requestHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  return endToEndHeaders(headers, connectionListed(headers));
}

function responseHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  return requestHeaders(headers);
}

function statusText(status: number): string {
  return (
    {
      400: 'Bad Request',
      407: 'Proxy Authentication Required',
      502: 'Bad Gateway',
      503: 'Service Unavailable',
    }[status] ?? 'Error'
  );
}
