/**
 * The HTTP side of tracing: a request's W3C `traceparent`, parsed, and the
 * `TraceHook` an HTTP server calls per request. With tracing on
 * (`tracing/otel.ts`) the hook starts a server span whose parent is the
 * request's context and ends it with the status; with tracing off there is
 * no hook, and the parsed context only enriches the request log line.
 */

/** A valid W3C `traceparent` (version 00): https://www.w3.org/TR/trace-context/#traceparent-header */
export interface TraceContext {
  traceId: string;
  parentId: string;
  flags: number;
}

export interface TraceRequest {
  method: string;
  path: string;
  /** The header as received, valid or not. */
  traceparent: string | undefined;
  /** The parsed header, when it is valid. */
  trace: TraceContext | undefined;
}

export interface TraceSpan {
  end(status: number): void;
}

export type TraceHook = (request: TraceRequest) => TraceSpan | undefined;

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** Returns undefined for a missing or invalid header, including the all-zero ids the spec forbids. */
export function parseTraceparent(header: string | undefined): TraceContext | undefined {
  if (header === undefined) return undefined;
  const m = TRACEPARENT.exec(header.trim());
  if (!m) return undefined;
  const [, version, traceId, parentId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId!) || /^0+$/.test(parentId!)) return undefined;
  return { traceId: traceId!, parentId: parentId!, flags: parseInt(flags!, 16) };
}
