/**
 * What crawlers do, for the pool tests and benches: lease through the API,
 * and CONNECT through a proxy. No vitest here (the benches import it).
 */
import { request } from 'node:http';
import { fromProxyUrl } from '../../cli/egress-ip.js';

export interface LeasedProxy {
  id: string;
  ip: string;
  port: number;
  pool?: string;
  draining?: boolean;
  healthy: boolean;
  activeLeases: number;
}

export interface LeaseAnswer {
  status: number;
  /** `proxyURL`: the proxy with its credentials, as a crawler uses it. */
  body: { leaseID: string; proxy: LeasedProxy; proxyURL?: string };
}

/** The Proxy-Authorization a lease's proxyURL carries (undefined: a proxy without credentials). */
export function authorizationOf(proxyURL: string | undefined): string | undefined {
  return proxyURL ? fromProxyUrl(proxyURL).proxyAuthorization : undefined;
}

export function leaseApi(baseUrl: string) {
  return {
    async acquire(body: {
      pool?: string;
      selector?: Record<string, string>;
      ttlSeconds?: number;
      target?: string;
    }): Promise<LeaseAnswer> {
      const res = await fetch(`${baseUrl}/v1/leases`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as LeaseAnswer['body'] };
    },
    async release(leaseID: string): Promise<number> {
      const res = await fetch(`${baseUrl}/v1/leases/${leaseID}`, { method: 'DELETE' });
      await res.arrayBuffer();
      return res.status;
    },
  };
}

/**
 * The status line's code of a CONNECT through the proxy at ip:port to
 * 127.0.0.1:targetPort, or 0 when the proxy cannot be reached at all (the
 * address is gone) or does not answer within `timeoutMs`.
 */
export function connectThrough(
  ip: string,
  port: number,
  targetPort: number,
  timeoutMs = 5_000,
  /** The proxy's credentials (authorizationOf a lease's proxyURL). */
  proxyAuthorization?: string,
): Promise<number> {
  return new Promise((resolve) => {
    const req = request({
      host: ip,
      port,
      method: 'CONNECT',
      path: `127.0.0.1:${targetPort}`,
      ...(proxyAuthorization ? { headers: { 'proxy-authorization': proxyAuthorization } } : {}),
      timeout: timeoutMs,
      agent: false,
    });
    const done = (code: number) => {
      req.destroy();
      resolve(code);
    };
    req.on('connect', (res, socket) => {
      socket.destroy();
      done(res.statusCode ?? 0);
    });
    req.on('response', (res) => done(res.statusCode ?? 0));
    req.on('timeout', () => done(0));
    req.on('error', () => done(0));
    req.end();
  });
}
