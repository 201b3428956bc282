/**
 * The lease API's edges on the real server: auth, bad input (each gets its
 * documented 4xx and changes nothing), limits, errors, metrics, tracing
 * hook and the OpenAPI document.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createStaticProxyCatalog, type ProxyCatalog } from '../../api/proxy-catalog.js';
import type { TraceRequest } from '../../tracing/http.js';
import {
  OpenApiValidator,
  proxy,
  sample,
  startTestApi,
  type StartOptions,
  type TestApi,
} from './api-helpers.js';

const open: TestApi[] = [];
async function start(options: StartOptions = {}): Promise<TestApi> {
  const api = await startTestApi(options);
  open.push(api);
  return api;
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((a) => a.close()));
});

const fleet = () => [proxy({ name: 'p1', attributes: { geo: 'eu' }, maxLeases: 2 })];

describe('authentication', () => {
  it.each([
    ['no header', { token: null }],
    ['a wrong token', { token: 'wrong' }],
    ['a token that only shares a prefix', { token: 'test-token-and-more' }],
    ['a lowercase scheme', { token: null, headers: { Authorization: 'bearer test-token' } }],
    ['no space after the scheme', { token: null, headers: { Authorization: 'Bearertest-token' } }],
  ])('refuses %s with 401 unauthorized', async (_label, options) => {
    const api = await start({ proxies: fleet() });
    for (const [method, path] of [
      ['GET', '/v1/proxies'],
      ['POST', '/v1/leases'],
      ['DELETE', '/v1/leases/x'],
      ['POST', '/v1/leases/x/report'],
      ['GET', '/openapi.json'],
      ['GET', '/no/such/route'],
    ] as const) {
      const r = await api.call(method, path, { ...options, body: {} });
      expect(r.status, `${method} ${path}`).toBe(401);
      expect(r.body).toEqual({ error: 'unauthorized', message: 'missing or invalid bearer token' });
    }
    expect((await api.store.activeCounts()).size).toBe(0);
  });

  it('accepts the right token and exempts /healthz and /metrics', async () => {
    const api = await start({ proxies: fleet() });
    expect((await api.call('GET', '/v1/proxies')).status).toBe(200);
    const health = await api.call('GET', '/healthz', { token: null });
    expect(health.status).toBe(200);
    expect(health.text).toBe('ok\n');
    expect((await api.call('HEAD', '/healthz', { token: null })).status).toBe(200);
    expect((await api.call('GET', '/metrics', { token: null })).status).toBe(200);
  });

  it('serves without authentication when the token is empty, and says so loudly at start', async () => {
    const api = await start({ proxies: fleet(), token: '' });
    expect((await api.call('GET', '/v1/proxies', { token: null })).status).toBe(200);
    const warning = api.logs.lines.find(
      (l) => l.level === 40 && /WITHOUT AUTHENTICATION/.test(String(l.msg)),
    );
    expect(warning).toBeDefined();
    // The document then declares no security, and no 401s: nothing to send.
    const doc = (await api.call('GET', '/openapi.json', { token: null })).body;
    expect(doc).not.toHaveProperty('security');
    expect(doc.components).not.toHaveProperty('securitySchemes');
    expect(JSON.stringify(doc.paths)).not.toContain('"401"');
  });

  it('declares bearer security in the document when a token is configured', async () => {
    const api = await start({ proxies: fleet() });
    const doc = (await api.call('GET', '/openapi.json')).body;
    expect(doc.security).toEqual([{ bearer: [] }]);
    expect(doc.components).toMatchObject({ securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } });
  });

  it('with metrics served elsewhere (--metrics-addr), neither serves nor documents /metrics', async () => {
    const api = await start({ proxies: fleet(), serveMetrics: false });
    for (const token of [null, undefined]) {
      const r = await api.call('GET', '/metrics', { token });
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ error: 'not_found' });
    }
    expect(Object.keys((await api.call('GET', '/openapi.json')).body.paths as object)).not.toContain(
      '/metrics',
    );
  });
});

describe('bad input changes nothing', () => {
  const big = JSON.stringify({ target: 'x'.repeat(64 * 1024) });
  const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;

  it.each([
    ['malformed JSON', '{not json', 'invalid_body'],
    ['an empty body', '', 'invalid_body'],
    ['a body of only whitespace', ' \n', 'invalid_body'],
    ['a truncated body', '{"ttlSeconds":60', 'invalid_body'],
    ['an array body', '[]', 'invalid_body'],
    ['a string body', '"hello"', 'invalid_body'],
    ['ttlSeconds as a string', '{"ttlSeconds":"300"}', 'invalid_body'],
    ['a fractional ttlSeconds', '{"ttlSeconds":1.5}', 'invalid_body'],
    // Go decodes an int64 only from an integer literal: exponents and fractions are type errors.
    ['a TTL with an exponent', '{"ttlSeconds":1e2}', 'invalid_body'],
    ['a TTL written with a fraction', '{"ttlSeconds":100.0}', 'invalid_body'],
    ['a huge TTL', '{"ttlSeconds":1e30}', 'invalid_body'],
    ['a TTL past int64', '{"ttlSeconds":9223372036854775808}', 'invalid_body'],
    ['a bad TTL in a repeated field', '{"ttlSeconds":"x","TTLSeconds":5}', 'invalid_body'],
    ['a selector value that is not a string', '{"selector":{"geo":1}}', 'invalid_body'],
    ['a selector that is a list', '{"selector":["geo"]}', 'invalid_body'],
    ['a numeric target', '{"target":5}', 'invalid_body'],
    ['a bad type and a bad TTL together', '{"target":5,"ttlSeconds":-1}', 'invalid_body'],
    ['deeply nested JSON', deep, 'invalid_body'],
    ['a body over 64 KiB', big, 'invalid_body'],
    ['a negative TTL', '{"ttlSeconds":-5}', 'invalid_ttl'],
    ['a TTL above --max-lease-ttl', '{"ttlSeconds":3601}', 'invalid_ttl'],
    ['a TTL past the safe integers', '{"ttlSeconds":9007199254740993}', 'invalid_ttl'],
    ['the largest int64 TTL', '{"ttlSeconds":9223372036854775807}', 'invalid_ttl'],
    ['the smallest int64 TTL', '{"ttlSeconds":-9223372036854775808}', 'invalid_ttl'],
    ['a case-folded field name with a bad TTL', '{"TTLSECONDS":-1}', 'invalid_ttl'],
  ])('POST /v1/leases with %s (%s) is 400 %s', async (_label, raw, code) => {
    const api = await start({ proxies: fleet() });
    const r = await api.call('POST', '/v1/leases', { raw, headers: { 'Content-Type': 'application/json' } });
    expect(r.status).toBe(400);
    expect(r.body.error).toBe(code);
    if (code === 'invalid_ttl') expect(r.body.message).toBe('ttlSeconds must be between 1 and 3600');
    expect((await api.store.activeCounts()).size).toBe(0);
    const metrics = (await api.call('GET', '/metrics')).text;
    expect(sample(metrics, 'proxy_operator_lease_requests_total{outcome="granted"}')).toBe(0);
    expect(sample(metrics, 'proxy_operator_lease_requests_total{outcome="no_match"}')).toBe(0);
    // And the server still grants afterwards.
    expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(201);
  });

  it.each([
    ['a second value after the first', '{"ttlSeconds":60} {"ttlSeconds":"x"}', 60],
    ['junk after the first value', '{"ttlSeconds":60}junk', 60],
    ['a null body', 'null', 300],
    ['null followed by junk', 'null {', 300],
    ['a case-folded field name', '{"TTLSeconds":60}', 60],
    ['a field name folded through U+017F', '{"ttlſeconds":60}', 60],
    ['an escaped field name', '{"ttl\\u0053econds":60}', 60],
    ['a repeated field (the last wins)', '{"ttlSeconds":60,"TTLSECONDS":70}', 70],
    ['a null after a value (ignored)', '{"ttlSeconds":60,"ttlSeconds":null}', 60],
    ['minus zero', '{"ttlSeconds":-0}', 300],
  ])('POST /v1/leases accepts %s, as the seed decoder did', async (_label, raw, ttl) => {
    const api = await start({ proxies: fleet() });
    const r = await api.call('POST', '/v1/leases', { raw });
    expect(r.status).toBe(201);
    expect(r.body.ttlSeconds).toBe(ttl);
  });

  it("reports Go's decoder messages for the errors a crawler is likely to meet", async () => {
    const api = await start({ proxies: fleet() });
    const cases: Array<[string, string]> = [
      ['', 'EOF'],
      ['{"ttlSeconds":60', 'unexpected EOF'],
      ['[]', 'json: cannot unmarshal array into Go value of type discovery.leaseRequest'],
      [
        '{"ttlSeconds":1e2}',
        'json: cannot unmarshal number 1e2 into Go struct field leaseRequest.ttlSeconds of type int64',
      ],
      [
        '{"selector":{"geo":1}}',
        'json: cannot unmarshal number into Go struct field leaseRequest.selector of type string',
      ],
      [JSON.stringify({ target: 'x'.repeat(64 * 1024) }), 'http: request body too large'],
    ];
    for (const [raw, message] of cases) {
      const r = await api.call('POST', '/v1/leases', { raw });
      expect(r.body, raw.slice(0, 40)).toEqual({ error: 'invalid_body', message });
    }
  });

  it('accepts a body of exactly 64 KiB and rejects a streamed body one byte larger', async () => {
    const api = await start({ proxies: fleet() });
    const exact = JSON.stringify({ target: 'x'.repeat(64 * 1024 - '{"target":""}'.length) });
    expect(Buffer.byteLength(exact)).toBe(64 * 1024);
    expect((await api.call('POST', '/v1/leases', { raw: exact })).status).toBe(201);

    // No Content-Length: the limit must hold for a chunked body too.
    const chunks = [exact.slice(0, 40_000), `${exact.slice(40_000)} `];
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.shift();
        if (next === undefined) controller.close();
        else controller.enqueue(new TextEncoder().encode(next));
      },
    });
    const r = await api.call('POST', '/v1/leases', { raw: stream });
    expect(r.status).toBe(400);
    expect(r.body.error).toBe('invalid_body');
    expect((await api.store.activeCounts()).get('default/p1')).toBe(1);
  });

  it('does not let a "__proto__" selector key widen the match', async () => {
    const api = await start({ proxies: fleet() });
    const r = await api.call('POST', '/v1/leases', { raw: '{"selector":{"__proto__":"x"}}' });
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ considered: 0 });
  });

  it.each([
    ['an unknown result', '{"result":"throttled"}', 400, 'invalid_result'],
    ['no result', '{}', 400, 'invalid_result'],
    ['a null body', 'null', 400, 'invalid_result'],
    ['a null body followed by junk', 'null x', 400, 'invalid_result'],
    ['a null result', '{"result":null}', 400, 'invalid_result'],
    ['a result of the wrong case', '{"result":"OK"}', 400, 'invalid_result'],
    ['a numeric result', '{"result":1}', 400, 'invalid_body'],
    ['a numeric target', '{"result":"banned","target":1}', 400, 'invalid_body'],
    ['malformed JSON', '{"result":', 400, 'invalid_body'],
    ['an empty body', '', 400, 'invalid_body'],
    ['an array body', '[]', 400, 'invalid_body'],
    [
      'a body over 64 KiB',
      JSON.stringify({ result: 'banned', target: 'x'.repeat(70_000) }),
      400,
      'invalid_body',
    ],
  ])('POST /report with %s (%s) is %i %s and records no cooldown', async (_label, raw, status, code) => {
    const api = await start({ proxies: fleet() });
    const lease = await api.call('POST', '/v1/leases', { body: {} });
    const r = await api.call('POST', `/v1/leases/${String(lease.body.leaseID)}/report`, { raw });
    expect(r.status).toBe(status);
    expect(r.body.error).toBe(code);
    expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(201);
  });

  it.each([
    ['{"result":"throttled"}', '"throttled"'],
    ['null', '""'],
    ['{"result":"\\u0001é\\u2028\\""}', '"\\x01é\\u2028\\""'],
  ])('echoes the bad result in %s the way Go quoted it', async (raw, quoted) => {
    const api = await start({ proxies: fleet() });
    const r = await api.call('POST', '/v1/leases/never-issued/report', { raw });
    expect(r.body).toEqual({
      error: 'invalid_result',
      message: `result must be one of ok, rate_limited, banned; got ${quoted}`,
    });
  });

  it.each([
    ['a case-folded field name', '{"RESULT":"banned","Target":"a.com"}'],
    ['a second value after the first', '{"result":"banned","target":"a.com"} {"result":1}'],
  ])('records a report with %s, as the seed decoder did', async (_label, raw) => {
    const api = await start({ proxies: fleet() });
    const lease = await api.call('POST', '/v1/leases', { body: { target: 'a.com' } });
    const r = await api.call('POST', `/v1/leases/${String(lease.body.leaseID)}/report`, { raw });
    expect(r.status).toBe(204);
    const blocked = await api.call('POST', '/v1/leases', { body: { target: 'a.com' } });
    expect(blocked.status).toBe(409);
    expect(blocked.body).toMatchObject({ inCooldown: 1 });
  });

  it('checks the body before the lease id, as the seed did', async () => {
    const api = await start({ proxies: fleet() });
    expect(
      (await api.call('POST', '/v1/leases/never-issued/report', { raw: '{"result":"nope"}' })).body.error,
    ).toBe('invalid_result');
    const unknown = await api.call('POST', '/v1/leases/never-issued/report', { body: { result: 'banned' } });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'unknown_lease', message: 'no such lease' });
  });
});

describe('routing and failures', () => {
  it('answers unknown routes 404 and wrong methods 405 in the error envelope', async () => {
    const api = await start({ proxies: fleet() });
    const missing = await api.call('GET', '/v2/proxies');
    expect(missing.status).toBe(404);
    expect(missing.body.error).toBe('not_found');
    const wrong = await api.call('GET', '/v1/leases');
    expect(wrong.status).toBe(405);
    expect(wrong.body.error).toBe('method_not_allowed');
    expect(wrong.headers.get('allow')).toBe('POST');
    expect((await api.call('PUT', '/v1/leases/abc')).headers.get('allow')).toBe('DELETE');
  });

  it('turns a failing handler into a 500 envelope and a log line, and keeps serving', async () => {
    let fail = true;
    const healthy = proxy({ name: 'p1' });
    const inner = createStaticProxyCatalog([healthy]);
    const flaky: ProxyCatalog = {
      synced: () => true,
      list() {
        if (fail) throw new Error('catalog exploded');
        return inner.list();
      },
    };
    const api = await start({ catalog: flaky });
    const r = await api.call('POST', '/v1/leases', { body: {} });
    expect(r.status).toBe(500);
    expect(r.body).toEqual({ error: 'internal', message: 'internal server error' });
    const line = api.logs.lines.find((l) => l.msg === 'lease API handler failed');
    expect((line?.err as { message?: string } | undefined)?.message).toBe('catalog exploded');
    expect(line?.path).toBe('/v1/leases');

    fail = false;
    expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(201);
  });

  it('answers 503 until the proxy cache has synced, rather than an empty fleet', async () => {
    const inner = createStaticProxyCatalog([proxy({ name: 'p1' })]);
    let synced = false;
    const api = await start({ catalog: { list: () => inner.list(), synced: () => synced } });
    for (const [method, path] of [
      ['GET', '/v1/proxies'],
      ['POST', '/v1/leases'],
    ] as const) {
      const r = await api.call(method, path, { body: {} });
      expect(r.status).toBe(503);
      expect(r.body.error).toBe('unavailable');
    }
    expect(
      sample((await api.call('GET', '/metrics')).text, 'proxy_operator_proxies{phase="Ready"}'),
    ).toBeUndefined();
    synced = true;
    expect((await api.call('GET', '/v1/proxies')).body.count).toBe(1);
  });
});

describe('observability', () => {
  it('exposes lease counters, active leases, proxies by phase and process metrics', async () => {
    const api = await start({
      processMetrics: true,
      proxies: [
        proxy({ name: 'a' }),
        proxy({ name: 'b' }),
        proxy({ name: 'c', healthy: false }),
        proxy({ name: 'd', phase: 'Deleting', deleting: true }),
      ],
    });
    await api.call('POST', '/v1/leases', { body: {} });
    const r = await api.call('GET', '/metrics', { token: null });
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    const m = r.text;
    expect(sample(m, 'proxy_operator_lease_requests_total{outcome="granted"}')).toBe(1);
    expect(sample(m, 'proxy_operator_leases_active')).toBe(1);
    expect(sample(m, 'proxy_operator_proxies{phase="Ready"}')).toBe(2);
    expect(sample(m, 'proxy_operator_proxies{phase="Unhealthy"}')).toBe(1);
    expect(sample(m, 'proxy_operator_proxies{phase="Deleting"}')).toBe(1);
    expect(sample(m, 'proxy_operator_proxies{phase="Failed"}')).toBe(0);
    expect(m).toMatch(/^process_cpu_user_seconds_total /m);
    expect(m).toMatch(/^nodejs_heap_size_used_bytes /m);
  });

  it('hands the incoming traceparent to the trace hook and logs the trace id', async () => {
    const seen: Array<{ request: TraceRequest; status?: number }> = [];
    const api = await start({
      proxies: fleet(),
      traceHook(request) {
        const entry: { request: TraceRequest; status?: number } = { request };
        seen.push(entry);
        return { end: (status) => void (entry.status = status) };
      },
    });
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await api.call('GET', '/v1/proxies?healthy=bogus', { headers: { traceparent } });
    const entry = seen.find((e) => e.request.path === '/v1/proxies');
    expect(entry?.request.trace).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      parentId: '00f067aa0ba902b7',
      flags: 1,
    });
    expect(entry?.status).toBe(400);
    const line = api.logs.lines.find((l) => l.msg === 'request' && l.path === '/v1/proxies');
    expect(line).toMatchObject({ method: 'GET', status: 400, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
  });

  it('serves an OpenAPI 3.1 document whose schemas compile and describe the contract', async () => {
    const api = await start({ proxies: fleet(), maxLeaseTtlSeconds: 7200 });
    const r = await api.call('GET', '/openapi.json');
    expect(r.body.openapi).toBe('3.1.0');
    const validator = new OpenApiValidator(r.body);
    expect(validator.compileAll()).toEqual(
      expect.arrayContaining([
        'Error',
        'Proxy',
        'ProxyList',
        'Lease',
        'NoMatch',
        'LeaseRequest',
        'ReportRequest',
      ]),
    );
    const schemas = (r.body.components as { schemas: Record<string, Record<string, unknown>> }).schemas;
    const ttl = JSON.stringify((schemas.LeaseRequest as { anyOf: unknown[] }).anyOf[0]);
    expect(ttl).toContain('"maximum":7200');
    expect(Object.keys(r.body.paths as object).sort()).toEqual(
      [
        '/healthz',
        '/metrics',
        '/openapi.json',
        '/v1/leases',
        '/v1/leases/{id}',
        '/v1/leases/{id}/report',
        '/v1/proxies',
      ].sort(),
    );
  });

  it('rejects a response that strays from the document (the validator can fail)', async () => {
    const api = await start({ proxies: fleet() });
    const validator = new OpenApiValidator((await api.call('GET', '/openapi.json')).body);
    const lease = await api.call('POST', '/v1/leases', { body: {} });
    const tampered = { ...lease, body: { ...lease.body, extra: true } };
    expect(() => validator.check('POST', '/v1/leases', tampered)).toThrow(/does not match/);
    const wrongType = { ...lease, body: { ...lease.body, ttlSeconds: '300' } };
    expect(() => validator.check('POST', '/v1/leases', wrongType)).toThrow(/does not match/);
  });
});
