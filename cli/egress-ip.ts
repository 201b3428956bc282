/**
 * The client side of an IP-echo target (local-servers/ip-echo.ts serves one
 * on the loopback; api.ipify.org is one on the internet): the address the
 * target saw through a given HTTP proxy, that proxy's egress IP.
 * show-egress-ips.ts prints it for every proxy; tests tell proxies apart by it.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { proxyAuthorization } from '../credentials/proxy-credentials.js';

export interface EgressIpOptions {
  /**
   * `absolute`: a plain-HTTP request in absolute form (`curl -x`);
   * `connect`: a CONNECT tunnel, then the request inside it (`curl -p -x`).
   */
  via?: 'absolute' | 'connect';
  timeoutMs?: number;
  /** The proxy's credentials (`Basic ...`, or a proxyURL's userinfo), sent as Proxy-Authorization. */
  proxyAuthorization?: string;
}

/** A lease's proxyURL (`http://user:pass@host:port`) as the address and Proxy-Authorization to use. */
export function fromProxyUrl(proxyURL: string): { host: string; port: number; proxyAuthorization?: string } {
  const url = new URL(proxyURL);
  const username = decodeURIComponent(url.username);
  const password = decodeURIComponent(url.password);
  return {
    host: url.hostname.replace(/^\[|\]$/g, ''),
    port: Number(url.port || 80),
    ...(username ? { proxyAuthorization: proxyAuthorization({ username, password }) } : {}),
  };
}

/**
 * The address `echoUrl` (an IP-echo target) saw when fetched through the
 * HTTP proxy at proxyHost:proxyPort. Throws with what went wrong (the
 * proxy's status, an unparsable answer, the socket error, a timeout), so a
 * caller can print the failure instead of an address.
 */
export async function egressIpThrough(
  proxyHost: string,
  proxyPort: number,
  echoUrl: string,
  options: EgressIpOptions = {},
): Promise<string> {
  const via = options.via ?? 'absolute';
  const timeoutMs = options.timeoutMs ?? 10_000;
  const target = new URL(echoUrl);
  if (target.protocol !== 'http:') throw new Error(`echo URL must be http://, got ${echoUrl}`);
  const targetPort = Number(target.port || 80);
  const path = target.pathname + target.search;
  const signal = AbortSignal.timeout(timeoutMs);
  const credentials = options.proxyAuthorization ? { 'proxy-authorization': options.proxyAuthorization } : {};

  const body = await new Promise<string>((resolve, reject) => {
    const fail = (what: string) => (err: Error) =>
      reject(new Error(`${what} via ${proxyHost}:${proxyPort}: ${err.message}`));
    const read = (res: IncomingMessage, what: string) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () =>
        res.statusCode === 200
          ? resolve(text)
          : reject(new Error(`${what} via ${proxyHost}:${proxyPort}: HTTP ${res.statusCode}`)),
      );
      res.on('error', fail(what));
    };
    if (via === 'absolute') {
      const req = httpRequest({
        host: proxyHost,
        port: proxyPort,
        path: target.href,
        headers: { host: target.host, ...credentials },
        agent: false,
        signal,
      });
      req.on('response', (res) => read(res, `GET ${target.href}`));
      req.on('error', fail(`GET ${target.href}`));
      req.end();
      return;
    }
    const authority = `${target.hostname}:${targetPort}`;
    const tunnel = httpRequest({
      host: proxyHost,
      port: proxyPort,
      method: 'CONNECT',
      path: authority,
      headers: { host: authority, ...credentials },
      agent: false,
      signal,
    });
    tunnel.on('error', fail(`CONNECT ${authority}`));
    tunnel.on('response', (res) => {
      // A proxy that refuses the tunnel answers with an ordinary response.
      res.resume();
      reject(new Error(`CONNECT ${authority} via ${proxyHost}:${proxyPort}: HTTP ${res.statusCode}`));
    });
    tunnel.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        reject(new Error(`CONNECT ${authority} via ${proxyHost}:${proxyPort}: HTTP ${res.statusCode}`));
        return;
      }
      const req = httpRequest({
        createConnection: () => socket,
        path,
        headers: { host: target.host, connection: 'close' },
        signal,
      });
      req.on('response', (inner) => read(inner, `GET ${target.href} in the tunnel`));
      req.on('error', fail(`GET ${target.href} in the tunnel`));
      req.on('close', () => socket.destroy());
      req.end();
    });
    tunnel.end();
  });

  let ip: unknown;
  try {
    ip = (JSON.parse(body) as { ip?: unknown }).ip;
  } catch {
    ip = undefined;
  }
  if (typeof ip !== 'string' || ip === '')
    throw new Error(`${echoUrl} via ${proxyHost}:${proxyPort} answered no "ip": ${body.slice(0, 80)}`);
  return ip;
}
