/**
 * One health probe: a request for the probe URL *through* the proxy.
 *
 * - https: `CONNECT host:port` to the proxy, TLS to the target through the
 *   tunnel (verified against the system roots plus any configured CA), then
 *   `GET path`.
 * - http: an absolute-form `GET http://host/path` to the proxy.
 *
 * The request bytes are written here, not by an HTTP client library, so
 * nothing can add a header: the target sees Host, User-Agent and
 * Connection: close, and never a `traceparent` or anything else of ours,
 * whatever instrumentation the process loads. Redirects are not followed (a
 * 3xx is just a status). Only the response head is read; the connection is
 * closed as soon as the status is known. One deadline, the Proxy's
 * timeoutSeconds, bounds connect, the CONNECT answer, the TLS handshake and
 * the response together; the failure reason names the stage it hit.
 *
 * The promise resolves for anything the proxy or the target does. It rejects
 * only for the prober's own fault (TLS options of its config that Node
 * refuses, such as a CA that is not a string or Buffer), checked before the
 * proxy is contacted: the prober counts that as ProberError and logs it,
 * instead of blaming every proxy for it.
 */
import { connect as netConnect, isIP, type Socket } from 'node:net';
import {
  connect as tlsConnect,
  createSecureContext,
  rootCertificates,
  type SecureContext,
  type TLSSocket,
} from 'node:tls';
import { performance } from 'node:perf_hooks';

export const PROBE_FAILURE_REASONS = [
  /** TCP connection to the proxy failed (refused, unreachable, reset). */
  'ConnectFailed',
  /** No TCP connection to the proxy within the timeout. */
  'ConnectTimeout',
  /** The proxy answered CONNECT with a non-2xx status other than 407 (403, 502, ...). */
  'ProxyRefused',
  /** The proxy answered 407: it asks for credentials, or refused the ones sent. */
  'AuthFailed',
  /** The Proxy's credentials cannot be read (its Secret or a key is missing); nothing was sent. */
  'CredentialsUnavailable',
  /** TLS to the probe target through the tunnel failed (handshake, certificate, reset). */
  'TLSFailed',
  /** The probe URL answered a status that is not in expectedStatusCodes. */
  'BadStatus',
  /** Connected, but no complete answer (CONNECT, TLS or response) within the timeout. */
  'Timeout',
  /** Something that is not HTTP, or the connection closed before a complete answer. */
  'ProtocolError',
  /** The probe URL is not an absolute http:// or https:// URL. */
  'InvalidProbeURL',
  /** The prober is stopping. */
  'Aborted',
  /** The prober itself threw while probing (a bug, not the proxy's fault); the api log has the error. */
  'ProberError',
] as const;
export type ProbeFailureReason = (typeof PROBE_FAILURE_REASONS)[number];

export interface ProbeResult {
  ok: boolean;
  /** From the start of the TCP connect to the response head (or to the failure). */
  durationMs: number;
  /** The probe target's status, when one was received. */
  status?: number;
  reason?: ProbeFailureReason;
  message?: string;
}

export interface ProbeTls {
  /** Extra trusted CA certificates (PEM), added to Node's default roots: private CAs and tests. */
  ca?: string | Buffer | ReadonlyArray<string | Buffer>;
}

export interface ProbeRequest {
  proxyHost: string;
  proxyPort: number;
  url: URL;
  timeoutMs: number;
  expectedStatusCodes: readonly number[];
  tls?: ProbeTls;
  userAgent?: string;
  signal?: AbortSignal;
  /** Sent to the proxy as `Proxy-Authorization` (on CONNECT, or on the plain request). */
  proxyAuthorization?: string;
}

export const DEFAULT_USER_AGENT = 'egress-proxies-health/1';
/** A response head larger than this is not an answer we can use. */
const MAX_HEAD_BYTES = 16 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');
const STATUS_LINE = /^HTTP\/1\.[01] (\d{3})(?: |$)/;

export function parseProbeURL(raw: string): URL | undefined {
  try {
    const url = new URL(raw);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url : undefined;
  } catch {
    return undefined;
  }
}

function bare(hostname: string): string {
  return hostname.replace(/^\[|\]$/g, '');
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}

/** The first bytes of a non-HTTP answer, printable and short, for the message. */
function snippet(buf: Buffer): string {
  return JSON.stringify(buf.subarray(0, 32).toString('latin1'));
}

type Head = { status: number; rest: Buffer } | { garbage: string };

