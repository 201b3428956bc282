/**
 * Drives the real lease API over loopback HTTP and checks every response it
 * receives against the server's own /openapi.json.
 */
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { pino, type Logger } from 'pino';
import { Registry } from 'prom-client';
import { expect } from 'vitest';
import { createApi, type CreateApiOptions } from '../../api/app.js';
import { MemoryLeaseStore, type Clock, type LeaseStore } from '../../api/lease-store.js';
import { RedisLeaseStore } from '../../api/redis-lease-store.js';
import { API_VERSION } from '../../kube/coordinates.js';
import { createStaticProxyCatalog, type ProxyCatalog } from '../../api/proxy-catalog.js';
import { serveApi, type RunningServer } from '../../api/server.js';
import type { Proxy, ProxySpec, ProxySpecInput, ProxyStatus } from '../../resources/proxy-schema.js';

// ajv-formats is CommonJS; under NodeNext its default export is the module object.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

export class ManualClock implements Clock {
  constructor(private t = Date.UTC(2026, 7, 11, 22, 0, 0)) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

export interface ProxyFixture {
  name: string;
  namespace?: string;
  attributes?: Record<string, string>;
  healthy?: boolean;
  ip?: string;
  latencyMillis?: number;
  maxLeases?: number;
  phase?: ProxyStatus['phase'];
  deleting?: boolean;
  external?: { host: string; port?: number };
}

/** A Proxy as the apiserver would serve it. */
export function proxy(f: ProxyFixture): Proxy {
  const spec: ProxySpecInput = f.external
    ? { mode: 'External', endpoint: { host: f.external.host, port: f.external.port ?? 3128 } }
    : { mode: 'Managed', provider: 'local', port: 3128 };
  if (f.attributes) spec.attributes = f.attributes;
  spec.maxLeases = f.maxLeases ?? 5;
  const status: ProxyStatus = {
    phase: f.phase ?? (f.healthy === false ? 'Unhealthy' : 'Ready'),
    latencyMillis: f.latencyMillis ?? 10,
    conditions: [
      {
        type: 'Healthy',
        status: f.healthy === false ? 'False' : 'True',
        lastTransitionTime: '2026-08-11T21:00:00Z',
        reason: 'Probe',
        message: '',
      },
    ],
  };
  const ip = f.ip ?? '10.0.0.1';
  if (!f.external && ip !== '') status.ip = ip;
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: {
      name: f.name,
      namespace: f.namespace ?? 'default',
      ...(f.deleting ? { deletionTimestamp: '2026-08-11T21:30:00Z' } : {}),
    },
    spec: spec as ProxySpec,
    status,
  };
}

export interface CapturedLogs {
  lines: Array<Record<string, unknown>>;
  logger: Logger;
}

export function captureLogs(): CapturedLogs {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n'))
        if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, logger: pino({ level: 'info' }, sink) };
}

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  /** Parsed body when the response is JSON. */
  body: Record<string, unknown>;
}

export interface CallOptions {
  token?: string | null;
  body?: unknown;
  /** Sent as-is instead of JSON-encoding `body`. */
  raw?: string | Uint8Array | ReadableStream<Uint8Array>;
  headers?: Record<string, string>;
}

/** Which lease store a test API runs on; the black-box suites run on both. */
export type StoreKind = 'memory' | 'redis';
export const STORE_KINDS: readonly StoreKind[] = ['memory', 'redis'];

export interface TestApi {
  url: string;
  store: LeaseStore;
  clock: ManualClock;
  registry: Registry;
  logs: CapturedLogs;
  token: string;
  call(method: string, path: string, options?: CallOptions): Promise<Reply>;
  close(): Promise<void>;
}

export interface StartOptions extends Partial<Omit<CreateApiOptions, 'catalog'>> {
  proxies?: Proxy[];
  catalog?: ProxyCatalog;
  cooldownMs?: number;
  /** 'redis' needs `redisUrl`; each such API gets its own key prefix, so tests can share one server. */
  store?: StoreKind;
  redisUrl?: string;
  /** Key prefix in Redis (default: a fresh one); two APIs given the same one share their lease state. */
  redisPrefix?: string;
  clock?: ManualClock;
}

