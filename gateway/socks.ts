/**
 * The SOCKS5 listener's front door (RFC 1928, with RFC 1929 username and
 * password authentication): for the crawlers and browsers that speak SOCKS
 * rather than HTTP CONNECT. It parses the greeting, the credentials and the
 * request, then hands the tunnel to tunnel.ts, the same code the HTTP
 * listener's CONNECT runs: the password is the API token and the username
 * carries the same options (`session-`, `geo-`, `pool-`, `ttl-`).
 *
 * The parser is our own (docs/architecture.md, Decisions: SOCKS5 parser):
 * four short messages, each parsed from a buffer by a pure function that
 * answers "need more", "done" or "bad", so a truncated or hostile message
 * never throws and is fuzzed directly (tests/unit/gateway-socks.test.ts).
 *
 * Only CONNECT: BIND and UDP ASSOCIATE are answered 0x07 (command not
 * supported), since a fleet proxy speaks HTTP CONNECT and carries neither.
 */
import { createServer, isIP, type Server, type Socket } from 'node:net';
import { parseTraceparent } from '../tracing/http.js';
import { clientKey } from '../tenants/guess-limiter.js';
import { admit, type Admitted } from './admission.js';
import { recordRefused, type GatewayContext } from './context.js';
import type { ProxyCredentials } from './credentials.js';
import { Refusal } from './refusal.js';
import { parseAuthority, serveTunnel } from './tunnel.js';

/** How long a client has, in all, to send its greeting, credentials and request (the HTTP listener's head timeout). */
export const SOCKS_HANDSHAKE_TIMEOUT_MS = 10_000;
/** Bytes a client may send after its request, before the tunnel is answered; more and it is cut off. */
const MAX_EARLY_BYTES = 64 * 1024;

export const SOCKS_VERSION = 0x05;
const AUTH_VERSION = 0x01;
export const METHOD_NO_AUTH = 0x00;
export const METHOD_USER_PASS = 0x02;
export const METHOD_NONE_ACCEPTABLE = 0xff;
export const COMMAND = { connect: 0x01, bind: 0x02, udpAssociate: 0x03 } as const;
export const ADDRESS_TYPE = { ipv4: 0x01, domain: 0x03, ipv6: 0x04 } as const;
/** RFC 1928 section 6 replies. */
export const REPLY = {
  succeeded: 0x00,
  generalFailure: 0x01,
  notAllowed: 0x02,
  networkUnreachable: 0x03,
  hostUnreachable: 0x04,
  connectionRefused: 0x05,
  ttlExpired: 0x06,
  commandNotSupported: 0x07,
  addressTypeNotSupported: 0x08,
} as const;

/** One message parsed from the front of a buffer. */
export type Parsed<T> =
  | { kind: 'more' }
  | { kind: 'done'; value: T; used: number }
  | { kind: 'bad'; reason: string; reply?: number };

/** The method-selection message: `VER NMETHODS METHODS...`. */
export function parseGreeting(buf: Buffer): Parsed<{ methods: number[] }> {
  if (buf.length < 1) return { kind: 'more' };
  if (buf[0] !== SOCKS_VERSION)
    return { kind: 'bad', reason: `not SOCKS version 5 (version byte ${buf[0]})` };
  if (buf.length < 2) return { kind: 'more' };
  const n = buf[1]!;
  if (buf.length < 2 + n) return { kind: 'more' };
  return { kind: 'done', value: { methods: [...buf.subarray(2, 2 + n)] }, used: 2 + n };
}

/** RFC 1929's request: `VER ULEN UNAME PLEN PASSWD` (each length one byte, so at most 255). */
export function parseUserPass(buf: Buffer): Parsed<ProxyCredentials> {
  if (buf.length < 1) return { kind: 'more' };
  if (buf[0] !== AUTH_VERSION)
    return { kind: 'bad', reason: `not username/password version 1 (version byte ${buf[0]})` };
  if (buf.length < 2) return { kind: 'more' };
  const ulen = buf[1]!;
  if (buf.length < 3 + ulen) return { kind: 'more' };
  const plen = buf[2 + ulen]!;
  const used = 3 + ulen + plen;
  if (buf.length < used) return { kind: 'more' };
  return {
    kind: 'done',
    value: {
      username: buf.subarray(2, 2 + ulen).toString('utf8'),
      password: buf.subarray(3 + ulen, used).toString('utf8'),
    },
    used,
  };
}

export interface SocksRequest {
  command: number;
  /** `host:port` as a CONNECT authority: an IPv6 address in brackets, a domain name as sent. */
  authority: string;
}

