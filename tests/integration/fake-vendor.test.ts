/**
 * The fake vendor super-proxy (tests/helpers/fake-vendor.ts) driven with real
 * sockets through credentials rendered by two presets (Oxylabs: options in
 * the username; IPRoyal: options in the password), with the IP echo as the
 * target: sessions get distinct exit addresses and keep them, a lifetime
 * ends a session's address, bad credentials are 407 and bad options the
 * vendor-style 400. And the proxy list server's conditional requests.
 */
import { request, type IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { proxyAuthorization, type ProxyCredentials } from '../../credentials/proxy-credentials.js';
import { startIpEcho, type IpEchoServer } from '../../local-servers/ip-echo.js';
import { PRESETS, presetTemplates, type PresetName } from '../../providers/vendor/presets.js';
import { newSessionId, renderCredentials, type VendorTemplates } from '../../providers/vendor/template.js';
import { FAKE_VENDOR_REALM, startFakeVendor, type FakeVendor } from '../helpers/fake-vendor.js';
import { startFakeProxyList } from '../helpers/fake-proxy-list.js';
import { getThroughConnect, getThroughProxy } from '../helpers/net.js';

let echo: IpEchoServer;
beforeAll(async () => {
  echo = await startIpEcho();
});
afterAll(async () => {
  await echo.close();
});

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
}