export async function startTestApi(options: StartOptions = {}): Promise<TestApi> {
  const clock = options.clock ?? new ManualClock();
  const registry = new Registry();
  const logs = captureLogs();
  const cooldownMs = options.cooldownMs ?? 15 * 60_000;
  let store: LeaseStore;
  if (options.store === 'redis') {
    if (!options.redisUrl) throw new Error('startTestApi: store redis needs redisUrl');
    const redisStore = new RedisLeaseStore({
      url: options.redisUrl,
      clock,
      cooldownMs,
      logger: logs.logger,
      prefix: options.redisPrefix ?? `test-${randomUUID()}:`,
    });
    await redisStore.connect();
    store = redisStore;
  } else {
    store = new MemoryLeaseStore({ clock, cooldownMs });
  }
  const token = options.token ?? 'test-token';
  const app = createApi({
    catalog: options.catalog ?? createStaticProxyCatalog(options.proxies ?? []),
    leaseStore: options.leaseStore ?? store,
    token,
    logger: logs.logger,
    registry,
    processMetrics: options.processMetrics ?? false,
    ...(options.maxLeaseTtlSeconds ? { maxLeaseTtlSeconds: options.maxLeaseTtlSeconds } : {}),
    ...(options.traceHook ? { traceHook: options.traceHook } : {}),
    ...(options.serveMetrics !== undefined ? { serveMetrics: options.serveMetrics } : {}),
  });
  const server: RunningServer = await serveApi(app, { host: '127.0.0.1', port: 0, shutdownGraceMs: 1000 });
  let validator: OpenApiValidator | undefined;

  async function request(method: string, path: string, o: CallOptions = {}): Promise<Reply> {
    const headers: Record<string, string> = { ...o.headers };
    const auth = o.token === undefined ? token : o.token;
    if (auth) headers.Authorization = `Bearer ${auth}`;
    let body: RequestInit['body'];
    const bodyless = method === 'GET' || method === 'HEAD';
    if (bodyless) body = undefined;
    else if (o.raw !== undefined) body = o.raw as RequestInit['body'];
    else if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers['Content-Type'] = 'application/json';
    }
    const init: RequestInit & { duplex?: 'half' } = { method, headers };
    if (body !== undefined) init.body = body;
    if (o.raw instanceof ReadableStream) init.duplex = 'half';
    const res = await fetch(server.url + path, init);
    const text = await res.text();
    const isJson = res.headers.get('content-type') === 'application/json';
    return {
      status: res.status,
      headers: res.headers,
      text,
      body: isJson ? (JSON.parse(text) as Record<string, unknown>) : {},
    };
  }

  return {
    url: server.url,
    store,
    clock,
    registry,
    logs,
    token,
    async call(method, path, o) {
      const reply = await request(method, path, o);
      validator ??= new OpenApiValidator((await request('GET', '/openapi.json', { token })).body);
      validator.check(method, path, reply);
      return reply;
    },
    async close() {
      await server.close();
      await store.close?.();
    },
  };
}

/**
 * Validates a response against the operation and status in the document;
 * statuses the document does not list for that operation (404 for unknown
 * routes, 405) must still be the documented error envelope.
 */
export class OpenApiValidator {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true });
  private readonly cache = new Map<string, ValidateFunction>();
  private readonly paths: Array<{ template: string; pattern: RegExp }>;

  constructor(readonly doc: Record<string, unknown>) {
    addFormats(this.ajv);
    this.ajv.addSchema(doc, 'openapi');
    this.paths = Object.keys(doc.paths as object).map((template) => ({
      template,
      pattern: new RegExp(`^${template.replace(/[.]/g, '\\.').replace(/\{[^}]+\}/g, '[^/]+')}$`),
    }));
  }

  /** Compiles every component schema: a broken one fails here rather than in a later lookup. */
  compileAll(): string[] {
    const names = Object.keys((this.doc.components as { schemas: object }).schemas);
    for (const name of names) this.schema(`openapi#/components/schemas/${name}`);
    return names;
  }

  check(method: string, fullPath: string, reply: Reply): void {
    const path = fullPath.split('?')[0]!;
    const op = this.paths.find((p) => p.pattern.test(path));
    // HEAD is answered as GET without a body.
    const lookup = method === 'HEAD' ? 'get' : method.toLowerCase();
    const operation =
      op && (this.doc.paths as Record<string, Record<string, unknown>>)[op.template]?.[lookup];
    const where = `${method} ${fullPath} -> ${reply.status}`;
    if (!operation) {
      expect([404, 405, 401], `${where}: undocumented route answered ${reply.status}`).toContain(
        reply.status,
      );
      this.validate('openapi#/components/schemas/Error', reply.body, where);
      return;
    }
    const responses = (operation as { responses: Record<string, { content?: Record<string, unknown> }> })
      .responses;
    const documented = responses[String(reply.status)];
    expect(documented, `${where}: status not in the OpenAPI document`).toBeDefined();
    const content = documented!.content;
    if (method === 'HEAD') {
      expect(reply.text, `${where}: HEAD with a body`).toBe('');
      return;
    }
    if (!content) {
      expect(reply.text, `${where}: documented without a body`).toBe('');
      return;
    }
    const type = reply.headers.get('content-type') ?? '';
    const media = Object.keys(content).find((m) => type.startsWith(m));
    expect(media, `${where}: content type ${type} not documented`).toBeDefined();
    if (media === 'application/json') {
      const pointer = (content[media] as { schema: { $ref?: string } }).schema.$ref;
      if (pointer) this.validate(`openapi${pointer}`, reply.body, where);
    }
  }

  private validate(ref: string, body: unknown, where: string): void {
    const validate = this.schema(ref);
    const ok = validate(body);
    expect(
      ok,
      `${where}: response does not match ${ref}: ${this.ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`,
    ).toBe(true);
  }

  private schema(ref: string): ValidateFunction {
    let fn = this.cache.get(ref);
    if (!fn) {
      fn = this.ajv.getSchema(ref);
      if (!fn) throw new Error(`no schema at ${ref}`);
      this.cache.set(ref, fn);
    }
    return fn;
  }
}

/** Reads one sample from a Prometheus text exposition; undefined when absent. */
export function sample(exposition: string, series: string): number | undefined {
  for (const line of exposition.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}
