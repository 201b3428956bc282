/**
 * Jaeger (v2, all-in-one) on the loopback with in-memory storage: the trace
 * backend of `dev --tracing` and of the tracing test. Every port is chosen
 * here (the stock config binds fixed ones: 4317, 8888, 13133, ...), so
 * several instances coexist with each other and with other servers.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readyOrStopped, retryWhenPortTaken, spawnServer, type ManagedProcess } from './process.js';
import { preferredOrFreePort } from './ports.js';

export interface JaegerServer {
  /** OTLP over HTTP: the value for OTEL_EXPORTER_OTLP_ENDPOINT (the SDK appends /v1/traces). */
  otlpEndpoint: string;
  /** The UI and its query API (/api/traces?service=...). */
  queryUrl: string;
  logPath: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

export interface JaegerOptions {
  bin: string;
  dataDir: string;
  /** Preferred ports (the usual 4318 and 16686 for dev); another free one is taken when in use. */
  otlpPort?: number;
  queryPort?: number;
  pidDir?: string;
}

/** The collector-style config: OTLP/HTTP in, memory storage, query HTTP and gRPC, no self-metrics listener. */
function config(host: string, ports: { otlp: number; query: number; queryGrpc: number }): string {
  return `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: ${host}:${ports.query}
    grpc:
      endpoint: ${host}:${ports.queryGrpc}
receivers:
  otlp:
    protocols:
      http:
        endpoint: ${host}:${ports.otlp}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`;
}

async function answers(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  await res.body?.cancel();
  return res.status < 500;
}

export async function startJaeger(opts: JaegerOptions): Promise<JaegerServer> {
  mkdirSync(opts.dataDir, { recursive: true });
  const host = '127.0.0.1';
  const logPath = join(opts.dataDir, 'jaeger.log');
  // A port found free can be taken before Jaeger binds it (seen in CI): new ones, as the other servers do.
  return retryWhenPortTaken(logPath, async (attempt) => {
    const otlp = await preferredOrFreePort(attempt === 1 ? opts.otlpPort : undefined, host);
    const query = await preferredOrFreePort(attempt === 1 ? opts.queryPort : undefined, host);
    const queryGrpc = await preferredOrFreePort(undefined, host);
    const configPath = join(opts.dataDir, 'jaeger.yaml');
    writeFileSync(configPath, config(host, { otlp, query, queryGrpc }));
    const proc = spawnServer('jaeger', opts.bin, ['--config', configPath], logPath, { pidDir: opts.pidDir });
    const queryUrl = `http://${host}:${query}`;
    const otlpEndpoint = `http://${host}:${otlp}`;
    await readyOrStopped(proc, logPath, [
      { what: 'Jaeger query API', probe: () => answers(`${queryUrl}/api/services`), timeoutMs: 60_000 },
      // The receiver answers 405 to GET once it listens.
      { what: 'Jaeger OTLP receiver', probe: () => answers(`${otlpEndpoint}/v1/traces`), timeoutMs: 30_000 },
    ]);
    return { otlpEndpoint, queryUrl, logPath, process: proc, stop: () => proc.stop() };
  });
}
