/**
 * A proxy list served over HTTP on the loopback, as a list vendor's API or a
 * file on a web server is: `lines` (`host:port[:user:pass]`, one a line) or
 * `json` (an array of `{host, port, username?, password?}`), with `ETag`
 * and `Last-Modified`, and 304 to a matching `If-None-Match` (or, without
 * one, to an `If-Modified-Since` no older than the list). Controls: change
 * the entries, fail with a status, serve garbage, recover; `requests()`
 * tells what each request asked and got.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface ProxyListEntry {
  host: string;
  port: number;
  username?: string;
  password?: string;
}

export type ProxyListFormat = 'lines' | 'json';

export interface FakeProxyListOptions {
  format: ProxyListFormat;
  entries?: ProxyListEntry[];
  /** Default 127.0.0.1. */
  host?: string;
}

export interface ProxyListRequest {
  path: string;
  /** Whether it carried If-None-Match or If-Modified-Since. */
  conditional: boolean;
  ifNoneMatch?: string;
  ifModifiedSince?: string;
  status: number;
}

export interface FakeProxyList {
  readonly host: string;
  readonly port: number;
  /** `http://host:port/proxies` (any path serves the list). */
  readonly url: string;
  /** The current ETag (quoted), as the server sends it. */
  etag(): string;
  setEntries(entries: ProxyListEntry[]): void;
  /** Answer every request with this status until recover(). */
  failWith(status: number): void;
  /** Answer 200 with something no list parser accepts until recover(). */
  serveGarbage(): void;
  recover(): void;
  requests(): ProxyListRequest[];
  close(): Promise<void>;
}

/** The list's body in a format. */
export function renderProxyList(entries: readonly ProxyListEntry[], format: ProxyListFormat): string {
  if (format === 'json') return `${JSON.stringify(entries)}\n`;
  return entries
    .map((e) =>
      e.username === undefined
        ? `${e.host}:${e.port}\n`
        : `${e.host}:${e.port}:${e.username}:${e.password ?? ''}\n`,
    )
    .join('');
}

const GARBAGE = '<html><body>\u0000\u00ff not a proxy list {"host": </body>\n';

export async function startFakeProxyList(options: FakeProxyListOptions): Promise<FakeProxyList> {
  const contentType = options.format === 'json' ? 'application/json' : 'text/plain; charset=utf-8';
  let body = '';
  let etag = '';
  /** Whole seconds: what Last-Modified can say. Strictly increasing, so every change is newer. */
  let lastModifiedSeconds = 0;
  let mode: { kind: 'ok' } | { kind: 'fail'; status: number } | { kind: 'garbage' } = { kind: 'ok' };
  const log: ProxyListRequest[] = [];
  const sockets = new Set<Socket>();

  const setEntries = (entries: ProxyListEntry[]) => {
    body = renderProxyList(entries, options.format);
    etag = `"${createHash('sha256').update(body).digest('hex').slice(0, 16)}"`;
    lastModifiedSeconds = Math.max(Math.floor(Date.now() / 1_000), lastModifiedSeconds + 1);
  };
  setEntries(options.entries ?? []);

  const server: Server = createServer((req, res) => {
    const ifNoneMatch = req.headers['if-none-match'];
    const ifModifiedSince = req.headers['if-modified-since'];
    const entry: ProxyListRequest = {
      path: req.url ?? '',
      conditional: ifNoneMatch !== undefined || ifModifiedSince !== undefined,
      ...(ifNoneMatch === undefined ? {} : { ifNoneMatch }),
      ...(ifModifiedSince === undefined ? {} : { ifModifiedSince }),
      status: 0,
    };
    log.push(entry);
    const send = (status: number, headers: Record<string, string>, text?: string) => {
      entry.status = status;
      res.writeHead(status, headers).end(req.method === 'HEAD' ? undefined : text);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      send(405, { allow: 'GET, HEAD' });
      return;
    }
    if (mode.kind === 'fail') {
      send(mode.status, { 'content-type': 'text/plain' }, `list unavailable (${mode.status})\n`);
      return;
    }
    if (mode.kind === 'garbage') {
      // A new ETag each time: a client must not take garbage for the list it has.
      send(200, { 'content-type': contentType, etag: `"garbage-${log.length}"` }, GARBAGE);
      return;
    }
    const lastModified = new Date(lastModifiedSeconds * 1_000).toUTCString();
    const validators = { etag, 'last-modified': lastModified, 'cache-control': 'no-cache' };
    // RFC 9110 §13.2.2: If-None-Match decides when present; If-Modified-Since only without it.
    const notModified =
      ifNoneMatch !== undefined
        ? ifNoneMatch
            .split(',')
            .map((t) => t.trim().replace(/^W\//, ''))
            .some((t) => t === etag || t === '*')
        : ifModifiedSince !== undefined &&
          !Number.isNaN(Date.parse(ifModifiedSince)) &&
          Date.parse(ifModifiedSince) >= lastModifiedSeconds * 1_000;
    if (notModified) {
      send(304, validators);
      return;
    }
    send(
      200,
      { ...validators, 'content-type': contentType, 'content-length': String(Buffer.byteLength(body)) },
      body,
    );
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: options.host ?? '127.0.0.1', port: 0, exclusive: true }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  return {
    host: address.address,
    port: address.port,
    url: `http://${address.address}:${address.port}/proxies`,
    etag: () => etag,
    setEntries,
    failWith: (status) => {
      mode = { kind: 'fail', status };
    },
    serveGarbage: () => {
      mode = { kind: 'garbage' };
    },
    recover: () => {
      mode = { kind: 'ok' };
    },
    requests: () => log.map((r) => ({ ...r })),
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