/** The request: `VER CMD RSV ATYP DST.ADDR DST.PORT`. */
export function parseRequest(buf: Buffer): Parsed<SocksRequest> {
  if (buf.length < 1) return { kind: 'more' };
  if (buf[0] !== SOCKS_VERSION)
    return { kind: 'bad', reason: `request is not SOCKS version 5 (version byte ${buf[0]})` };
  if (buf.length < 5) return { kind: 'more' };
  const command = buf[1]!;
  const type = buf[3]!;
  let host: string;
  let end: number;
  if (type === ADDRESS_TYPE.ipv4) {
    end = 4 + 4;
    if (buf.length < end + 2) return { kind: 'more' };
    host = [...buf.subarray(4, end)].join('.');
  } else if (type === ADDRESS_TYPE.ipv6) {
    end = 4 + 16;
    if (buf.length < end + 2) return { kind: 'more' };
    const groups: string[] = [];
    for (let i = 4; i < end; i += 2) groups.push(buf.readUInt16BE(i).toString(16));
    host = `[${groups.join(':')}]`;
  } else if (type === ADDRESS_TYPE.domain) {
    const len = buf[4]!;
    if (len === 0) return { kind: 'bad', reason: 'empty domain name', reply: REPLY.generalFailure };
    end = 5 + len;
    if (buf.length < end + 2) return { kind: 'more' };
    // Latin-1 keeps every byte one character; anything but a host name fails parseAuthority (400).
    const name = buf.subarray(5, end).toString('latin1');
    // Some clients send an IPv6 literal as a name: written as CONNECT would, in brackets.
    host = isIP(name) === 6 ? `[${name}]` : name;
  } else {
    return { kind: 'bad', reason: `unknown address type ${type}`, reply: REPLY.addressTypeNotSupported };
  }
  const port = buf.readUInt16BE(end);
  return { kind: 'done', value: { command, authority: `${host}:${port}` }, used: end + 2 };
}

/** A reply with no bound address (0.0.0.0:0): the tunnel's upstream end is the fleet proxy's, not ours. */
export function reply(code: number): Buffer {
  return Buffer.from([SOCKS_VERSION, code, 0x00, ADDRESS_TYPE.ipv4, 0, 0, 0, 0, 0, 0]);
}

/** The SOCKS5 reply for a refusal the HTTP listener would answer with its status. */
export function replyOf(refusal: Refusal): number {
  if (refusal.status === 403 || refusal.status === 407 || refusal.status === 429) return REPLY.notAllowed;
  if (refusal.outcome === 'unresolved') return REPLY.hostUnreachable;
  if (refusal.status === 502 || refusal.status === 504) return REPLY.hostUnreachable;
  return REPLY.generalFailure;
}

/** The SOCKS5 listener, sharing the gateway's context (and so its leases, limits and logs) with the HTTP one. */
export function createSocksListener(ctx: GatewayContext): Server {
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    serveSocks(ctx, socket);
  });
  return server;
}

