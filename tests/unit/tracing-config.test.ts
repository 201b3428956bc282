import { describe, expect, it } from 'vitest';
import { readTracingConfig } from '../../tracing/config.js';

describe('readTracingConfig (the OTEL_* environment)', () => {
  it('is off with no OTLP endpoint, with OTEL_SDK_DISABLED=true and with OTEL_TRACES_EXPORTER=none', () => {
    expect(readTracingConfig({}, 'svc')).toBeUndefined();
    const on = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' };
    expect(readTracingConfig({ ...on, OTEL_SDK_DISABLED: 'true' }, 'svc')).toBeUndefined();
    expect(readTracingConfig({ ...on, OTEL_TRACES_EXPORTER: 'none' }, 'svc')).toBeUndefined();
  });

  it('appends /v1/traces to the base endpoint, takes the traces endpoint as is, defaults to http/protobuf', () => {
    expect(readTracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://h:4318/' }, 'svc')).toEqual({
      url: 'http://h:4318/v1/traces',
      protocol: 'http/protobuf',
      serviceName: 'svc',
    });
    expect(
      readTracingConfig(
        {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://h:4318',
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://t:443/x',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_SERVICE_NAME: 'mine',
        },
        'svc',
      ),
    ).toEqual({ url: 'https://t:443/x', protocol: 'http/json', serviceName: 'mine' });
  });

  it('names the variable that is wrong', () => {
    const on = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://h:4318' };
    expect(() => readTracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'h:4318' }, 's')).toThrow(
      /OTEL_EXPORTER_OTLP_ENDPOINT=h:4318 is not an http/,
    );
    expect(() => readTracingConfig({ ...on, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 's')).toThrow(
      /OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: use http\/protobuf or http\/json/,
    );
    expect(() => readTracingConfig({ ...on, OTEL_TRACES_SAMPLER: 'sometimes' }, 's')).toThrow(
      /OTEL_TRACES_SAMPLER=sometimes is not one of/,
    );
    expect(() => readTracingConfig({ ...on, OTEL_TRACES_SAMPLER_ARG: '2' }, 's')).toThrow(
      /OTEL_TRACES_SAMPLER_ARG=2 is not a ratio/,
    );
    expect(() => readTracingConfig({ ...on, OTEL_TRACES_EXPORTER: 'zipkin' }, 's')).toThrow(
      /OTEL_TRACES_EXPORTER=zipkin is not supported/,
    );
  });
});