/** One request through the vendor (CONNECT or absolute-form GET): its status and headers, whatever they are. */
function ask(vendor: FakeVendor, kind: 'connect' | 'http', credentials?: ProxyCredentials): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const target = `127.0.0.1:${echo.port}`;
    const req = request({
      host: vendor.host,
      port: vendor.port,
      method: kind === 'connect' ? 'CONNECT' : 'GET',
      path: kind === 'connect' ? target : `http://${target}/`,
      headers: {
        host: target,
        ...(credentials ? { 'proxy-authorization': proxyAuthorization(credentials) } : {}),
      },
      timeout: 5_000,
    });
    req.on('connect', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, headers: res.headers });
    });
    req.on('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, headers: res.headers });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** The exit address the IP echo saw, through the vendor with these credentials. */
async function exitAddress(
  vendor: FakeVendor,
  credentials: ProxyCredentials,
  kind: 'connect' | 'http' = 'http',
): Promise<string> {
  const auth = proxyAuthorization(credentials);
  if (kind === 'connect') {
    const body = await getThroughConnect(vendor.host, vendor.port, echo.port, 5_000, '127.0.0.1', auth);
    return (JSON.parse(body) as { ip: string }).ip;
  }
  const res = await getThroughProxy(vendor.host, vendor.port, echo.port, auth);
  expect(res.status).toBe(200);
  return (JSON.parse(res.body) as { ip: string }).ip;
}

const CASES: Array<{ preset: PresetName; account: ProxyCredentials }> = [
  { preset: 'oxylabs', account: { username: 'crawler_team', password: 'oxyPassw0rd' } },
  { preset: 'iproyal', account: { username: 'iproyaluser', password: 'irPassw0rd' } },
];

describe.each(CASES)('the fake vendor with the $preset preset', ({ preset, account }) => {
  const templates = presetTemplates(PRESETS[preset]);
  const max = PRESETS[preset].lifetime.maxSeconds;
  let vendor: FakeVendor;
  beforeAll(async () => {
    vendor = await startFakeVendor({ templates, account, lifetimeSeconds: 600, maxLifetimeSeconds: max });
  });
  afterAll(async () => {
    await vendor.close();
  });

  const credentialsFor = (session: string, lifetimeSeconds = 600, country?: string) =>
    renderCredentials(templates, { account, params: {}, session, country, lifetimeSeconds });

  it('gives distinct sessions distinct exit addresses on the loopback', async () => {
    const sessions = Array.from({ length: 5 }, () => newSessionId(templates));
    const addresses = await Promise.all(
      sessions.map((s) => exitAddress(vendor, credentialsFor(s, 600, 'de'))),
    );
    expect(new Set(addresses).size).toBe(5);
    for (const a of addresses) {
      expect(a).toMatch(/^127\.91\.\d+\.\d+$/);
    }
    const seen = vendor.requests().filter((r) => r.session !== undefined && sessions.includes(r.session));
    expect(seen).toHaveLength(5);
    for (const r of seen)
      expect(r).toMatchObject({ kind: 'http', country: 'de', lifetimeSeconds: 600, status: 200 });
  });

  it('keeps a session on its exit address for 10 requests, over CONNECT and plain HTTP', async () => {
    const credentials = credentialsFor(newSessionId(templates));
    const addresses: string[] = [];
    for (let i = 0; i < 10; i++)
      addresses.push(await exitAddress(vendor, credentials, i % 2 ? 'connect' : 'http'));
    expect(new Set(addresses).size).toBe(1);
    expect(addresses[0]).toMatch(/^127\.91\./);
  });

  it('answers 407 with its realm to a wrong password and to no credentials', async () => {
    const wrong = { ...credentialsFor(newSessionId(templates)) };
    wrong.password = wrong.password.replace(account.password, 'notThePassw0rd');
    for (const kind of ['connect', 'http'] as const) {
      for (const credentials of [wrong, undefined]) {
        const answer = await ask(vendor, kind, credentials);
        expect(answer.status).toBe(407);
        expect(answer.headers['proxy-authenticate']).toBe(`Basic realm="${FAKE_VENDOR_REALM}"`);
      }
    }
    // The right account still works: the 407s were about the password.
    expect((await ask(vendor, 'connect', credentialsFor(newSessionId(templates)))).status).toBe(200);
  });

  it('answers a lifetime past the maximum, or a session id with forbidden characters, with a vendor-style 400', async () => {
    const tooLong = credentialsFor(newSessionId(templates), max + (preset === 'oxylabs' ? 60 : 86_400));
    for (const kind of ['connect', 'http'] as const) {
      const answer = await ask(vendor, kind, tooLong);
      expect(answer.status).toBe(400);
      expect(answer.headers['x-error-description']).toMatch(/lifetime over/);
    }
    // A valid id, then the same with its last character one the vendor forbids.
    const valid = templates.session.alphabet[0]!.repeat(templates.session.length);
    const invalid = `${valid.slice(0, -1)}!`;
    const good = credentialsFor(valid);
    const forbidden = {
      username: good.username.replace(valid, invalid),
      password: good.password.replace(valid, invalid),
    };
    expect(`${forbidden.username}:${forbidden.password}`).toContain(invalid);
    const answer = await ask(vendor, 'http', forbidden);
    expect(answer.status).toBe(400);
    expect(answer.headers['x-error-description']).toMatch(/bad session id/);
    expect(answer.headers['proxy-authenticate']).toBeUndefined();
  });

  it('gives a session past its lifetime a new exit address', async () => {
    const session = newSessionId(templates);
    const credentials = credentialsFor(session, 60);
    // IPRoyal writes seconds: 1 s. Oxylabs writes minutes: its shortest is 60 s, too long to wait,
    // so the same wait is shown with a vendor whose default lifetime (no lifetime sent) is 1 s.
    const [subject, sent] =
      preset === 'iproyal'
        ? [vendor, credentialsFor(session, 1)]
        : [
            await startFakeVendor({
              templates: { ...templates, username: 'customer-{user}-sessid-{session}' },
              account,
              lifetimeSeconds: 1,
            }),
            {
              username: renderCredentials(
                { ...templates, username: 'customer-{user}-sessid-{session}' },
                { account, params: {}, session, lifetimeSeconds: 60 },
              ).username,
              password: credentials.password,
            },
          ];
    try {
      const first = await exitAddress(subject, sent);
      const deadline = Date.now() + 15_000;
      let now = first;
      while (now === first) {
        if (Date.now() > deadline) throw new Error(`session ${session} kept ${first} past its lifetime`);
        await new Promise((r) => setTimeout(r, 100));
        now = await exitAddress(subject, sent);
      }
      expect(now).toMatch(/^127\.91\./);
      const record = subject.sessions().find((s) => s.id === session);
      expect(record?.previousAddresses).toContain(first);
      expect(record?.address).toBe(now);
    } finally {
      if (subject !== vendor) await subject.close();
    }
  });
});

describe('the fake vendor without a session', () => {
  it('rotates: every request gets a fresh exit address', async () => {
    const templates: VendorTemplates = {
      username: '{user}[-session-{session}]',
      password: '{password}',
      session: PRESETS.decodo.session,
    };
    const account = { username: 'rotating', password: 'rotPassw0rd' };
    const vendor = await startFakeVendor({ templates, account, lifetimeSeconds: 600 });
    try {
      const a = await exitAddress(vendor, account);
      const b = await exitAddress(vendor, account, 'connect');
      expect(a).not.toBe(b);
      const sticky = { ...account, username: `${account.username}-session-abc123` };
      expect(await exitAddress(vendor, sticky)).toBe(await exitAddress(vendor, sticky, 'connect'));
      expect(vendor.requests().filter((r) => r.session === undefined)).toHaveLength(2);
    } finally {
      await vendor.close();
    }
  });
});

describe('the fake proxy list', () => {
  it('answers 304 to a matching If-None-Match or If-Modified-Since, 200 after a change, and fails on demand', async () => {
    const list = await startFakeProxyList({
      format: 'lines',
      entries: [
        { host: '127.0.0.2', port: 3128 },
        { host: '127.0.0.3', port: 3128, username: 'u', password: 'p' },
      ],
    });
    const get = async (headers: Record<string, string> = {}) => {
      const res = await fetch(list.url, { headers });
      return {
        status: res.status,
        etag: res.headers.get('etag'),
        lastModified: res.headers.get('last-modified'),
        body: await res.text(),
      };
    };
    try {
      const first = await get();
      expect(first.status).toBe(200);
      expect(first.body).toBe('127.0.0.2:3128\n127.0.0.3:3128:u:p\n');
      expect(first.etag).toBe(list.etag());
      expect((await get({ 'if-none-match': first.etag! })).status).toBe(304);
      expect((await get({ 'if-modified-since': first.lastModified! })).status).toBe(304);
      // If-None-Match decides when both are sent.
      expect(
        (await get({ 'if-none-match': '"other"', 'if-modified-since': first.lastModified! })).status,
      ).toBe(200);

      list.setEntries([{ host: '127.0.0.4', port: 8080 }]);
      const changed = await get({ 'if-none-match': first.etag! });
      expect(changed.status).toBe(200);
      expect(changed.body).toBe('127.0.0.4:8080\n');
      expect(changed.etag).not.toBe(first.etag);
      expect((await get({ 'if-modified-since': first.lastModified! })).status).toBe(200);

      list.failWith(500);
      expect((await get({ 'if-none-match': changed.etag! })).status).toBe(500);
      list.serveGarbage();
      const garbage = await get({ 'if-none-match': changed.etag! });
      expect(garbage.status).toBe(200);
      expect(garbage.body).not.toContain('127.0.0.4');
      list.recover();
      expect((await get({ 'if-none-match': changed.etag! })).status).toBe(304);

      expect(list.requests().map((r) => [r.conditional, r.status])).toEqual([
        [false, 200],
        [true, 304],
        [true, 304],
        [true, 200],
        [true, 200],
        [true, 200],
        [true, 500],
        [true, 200],
        [true, 304],
      ]);
    } finally {
      await list.close();
    }
  });

  it('serves JSON', async () => {
    const entries = [{ host: '127.0.0.5', port: 1080, username: 'a', password: 'b' }];
    const list = await startFakeProxyList({ format: 'json', entries });
    try {
      const res = await fetch(list.url);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(await res.json()).toEqual(entries);
    } finally {
      await list.close();
    }
  });
});
