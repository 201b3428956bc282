/**
 * Tracing configuration, from the standard OpenTelemetry environment
 * variables only (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/),
 * validated once. Tracing is on exactly when an OTLP endpoint is set.
 */
import { z } from 'zod';

export type OtlpProtocol = 'http/protobuf' | 'http/json';

export interface TracingConfig {
  /** The full traces URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces). */
  url: string;
  protocol: OtlpProtocol;
  serviceName: string;
}

export class TracingConfigError extends Error {
  override readonly name = 'TracingConfigError';
}

const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;

const urlSchema = z.url({ protocol: /^https?$/ });

function nonEmpty(v: string | undefined): string | undefined {
  const t = v?.trim();
  return t === undefined || t === '' ? undefined : t;
}

/**
 * Undefined when tracing is off: no endpoint, OTEL_SDK_DISABLED=true or
 * OTEL_TRACES_EXPORTER=none. `defaultServiceName` names the process when
 * OTEL_SERVICE_NAME is unset. Throws TracingConfigError naming the variable.
 */
export function readTracingConfig(
  env: Readonly<Record<string, string | undefined>>,
  defaultServiceName: string,
): TracingConfig | undefined {
  if (nonEmpty(env.OTEL_SDK_DISABLED)?.toLowerCase() === 'true') return undefined;
  const exporter = nonEmpty(env.OTEL_TRACES_EXPORTER)?.toLowerCase();
  if (exporter === 'none') return undefined;
  if (exporter !== undefined && exporter !== 'otlp') {
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER=${exporter} is not supported: use otlp or none`);
  }
  const tracesEndpoint = nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  const baseEndpoint = nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT);
  if (tracesEndpoint === undefined && baseEndpoint === undefined) return undefined;

  const name =
    tracesEndpoint !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  const raw = (tracesEndpoint ?? baseEndpoint)!;
  if (!urlSchema.safeParse(raw).success) {
    throw new TracingConfigError(`${name}=${raw} is not an http:// or https:// URL`);
  }
  // The signal-specific variable is the whole URL; the base one gets the signal's path (spec).
  const url = tracesEndpoint ?? `${raw.replace(/\/+$/, '')}/v1/traces`;

  const protocolName = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
    ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol =
    nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL) ?? 'http/protobuf';
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new TracingConfigError(
      `${protocolName}=${protocol} is not supported: use http/protobuf or http/json (gRPC is not bundled)`,
    );
  }

  const sampler = nonEmpty(env.OTEL_TRACES_SAMPLER);
  if (sampler !== undefined && !(SAMPLERS as readonly string[]).includes(sampler)) {
    throw new TracingConfigError(`OTEL_TRACES_SAMPLER=${sampler} is not one of ${SAMPLERS.join(', ')}`);
  }
  const samplerArg = nonEmpty(env.OTEL_TRACES_SAMPLER_ARG);
  if (samplerArg !== undefined) {
    const ratio = Number(samplerArg);
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
      throw new TracingConfigError(`OTEL_TRACES_SAMPLER_ARG=${samplerArg} is not a ratio between 0 and 1`);
    }
  }
  return { url, protocol, serviceName: nonEmpty(env.OTEL_SERVICE_NAME) ?? defaultServiceName };
}
