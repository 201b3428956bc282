/**
 * Unclean paths (`//`, `/./`, `/../`) are redirected with 307 to the
 * cleaned path, query kept, exactly as the seed's router (Go's net/http
 * ServeMux) did: the same raw request targets go to a real Go ServeMux
 * with the seed's patterns (tests/helpers/go-servemux) and to our lease
 * API, over raw sockets so no client cleans them first; then real curl -L
 * and fetch follow the redirects to the normal answers.
 */
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGoServeMux, type GoServeMux } from '../helpers/go-servemux.js';
import { proxy, startTestApi, type TestApi } from './api-helpers.js';

const run = promisify(execFile);
const TOKEN = 'clean-paths-token';

interface RawReply {
  status: number;
  headers: Map<string, string>;
  body: Buffer;
}

/** One request with the target exactly as given (latin1 bytes), on its own connection. */
function rawRequest(port: number, method: string, target: string, token?: string): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', reject);
    socket.on('close', () => {
      const all = Buffer.concat(chunks);
      const split = all.indexOf('\r\n\r\n');
      const head = all.subarray(0, split).toString('latin1').split('\r\n');
      const headers = new Map<string, string>();
      for (const line of head.slice(1)) {
        const colon = line.indexOf(':');
        headers.set(line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim());
      }
      let body: Buffer = all.subarray(split + 4);
      if (headers.get('transfer-encoding') === 'chunked') body = unchunk(body);
      resolve({ status: Number(head[0]!.split(' ')[1]), headers, body });
    });
    const lines = [
      `${method} ${target} HTTP/1.1`,
      'Host: 127.0.0.1',
      'Connection: close',
      ...(token ? [`Authorization: Bearer ${token}`] : []),
      ...(method === 'POST' || method === 'DELETE' ? ['Content-Length: 0'] : []),
      '',
      '',
    ];
    socket.end(Buffer.from(lines.join('\r\n'), 'latin1'));
  });
}

/** What the router decided, comparable across the two servers (their handlers differ). */
function routing(r: RawReply): string {
  if (r.status === 307) return `307 ${r.headers.get('location')}`;
  if (r.status === 405) return `405 Allow: ${r.headers.get('allow')}`;
  if (r.status === 401) return '401';
  // Go's NotFoundHandler, or our envelope for a route that does not exist
  // (not a handler's own 404 such as unknown_lease).
  if (r.status === 404 && (r.body.includes('404 page not found') || r.body.includes('"not_found"')))
    return '404';
  return 'handled';
}

const ROUTES = [
  '/healthz',
  '/metrics',
  '/v1/proxies',
  '/v1/leases',
  '/v1/leases/l-1',
  '/v1/leases/l-1/report',
];

/** Each route written in the unclean ways a client produces, plus a few odd ones. */
function targets(): string[] {
  const out = new Set<string>();
  for (const route of ROUTES) {
    const segs = route.split('/').slice(1);
    const head = `/${segs[0]}`;
    const tail = segs.slice(1).join('/');
    out.add(route);
    out.add(`/${route}`);
    out.add(`//${route}`);
    out.add(`${route}/`);
    out.add(`${route}//`);
    out.add(`${route}/.`);
    out.add(`${route}/..`);
    out.add(`/.${route}`);
    out.add(`/..${route}`);
    out.add(`/x/..${route}`);
    out.add(`/x/../..${route}`);
    out.add(`${route}?`);
    out.add(`/${route}?`);
    out.add(`/${route}?healthy=true&attr.geo=a%20b`);
    out.add(`/.${route}?q=1/../x`);
    if (tail) {
      out.add(`${head}//${tail}`);
      out.add(`${head}/./${tail}`);
      out.add(`${head}/../${head}/${tail}`);
    }
  }
  for (const odd of [
    '/',
    '//',
    '///',
    '/.',
    '/..',
    '/../..',
    '/a/b/../../..',
    '/nope//',
    '/v1//%70roxies',
    '/v1/%70roxies',
    '/v1/%2e/proxies',
    '/v1/leases/a(b)//report',
    '/v1/leases/%41//report?x=%zz',
    'http://127.0.0.1//v1/proxies?healthy=true',
  ]) {
    out.add(odd);
  }
  return [...out];
}