/** Reads one response head from `stream`, skipping interim 1xx responses when `skipInterim`. */
function readHead(
  stream: Socket | TLSSocket,
  skipInterim: boolean,
  onHead: (head: Head) => void,
): () => void {
  let buffered: Buffer = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    for (;;) {
      const end = buffered.indexOf(HEAD_END);
      if (end < 0) {
        // Fail early on garbage: a head must start like a status line.
        const probe = buffered.subarray(0, 5).toString('latin1');
        if (!'HTTP/'.startsWith(probe) || buffered.length > MAX_HEAD_BYTES) {
          detach();
          onHead({ garbage: snippet(buffered) });
        }
        return;
      }
      const statusLine = buffered.subarray(0, Math.min(end, buffered.indexOf('\r\n'))).toString('latin1');
      const match = STATUS_LINE.exec(statusLine);
      if (!match) {
        detach();
        onHead({ garbage: snippet(buffered) });
        return;
      }
      const status = Number(match[1]);
      const rest = buffered.subarray(end + HEAD_END.length);
      if (skipInterim && status >= 100 && status < 200 && status !== 101) {
        buffered = rest;
        continue;
      }
      detach();
      onHead({ status, rest });
      return;
    }
  };
  const detach = (): void => {
    stream.off('data', onData);
  };
  stream.on('data', onData);
  return detach;
}

/** An error of the prober's own making, for the prober to count as ProberError. */
function proberFault(error: unknown): Error {
  return new Error(`the probe's TLS options are invalid: ${describe(error)}`, { cause: error });
}

