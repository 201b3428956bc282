/**
 * The tracing seam every part calls, with no OpenTelemetry import: when
 * tracing is off (no OTLP endpoint configured) `withSpan` is a direct call
 * and the OpenTelemetry packages are never loaded. `tracing/otel.ts`, loaded
 * only when an endpoint is configured, installs the real implementation.
 */

/** Span attribute values: only names, operations and results, never secrets or cloud-init text. */
export type SpanAttributes = Record<string, string | number | boolean | undefined>;

export interface SpanHandle {
  /** A `result` set here is kept; otherwise the span's result is `ok` or the error's class. */
  setAttributes(attributes: SpanAttributes): void;
}

export interface SpanOptions {
  /** 'client' for a call to another service (an apiserver, Compute, SSH); 'internal' otherwise. */
  kind?: 'internal' | 'client' | 'server';
  /** The `result` attribute of a failure (default resultOf). */
  classify?: (error: unknown) => string;
  /** The provider operation this span stands for; its descendants' `providerCall`s inherit it. */
  operation?: string;
}

export interface TracerImpl {
  withSpan<T>(
    name: string,
    attributes: SpanAttributes,
    options: SpanOptions,
    fn: (span: SpanHandle) => Promise<T>,
  ): Promise<T>;
  /** The operation of the innermost `providerOperation` span around the caller. */
  activeOperation(): string | undefined;
  /** The active span's ids, for log lines. */
  activeIds(): { trace_id: string; span_id: string } | undefined;
}

const NOOP_SPAN: SpanHandle = { setAttributes: () => undefined };
let impl: TracerImpl | undefined;

export function installTracer(tracer: TracerImpl | undefined): void {
  impl = tracer;
}

export function tracingOn(): boolean {
  return impl !== undefined;
}

/**
 * Runs `fn` inside a span named `name` (a child of the active span). The
 * span's `result` attribute is `ok`, or the error's class (`errorClass` of a
 * ProviderError, else the error's name) when `fn` rejects.
 */
export function withSpan<T>(
  name: string,
  attributes: SpanAttributes,
  fn: (span: SpanHandle) => Promise<T>,
  options: SpanOptions = {},
): Promise<T> {
  if (impl === undefined) return fn(NOOP_SPAN);
  return impl.withSpan(name, attributes, options, fn);
}

/** `trace_id`/`span_id` of the active span, or nothing (a pino mixin). */
export function activeTraceIds(): { trace_id: string; span_id: string } | Record<string, never> {
  return impl?.activeIds() ?? {};
}

/** The `result` attribute of a failed call: the typed provider error class, or the error's name. */
export function resultOf(error: unknown): string {
  const e = error as { errorClass?: unknown; name?: unknown } | undefined;
  if (typeof e?.errorClass === 'string') return e.errorClass;
  if (typeof e?.name === 'string') return e.name;
  return 'error';
}

/**
 * One provider operation (create, get, delete, list, check) as a span; the
 * requests it makes (`providerCall`) are its children and inherit its
 * operation. `result` is the ProviderError's class when it fails.
 */
export function providerOperation<T>(
  provider: { type: string; name: string },
  operation: string,
  fn: () => Promise<T>,
): Promise<T> {
  if (impl === undefined) return fn();
  return impl.withSpan(
    `${provider.type} ${operation}`,
    { provider: provider.name, 'provider.type': provider.type, operation },
    { operation },
    () => fn(),
  );
}

/**
 * One provider request (an apiserver request, a Compute request, an SSH
 * command) as a client span, with the provider, the operation (given, or
 * the enclosing `providerOperation`'s), the request and its result.
 */
export function providerCall<T>(
  provider: { type: string; name: string },
  request: string,
  fn: (span: SpanHandle) => Promise<T>,
  options: { operation?: string; classify?: (error: unknown) => string } = {},
): Promise<T> {
  if (impl === undefined) return fn(NOOP_SPAN);
  return impl.withSpan(
    `${provider.type} ${request}`,
    {
      provider: provider.name,
      'provider.type': provider.type,
      operation: options.operation ?? impl.activeOperation() ?? 'unknown',
      request,
    },
    { kind: 'client', ...(options.classify ? { classify: options.classify } : {}) },
    fn,
  );
}