describe('unclean paths, as the seed routed them', () => {
  let api: TestApi;
  let go: GoServeMux;
  const apiPort = () => Number(new URL(api.url).port);

  beforeAll(async () => {
    [api, go] = await Promise.all([
      startTestApi({
        token: TOKEN,
        proxies: [
          proxy({ name: 'fast', attributes: { geo: 'a b' }, ip: '10.0.0.1' }),
          proxy({ name: 'down', healthy: false, ip: '10.0.0.2' }),
        ],
      }),
      startGoServeMux(TOKEN),
    ]);
  });
  afterAll(async () => {
    await api?.close();
    await go?.stop();
  });

  it('redirects (or not) every target, method and credential exactly as Go ServeMux', async () => {
    const differ: string[] = [];
    let redirects = 0;
    for (const target of targets()) {
      for (const method of ['GET', 'HEAD', 'POST', 'DELETE']) {
        for (const token of [TOKEN, undefined]) {
          const [theirs, ours] = await Promise.all([
            rawRequest(go.port, method, target, token),
            rawRequest(apiPort(), method, target, token),
          ]);
          if (routing(theirs).startsWith('307')) redirects++;
          if (routing(ours) !== routing(theirs)) {
            differ.push(
              `${method} ${target}${token ? '' : ' (no token)'}: go ${routing(theirs)}, ours ${routing(ours)}`,
            );
          }
        }
      }
    }
    expect(differ).toEqual([]);
    expect(redirects).toBeGreaterThan(300);
  });

  it('answers 307 with the headers and body Go writes, per method', async () => {
    for (const [method, target] of [
      ['GET', '//v1/proxies?healthy=true'],
      ['HEAD', '/v1/./proxies?a=<b>&c="d"'],
      ['POST', '//v1/leases'],
      ['DELETE', '/v1/leases//l-1'],
    ] as const) {
      const [theirs, ours] = await Promise.all([
        rawRequest(go.port, method, target, TOKEN),
        rawRequest(apiPort(), method, target, TOKEN),
      ]);
      expect(ours.status, `${method} ${target}`).toBe(307);
      expect(
        {
          location: ours.headers.get('location'),
          type: ours.headers.get('content-type'),
          body: ours.body.toString(),
        },
        `${method} ${target}`,
      ).toEqual({
        location: theirs.headers.get('location'),
        type: theirs.headers.get('content-type'),
        body: theirs.body.toString(),
      });
    }
    const get = await rawRequest(apiPort(), 'GET', '//v1/proxies?healthy=true', TOKEN);
    expect(get.headers.get('location')).toBe('/v1/proxies?healthy=true');
    const post = await rawRequest(apiPort(), 'POST', '//v1/leases', TOKEN);
    expect(post.headers.get('location')).toBe('/v1/leases');
  });

  it('checks the token before redirecting, on the path as sent', async () => {
    expect((await rawRequest(apiPort(), 'GET', '//v1/proxies', undefined)).status).toBe(401);
    expect((await rawRequest(apiPort(), 'GET', '/healthz', undefined)).status).toBe(200);
    expect((await rawRequest(apiPort(), 'GET', '/./healthz', undefined)).status).toBe(401);
    expect((await rawRequest(apiPort(), 'GET', '/./healthz', TOKEN)).status).toBe(307);
  });

  it('curl -L gets the normal answers: the healthy list, and a lease with the POST body kept', async () => {
    const auth = ['-H', `Authorization: Bearer ${TOKEN}`];
    const list = await run('curl', [
      '-sS',
      '-L',
      '--path-as-is',
      ...auth,
      '-w',
      '\n%{http_code} %{num_redirects}',
      `${api.url}//v1/proxies?healthy=true`,
    ]);
    const [listBody, listStatus] = splitStatus(list.stdout);
    expect(listStatus).toBe('200 1');
    const listed = JSON.parse(listBody) as { proxies: Array<{ id: string }>; count: number };
    expect(listed.proxies.map((p) => p.id)).toEqual(['default/fast']);

    const lease = await run('curl', [
      '-sS',
      '-L',
      '--path-as-is',
      ...auth,
      '-H',
      'Content-Type: application/json',
      '--data',
      '{"ttlSeconds":120,"selector":{"geo":"a b"}}',
      '-w',
      '\n%{http_code} %{num_redirects}',
      `${api.url}//v1/leases`,
    ]);
    const [leaseBody, leaseStatus] = splitStatus(lease.stdout);
    expect(leaseStatus).toBe('201 1');
    expect(JSON.parse(leaseBody)).toMatchObject({ ttlSeconds: 120, proxy: { id: 'default/fast' } });
  });

  it('fetch (redirect: follow) gets the same: 307 keeps the method and body', async () => {
    const headers = { Authorization: `Bearer ${TOKEN}` };
    const list = await fetch(`${api.url}//v1/proxies?healthy=false`, { headers });
    expect(list.status).toBe(200);
    expect(list.redirected).toBe(true);
    expect(new URL(list.url).pathname).toBe('/v1/proxies');
    expect(((await list.json()) as { proxies: Array<{ id: string }> }).proxies.map((p) => p.id)).toEqual([
      'default/down',
    ]);
    // fetch removes dot segments itself; "//" it sends as is.
    const lease = await fetch(`${api.url}//v1/leases`, {
      method: 'POST',
      headers: { ...headers, 'Content-Type': 'application/json' },
      body: JSON.stringify({ ttlSeconds: 7 }),
    });
    expect(lease.status).toBe(201);
    expect(lease.redirected).toBe(true);
    expect(await lease.json()).toMatchObject({ ttlSeconds: 7 });
  });
});

function splitStatus(stdout: string): [string, string] {
  const nl = stdout.lastIndexOf('\n');
  return [stdout.slice(0, nl), stdout.slice(nl + 1).trim()];
}

function unchunk(data: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = data.indexOf('\r\n', at);
    const size = parseInt(data.subarray(at, eol).toString('latin1'), 16);
    if (!(size > 0)) return Buffer.concat(parts);
    parts.push(data.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}
