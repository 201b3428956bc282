/**
 * A real trace backend for tests: Jaeger (built from the Go module proxy by
 * infra/scripts/build-jaeger.sh, cached), queried through its HTTP query
 * API. Spans come back flattened with their parent ids and tags.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startJaeger } from './jaeger.js';
import { ensureJaeger } from './tools.js';

export interface TestSpan {
  traceId: string;
  spanId: string;
  /** The CHILD_OF reference; undefined for a root span. */
  parentId: string | undefined;
  name: string;
  service: string;
  tags: Record<string, string | number | boolean>;
}

export interface TraceBackend {
  /** For OTEL_EXPORTER_OTLP_ENDPOINT. */
  otlpEndpoint: string;
  /** Every span of every trace the backend holds for `service` (Jaeger's /api/traces). */
  spans(service: string): Promise<TestSpan[]>;
  /** The spans of one trace. */
  trace(traceId: string): Promise<TestSpan[]>;
  stop(): Promise<void>;
}

interface JaegerTrace {
  traceID: string;
  spans: Array<{
    traceID: string;
    spanID: string;
    operationName: string;
    processID: string;
    references?: Array<{ refType: string; spanID: string }>;
    tags?: Array<{ key: string; value: string | number | boolean }>;
  }>;
  processes: Record<string, { serviceName: string }>;
}

function flatten(traces: JaegerTrace[]): TestSpan[] {
  return traces.flatMap((t) =>
    t.spans.map((s) => ({
      traceId: s.traceID,
      spanId: s.spanID,
      parentId: s.references?.find((r) => r.refType === 'CHILD_OF')?.spanID,
      name: s.operationName,
      service: t.processes[s.processID]?.serviceName ?? '',
      tags: Object.fromEntries((s.tags ?? []).map((tag) => [tag.key, tag.value])),
    })),
  );
}

async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return (await res.json()) as T;
}

export async function startJaegerBackend(): Promise<TraceBackend> {
  const bin = await ensureJaeger();
  const dir = mkdtempSync(join(tmpdir(), 'ep-jaeger-'));
  const jaeger = await startJaeger({ bin, dataDir: dir });
  return {
    otlpEndpoint: jaeger.otlpEndpoint,
    async spans(service) {
      const body = await getJson<{ data: JaegerTrace[] | null }>(
        `${jaeger.queryUrl}/api/traces?service=${encodeURIComponent(service)}&limit=1000&lookback=1h`,
      );
      return flatten(body.data ?? []);
    },
    async trace(traceId) {
      const res = await fetch(`${jaeger.queryUrl}/api/traces/${traceId}`, {
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status === 404) return [];
      if (!res.ok) throw new Error(`trace ${traceId}: HTTP ${res.status}`);
      return flatten(((await res.json()) as { data: JaegerTrace[] | null }).data ?? []);
    },
    async stop() {
      await jaeger.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
interface OtlpJsonRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: Array<{ key: string; value: OtlpValue }> };
    scopeSpans?: Array<{
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind?: number;
        attributes?: Array<{ key: string; value: OtlpValue }>;
      }>;
    }>;
  }>;
}

const KIND_NAMES: Record<number, string> = {
  1: 'internal',
  2: 'server',
  3: 'client',
  4: 'producer',
  5: 'consumer',
};

function plain(v: OtlpValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  return v.doubleValue ?? '';
}

/**
 * The fallback backend, for a machine where Jaeger cannot be built: an
 * OTLP/HTTP receiver of the JSON encoding (processes must export with
 * OTEL_EXPORTER_OTLP_PROTOCOL=http/json), holding every span it was sent.
 */
export async function startOtlpJsonReceiver(): Promise<TraceBackend & { protocol: 'http/json' }> {
  const { createServer } = await import('node:http');
  const spans: TestSpan[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (
        req.method !== 'POST' ||
        req.url !== '/v1/traces' ||
        !req.headers['content-type']?.includes('json')
      ) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpJsonRequest;
      for (const rs of body.resourceSpans ?? []) {
        const service =
          rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue ?? '';
        for (const ss of rs.scopeSpans ?? [])
          for (const s of ss.spans ?? [])
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentId: s.parentSpanId || undefined,
              name: s.name,
              service,
              tags: {
                ...Object.fromEntries((s.attributes ?? []).map((a) => [a.key, plain(a.value)])),
                'span.kind': KIND_NAMES[s.kind ?? 1] ?? 'internal',
              },
            });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    protocol: 'http/json',
    otlpEndpoint: `http://127.0.0.1:${port}`,
    spans: (service) => {
      const ids = new Set(spans.filter((s) => s.service === service).map((s) => s.traceId));
      return Promise.resolve(spans.filter((s) => ids.has(s.traceId)));
    },
    trace: (traceId) => Promise.resolve(spans.filter((s) => s.traceId === traceId)),
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
}