export function probeThroughProxy(req: ProbeRequest): Promise<ProbeResult> {
  const started = performance.now();
  const { url } = req;
  const https = url.protocol === 'https:';
  const ua = req.userAgent ?? DEFAULT_USER_AGENT;
  const hostname = url.hostname;
  const port = url.port || (https ? '443' : '80');

  // The prober's own TLS options, checked before any socket exists: Node
  // throws on a bad one, and that is the prober's fault, not the proxy's.
  let secureContext: SecureContext | undefined;
  const extraCa = req.tls?.ca === undefined ? [] : Array.isArray(req.tls.ca) ? req.tls.ca : [req.tls.ca];
  if (https && extraCa.length > 0) {
    try {
      secureContext = createSecureContext({
        ca: [...rootCertificates, ...(extraCa as Array<string | Buffer>)],
      });
    } catch (error) {
      return Promise.reject(proberFault(error));
    }
  }

  return new Promise<ProbeResult>((resolve, reject) => {
    type Stage = 'connect' | 'proxy' | 'tls' | 'response';
    let stage: Stage = 'connect';
    let done = false;
    // The socket and the timer exist only once netConnect has returned; `end` tolerates their absence.
    let socket: Socket | undefined = undefined;
    let timer: ReturnType<typeof setTimeout> | undefined = undefined;
    let tunnel: TLSSocket | undefined;

    /** Ends the probe once: the timer, the abort listener and the sockets go. False if it had ended. */
    const end = (): boolean => {
      if (done) return false;
      done = true;
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
      tunnel?.destroy();
      socket?.destroy();
      return true;
    };
    const finish = (result: Omit<ProbeResult, 'durationMs'>): void => {
      if (end()) resolve({ ...result, durationMs: performance.now() - started });
    };
    const fail = (reason: ProbeFailureReason, message: string): void =>
      finish({ ok: false, reason, message });
    /** The prober's own fault: the probe ends and rejects, which the prober reports as ProberError. */
    const crash = (error: unknown): void => {
      if (end()) reject(proberFault(error));
    };

    const onTimeout = (): void => {
      const t = `${req.timeoutMs} ms`;
      switch (stage) {
        case 'connect':
          return fail(
            'ConnectTimeout',
            `no TCP connection to the proxy ${req.proxyHost}:${req.proxyPort} within ${t}`,
          );
        case 'proxy':
          return fail('Timeout', `the proxy did not answer CONNECT ${hostname}:${port} within ${t}`);
        case 'tls':
          return fail(
            'Timeout',
            `TLS handshake with ${hostname} through the proxy did not finish within ${t}`,
          );
        case 'response':
          return fail('Timeout', `no response from ${url.origin} through the proxy within ${t}`);
      }
    };
    const onAbort = (): void => fail('Aborted', 'probe cancelled');
    if (req.signal?.aborted) {
      // Resolve without touching the network.
      done = true;
      resolve({ ok: false, reason: 'Aborted', message: 'probe cancelled', durationMs: 0 });
      return;
    }

    const onStreamError = (error: unknown): void => {
      switch (stage) {
        case 'connect':
          return fail(
            'ConnectFailed',
            `cannot connect to the proxy ${req.proxyHost}:${req.proxyPort}: ${describe(error)}`,
          );
        case 'tls':
          return fail('TLSFailed', `TLS with ${hostname} through the proxy failed: ${describe(error)}`);
        default:
          return fail('ProtocolError', `connection failed before a complete answer: ${describe(error)}`);
      }
    };
    const onClosedEarly = (): void => {
      if (stage === 'tls') fail('TLSFailed', `the tunnel closed during the TLS handshake with ${hostname}`);
      else
        fail(
          'ProtocolError',
          stage === 'proxy'
            ? 'the proxy closed the connection without answering CONNECT'
            : 'the connection closed before a complete response',
        );
    };

    const onResponse = (head: Head): void => {
      if ('garbage' in head) return fail('ProtocolError', `not an HTTP response: ${head.garbage}`);
      // Over plain HTTP only the proxy answers 407 (an origin asks with 401).
      if (!https && head.status === 407) return fail('AuthFailed', authRefused(req, `GET ${url.origin}`));
      if (req.expectedStatusCodes.includes(head.status)) return finish({ ok: true, status: head.status });
      finish({
        ok: false,
        status: head.status,
        reason: 'BadStatus',
        message: `${url.origin}${url.pathname} answered ${head.status}, expected ${req.expectedStatusCodes.join(' or ')}`,
      });
    };

    const credentials = req.proxyAuthorization ? `Proxy-Authorization: ${req.proxyAuthorization}\r\n` : '';
    const requestHead = (target: string): string =>
      `GET ${target} HTTP/1.1\r\nHost: ${url.host}\r\nUser-Agent: ${ua}\r\n${https ? '' : credentials}Connection: close\r\n\r\n`;

    let conn: Socket;
    try {
      conn = netConnect({ host: req.proxyHost, port: req.proxyPort });
    } catch (error) {
      // A port or host the socket layer rejects (ERR_SOCKET_BAD_PORT, ...) throws here, before any socket exists.
      return onStreamError(error);
    }
    socket = conn;
    // Armed only now, so a timeout or an abort always finds the socket it has to destroy.
    timer = setTimeout(onTimeout, req.timeoutMs);
    req.signal?.addEventListener('abort', onAbort, { once: true });
    conn.setNoDelay(true);
    conn.on('error', onStreamError);
    conn.on('close', onClosedEarly);
    conn.once('connect', () => {
      if (!https) {
        stage = 'response';
        readHead(conn, true, onResponse);
        conn.write(requestHead(`${url.protocol}//${url.host}${url.pathname}${url.search}`));
        return;
      }
      stage = 'proxy';
      const authority = `${hostname}:${port}`;
      readHead(conn, false, (head) => {
        if ('garbage' in head)
          return fail('ProtocolError', `the proxy's CONNECT answer is not HTTP: ${head.garbage}`);
        if (head.status === 407) return fail('AuthFailed', authRefused(req, `CONNECT ${authority}`));
        if (head.status < 200 || head.status > 299) {
          return finish({
            ok: false,
            reason: 'ProxyRefused',
            message: `the proxy answered CONNECT ${authority} with ${head.status}`,
          });
        }
        // A TLS server speaks only after our ClientHello: bytes here are not TLS.
        if (head.rest.length > 0)
          return fail('ProtocolError', `unexpected bytes after the CONNECT answer: ${snippet(head.rest)}`);
        stage = 'tls';
        const name = bare(hostname);
        try {
          tunnel = tlsConnect({
            socket: conn,
            host: name,
            ...(isIP(name) === 0 ? { servername: name } : {}),
            ALPNProtocols: ['http/1.1'],
            rejectUnauthorized: true,
            ...(secureContext ? { secureContext } : {}),
          });
        } catch (error) {
          // Options Node refuses throw synchronously, here inside a socket's data handler: never let
          // it escape, and never blame the proxy for it.
          return crash(error);
        }
        tunnel.on('error', onStreamError);
        tunnel.once('secureConnect', () => {
          stage = 'response';
          readHead(tunnel!, true, onResponse);
          tunnel!.write(requestHead(`${url.pathname}${url.search}`));
        });
      });
      conn.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n${credentials}\r\n`);
    });
  });
}

/** Why a 407 came back, as the probe knows it: no credentials were sent, or these were refused. */
function authRefused(req: ProbeRequest, what: string): string {
  return req.proxyAuthorization
    ? `the proxy refused the Proxy's credentials (407 to ${what})`
    : `the proxy asks for credentials and the Proxy has none (407 to ${what})`;
}
