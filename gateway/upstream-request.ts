/**
 * One plain-HTTP attempt: the crawler's request, sent to the upstream proxy
 * in absolute form over a kept-alive connection to that proxy.
 */
import { Agent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { ProxyView } from '../api/proxy-catalog.js';
import { connectionListed, endToEndHeaders } from '../forwarding/headers.js';
import { requestFailure, UpstreamAttemptError } from './upstream-policy.js';

/** How long an upstream connection may stay silent once the request is sent. */
const UPSTREAM_IDLE_MS = 120_000;

/** Keep-alive connections to each upstream proxy, by proxy UID (or id) and address. */
export interface UpstreamAgents {
  for(proxy: ProxyView): Agent;
  /** Closes every kept-alive connection (shutdown). */
  destroy(): void;
}

export function createUpstreamAgents(): UpstreamAgents {
  const agents = new Map<string, Agent>();
  return {
    for(proxy) {
      const key = `${proxy.uid ?? proxy.id}@${proxy.host}:${proxy.port}`;
      let agent = agents.get(key);
      if (!agent) {
        agent = new Agent({ keepAlive: true, keepAliveMsecs: 1_000, maxFreeSockets: 64, timeout: 60_000 });
        agents.set(key, agent);
      }
      return agent;
    },
    destroy() {
      for (const agent of agents.values()) agent.destroy();
      agents.clear();
    },
  };
}

export interface ForwardedRequest {
  req: IncomingMessage;
  /** The request's absolute-form URL, as the crawler sent it. */
  rawUrl: string;
  timeoutMs: number;
  /** Gets the upstream request the moment it exists (so a crawler that leaves can end it). */
  expose: (upstream: ClientRequest) => void;
  /** Counts the crawler's body as it flows. */
  countBody: (bytes: number) => void;
  /** The upstream proxy's own credentials (`Basic ...`); the crawler's never pass (hop-by-hop). */
  authorization?: string;
}

/**
 * Sends the request and resolves with the upstream proxy's response. The
 * crawler's body is piped only once the upstream connection is up, so a
 * refused or timed-out proxy can be retried with nothing consumed. Rejects
 * with UpstreamAttemptError until then, with a 502 Refusal after.
 */
export function forward(proxy: ProxyView, agent: Agent, r: ForwardedRequest): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const upstream = httpRequest({
      host: proxy.host,
      port: proxy.port,
      method: r.req.method,
      path: r.rawUrl,
      headers: {
        ...endToEndHeaders(r.req.headers, connectionListed(r.req.headers)),
        ...(r.authorization ? { 'proxy-authorization': r.authorization } : {}),
      },
      agent,
    });
    r.expose(upstream);
    let connected = false;
    const timer = setTimeout(() => {
      if (!connected)
        upstream.destroy(
          new UpstreamAttemptError('timeout', `no connection within ${r.timeoutMs} ms`, 'ConnectTimeout'),
        );
    }, r.timeoutMs);
    timer.unref();
    upstream.once('socket', (socket: Socket) => {
      const ready = () => {
        connected = true;
        clearTimeout(timer);
        // Counted as it flows (a listener added only now: an earlier one would start the flow).
        r.req.on('data', (chunk: Buffer) => r.countBody(chunk.length));
        r.req.pipe(upstream);
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
      reject(requestFailure(error, proxy.id, connected));
    });
  });
}