/** One client connection: the handshake, then the shared tunnel. */
function serveSocks(ctx: GatewayContext, socket: Socket): void {
  const started = performance.now();
  const address = clientKey(socket.remoteAddress);
  let buffered: Buffer = Buffer.alloc(0);
  let stage: 'greeting' | 'auth' | 'request' = 'greeting';
  let admitted: Admitted | undefined;
  const abandon = () => {
    socket.off('data', onData);
    socket.destroy();
  };
  // A bound on the whole handshake, not on its pauses: a byte every few seconds does not keep it alive.
  const slow = setTimeout(() => {
    ctx.log.debug({ client: address, stage }, 'gateway: SOCKS5 handshake too slow');
    abandon();
  }, SOCKS_HANDSHAKE_TIMEOUT_MS);
  socket.once('close', () => clearTimeout(slow));
  /** A handshake the gateway cannot answer in SOCKS5 terms: counted, closed. */
  const malformed = (reason: string, code?: number) => {
    ctx.metrics.outcome('connect', 'bad_request');
    ctx.log.debug({ client: address, stage, reason }, 'gateway: malformed SOCKS5 handshake');
    socket.off('data', onData);
    if (code !== undefined && socket.writable) socket.end(reply(code));
    else socket.destroy();
  };
  const onData = (chunk: Buffer) => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    for (;;) {
      if (stage === 'greeting') {
        const parsed = parseGreeting(buffered);
        if (parsed.kind === 'more') return;
        if (parsed.kind === 'bad') return malformed(parsed.reason);
        buffered = buffered.subarray(parsed.used);
        const { methods } = parsed.value;
        // Username/password whenever offered, so the username's options count even on an open gateway.
        if (methods.includes(METHOD_USER_PASS)) {
          socket.write(Buffer.from([SOCKS_VERSION, METHOD_USER_PASS]));
          stage = 'auth';
        } else if (methods.includes(METHOD_NO_AUTH) && ctx.tenants.open) {
          socket.write(Buffer.from([SOCKS_VERSION, METHOD_NO_AUTH]));
          stage = 'request';
        } else {
          // RFC 1928: no acceptable method, and the client closes; so do we.
          ctx.metrics.outcome('connect', 'unauthorized');
          socket.off('data', onData);
          socket.end(Buffer.from([SOCKS_VERSION, METHOD_NONE_ACCEPTABLE]));
          return;
        }
      } else if (stage === 'auth') {
        const parsed = parseUserPass(buffered);
        if (parsed.kind === 'more') return;
        if (parsed.kind === 'bad') return malformed(parsed.reason);
        buffered = buffered.subarray(parsed.used);
        const credentials = parsed.value;
        try {
          // The whole admission here, so wrong credentials get RFC 1929's failure status.
          admitted = admit(ctx, () => credentials, address);
        } catch (error) {
          if (!(error instanceof Refusal)) {
            ctx.log.error({ err: (error as Error).message }, 'gateway: SOCKS5 admission failed');
            return abandon();
          }
          recordRefused(ctx, 'connect', error, { target: '', started, client: address, via: 'socks5' });
          socket.off('data', onData);
          // RFC 1929: a non-zero status, and the server closes the connection.
          socket.end(Buffer.from([AUTH_VERSION, 0x01]));
          return;
        }
        socket.write(Buffer.from([AUTH_VERSION, 0x00]));
        stage = 'request';
      } else {
        const parsed = parseRequest(buffered);
        if (parsed.kind === 'more') return;
        if (parsed.kind === 'bad') return malformed(parsed.reason, parsed.reply);
        buffered = buffered.subarray(parsed.used);
        socket.off('data', onData);
        clearTimeout(slow);
        requested(parsed.value);
        return;
      }
    }
  };
  socket.on('data', onData);

  const requested = (request: SocksRequest) => {
    const { authority } = request;
    if (request.command !== COMMAND.connect) {
      const name =
        request.command === COMMAND.bind
          ? 'BIND'
          : request.command === COMMAND.udpAssociate
            ? 'UDP ASSOCIATE'
            : `command ${request.command}`;
      const refusal = new Refusal(400, `SOCKS5 ${name} is not supported (CONNECT only)`, 'bad_request');
      recordRefused(ctx, 'connect', refusal, {
        target: authority,
        started,
        client: address,
        admitted,
        via: 'socks5',
      });
      if (socket.writable) socket.end(reply(REPLY.commandNotSupported));
      return;
    }
    // Until the tunnel is answered, what the client sends is kept (bounded), and its leaving is seen at once.
    const early: Buffer[] = [];
    let earlyBytes = buffered.length;
    if (buffered.length > 0) early.push(buffered);
    const keep = (chunk: Buffer) => {
      earlyBytes += chunk.length;
      if (earlyBytes > MAX_EARLY_BYTES) socket.destroy();
      else early.push(chunk);
    };
    socket.on('data', keep);
    serveTunnel(ctx, {
      via: 'socks5',
      client: socket,
      address,
      authority,
      started,
      request: () => {
        const { hostname, port } = parseAuthority(authority);
        // No-auth method (an open gateway only): admitted now, with no options.
        return { hostname, port, admitted: admitted ?? admit(ctx, () => undefined, address) };
      },
      span: () =>
        ctx.traceHook?.({
          method: 'CONNECT',
          path: authority,
          traceparent: undefined,
          trace: parseTraceparent(undefined),
        }),
      established: () => socket.write(reply(REPLY.succeeded)),
      takeHead: () => {
        // Paused before the listener goes, so nothing is read unkept; pipe() resumes it.
        socket.pause();
        socket.off('data', keep);
        return Buffer.concat(early);
      },
      refuse: (refusal) => {
        socket.off('data', keep);
        if (socket.writable) socket.end(reply(replyOf(refusal)));
        else socket.destroy();
      },
    }).catch((error: unknown) => {
      ctx.log.error(
        { err: error instanceof Error ? error.message : String(error) },
        'gateway: SOCKS5 tunnel failed',
      );
      socket.destroy();
    });
  };
}
