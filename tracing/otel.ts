/**
 * The OpenTelemetry side of tracing, imported only when an OTLP endpoint is
 * configured (tracing/index.ts). Registers a global tracer provider (W3C
 * trace context, AsyncLocalStorage context), exports over OTLP/HTTP in
 * protobuf or JSON, and installs the seam's implementation.
 */
import {
  context,
  createContextKey,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OtlpProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { Resource } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { OpenTelemetryPlugin } from '@temporalio/interceptors-opentelemetry';
import type { TraceHook } from './http.js';
import type { TracingConfig } from './config.js';
import type { Tracing } from './index.js';
import { installTracer, resultOf, type SpanAttributes, type TracerImpl } from './seam.js';

const OPERATION = createContextKey('egress-proxies provider operation');

const KINDS = { internal: SpanKind.INTERNAL, client: SpanKind.CLIENT, server: SpanKind.SERVER } as const;

function defined(attributes: SpanAttributes): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const [k, v] of Object.entries(attributes)) if (v !== undefined) out[k] = v;
  return out;
}

export function startOpenTelemetry(config: TracingConfig, version: string): Tracing {
  const resource = new Resource({ 'service.name': config.serviceName, 'service.version': version });
  // Headers (OTEL_EXPORTER_OTLP_HEADERS) and timeouts are read by the exporter itself.
  const exporter =
    config.protocol === 'http/json'
      ? new OtlpJsonExporter({ url: config.url })
      : new OtlpProtoExporter({ url: config.url });
  const processor = new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1_000 });
  // The sampler comes from OTEL_TRACES_SAMPLER / _ARG (validated in config.ts).
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  provider.register();
  const tracer = trace.getTracer('egress-proxies', version);

  const impl: TracerImpl = {
    withSpan(name, attributes, options, fn) {
      const parent =
        options.operation !== undefined
          ? context.active().setValue(OPERATION, options.operation)
          : context.active();
      return tracer.startActiveSpan(
        name,
        { kind: KINDS[options.kind ?? 'internal'], attributes: defined(attributes) },
        parent,
        async (span) => {
          let resultSet = false;
          try {
            const value = await fn({
              setAttributes: (a) => {
                if (a.result !== undefined) resultSet = true;
                span.setAttributes(defined(a));
              },
            });
            if (!resultSet) span.setAttribute('result', 'ok');
            return value;
          } catch (error) {
            // The class only: an error's message may quote what a backend said.
            const result = (options.classify ?? resultOf)(error);
            span.setAttribute('result', result);
            span.setStatus({ code: SpanStatusCode.ERROR, message: result });
            throw error;
          } finally {
            span.end();
          }
        },
      );
    },
    activeOperation() {
      const op = context.active().getValue(OPERATION);
      return typeof op === 'string' ? op : undefined;
    },
    activeIds() {
      const span = trace.getSpan(context.active());
      if (!span) return undefined;
      const { traceId, spanId } = span.spanContext();
      return { trace_id: traceId, span_id: spanId };
    },
  };
  installTracer(impl);

  // The lease API's server span, a child of the caller's `traceparent` when it sent a valid one.
  const traceHook: TraceHook = (request) => {
    const parent =
      request.traceparent !== undefined
        ? propagation.extract(ROOT_CONTEXT, { traceparent: request.traceparent })
        : ROOT_CONTEXT;
    const span = tracer.startSpan(
      `${request.method} ${request.path}`,
      {
        kind: SpanKind.SERVER,
        attributes: { 'http.request.method': request.method, 'url.path': request.path },
      },
      parent,
    );
    return {
      end(status) {
        span.setAttribute('http.response.status_code', status);
        span.setAttribute('result', status < 400 ? 'ok' : String(status));
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
      },
    };
  };

  const plugin = new OpenTelemetryPlugin({ resource, spanProcessor: processor, tracer });
  return {
    temporalPlugins: [plugin],
    traceHook,
    describe: () => `${config.url} (${config.protocol}, service ${config.serviceName})`,
    async shutdown() {
      installTracer(undefined);
      await provider.shutdown();
    },
  };
}
