import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { ProviderError } from '../../providers/errors.js';
import { registerProviderRequestMetrics, withMetrics } from '../../providers/metrics.js';
import { withTracing } from '../../providers/tracing.js';
import type { Instance, Provider } from '../../providers/types.js';
import { installTracer, resultOf, type SpanAttributes, type TracerImpl } from '../../tracing/seam.js';

/** A backend that answers from a script: the decorator around it is what is under test. */
function scripted(name: string): Provider {
  const fail = (
    errorClass: 'NotFound' | 'QuotaExceeded' | 'Permanent' | 'Transient',
    operation: 'get' | 'create',
  ) =>
    new ProviderError({ errorClass, operation, provider: name, instance: 'x', message: `${errorClass} x` });
  return {
    name,
    type: 'local',
    capabilities: { cheapListByTag: true },
    create: (req) =>
      req.name === 'quota'
        ? Promise.reject(fail('QuotaExceeded', 'create'))
        : Promise.resolve(`id-${req.name}`),
    get: (id) =>
      id === 'gone'
        ? Promise.reject(fail('NotFound', 'get'))
        : id === 'boom'
          ? Promise.reject(new Error('socket hang up'))
          : Promise.resolve({
              id,
              state: 'Running',
              ip: '10.0.0.1',
              uid: 'u',
              installation: 'i',
            } as Instance),
    delete: () => Promise.resolve(),
    listByTag: () => Promise.resolve([]),
    check: () => Promise.resolve([]),
  };
}

describe('provider request metrics: every provider buildProviders makes is counted', () => {
  const yaml = 'providers:\n  - name: one\n    type: local\n  - name: two\n    type: local\n';

  it('counts each call by provider, op and result class, and leaves checks and capabilities alone', async () => {
    const metrics = new Registry();
    const registry = buildProviders(
      parseProvidersConfig(yaml, 'test'),
      {
        logger: pino({ level: 'silent' }),
        stateRoot: '/nonexistent',
        requestMetrics: registerProviderRequestMetrics(metrics),
      },
      { local: { build: (name) => scripted(name) } },
    );
    const one = registry.get('one')!;
    const two = registry.get('two')!;
    const signal = new AbortController().signal;
    const req = { uid: 'u', namespace: 'n', proxyName: 'p', placement: {}, port: 3128, installation: 'i' };
    await one.create({ ...req, name: 'a' }, signal);
    await expect(one.create({ ...req, name: 'quota' }, signal)).rejects.toThrow('QuotaExceeded');
    await one.get('x', signal);
    await expect(one.get('gone', signal)).rejects.toThrow();
    await expect(two.get('boom', signal)).rejects.toThrow('socket hang up');
    await two.delete('x', signal);
    await two.listByTag(signal);
    await two.check!(signal);
    expect(one.capabilities).toEqual({ cheapListByTag: true });
    expect(one.name).toBe('one');

    const text = await metrics.metrics();
    const count = (labels: string) =>
      Number(
        new RegExp(`proxy_operator_provider_requests_total\\{${labels}\\} (\\d+)`).exec(text)?.[1] ?? 'NaN',
      );
    expect(count('provider="one",op="create",result="ok"')).toBe(1);
    expect(count('provider="one",op="create",result="quota_exceeded"')).toBe(1);
    expect(count('provider="one",op="get",result="ok"')).toBe(1);
    expect(count('provider="one",op="get",result="not_found"')).toBe(1);
    // An error that is not a ProviderError counts as the class the activity layer gives it: transient.
    expect(count('provider="two",op="get",result="transient"')).toBe(1);
    expect(count('provider="two",op="delete",result="ok"')).toBe(1);
    expect(count('provider="two",op="list",result="ok"')).toBe(1);
    expect(text).not.toMatch(/op="check"/);
    expect(text).toMatch(/egress_provider_request_duration_seconds_count\{provider="one",op="create"\} 2/);
    // Bounded labels: no instance IDs or names.
    expect(text).not.toMatch(/id-a|quota"|gone|boom/);
  });

  it('registers once per registry (a second worker in the same process reuses the metrics)', () => {
    const metrics = new Registry();
    registerProviderRequestMetrics(metrics).observe('p', 'get', 'ok', 0.1);
    expect(() => registerProviderRequestMetrics(metrics).observe('p', 'get', 'ok', 0.1)).not.toThrow();
  });
});

describe('provider operation spans: every provider buildProviders makes is traced', () => {
  /** A tracer recording what the seam asks of it; `withTracing` around a scripted backend is under test. */
  function recordingTracer() {
    const spans: Array<{ name: string; attributes: SpanAttributes; operation?: string; failed?: string }> =
      [];
    const tracer: TracerImpl = {
      async withSpan(name, attributes, options, fn) {
        const span: (typeof spans)[number] = {
          name,
          attributes,
          ...(options.operation ? { operation: options.operation } : {}),
        };
        spans.push(span);
        try {
          return await fn({ setAttributes: () => undefined });
        } catch (error) {
          span.failed = resultOf(error);
          throw error;
        }
      },
      activeOperation: () => undefined,
      activeIds: () => undefined,
    };
    return { spans, tracer };
  }

  afterEach(() => installTracer(undefined));

  it('one span per create/get/delete/list named by type and operation, the failure its class; checks are not wrapped', async () => {
    const { spans, tracer } = recordingTracer();
    installTracer(tracer);
    const registry = buildProviders(
      parseProvidersConfig('providers:\n  - name: one\n    type: local\n', 'test'),
      { logger: pino({ level: 'silent' }), stateRoot: '/nonexistent' },
      { local: { build: (name) => scripted(name) } },
    );
    const one = registry.get('one')!;
    const signal = new AbortController().signal;
    const req = { uid: 'u', namespace: 'n', proxyName: 'p', placement: {}, port: 3128, installation: 'i' };
    await one.create({ ...req, name: 'a' }, signal);
    await expect(one.get('gone', signal)).rejects.toThrow();
    await one.delete('x', signal);
    await one.listByTag(signal);
    await one.check!(signal);
    expect(spans).toEqual([
      {
        name: 'local create',
        attributes: { provider: 'one', 'provider.type': 'local', operation: 'create' },
        operation: 'create',
      },
      {
        name: 'local get',
        attributes: { provider: 'one', 'provider.type': 'local', operation: 'get' },
        operation: 'get',
        failed: 'NotFound',
      },
      {
        name: 'local delete',
        attributes: { provider: 'one', 'provider.type': 'local', operation: 'delete' },
        operation: 'delete',
      },
      {
        name: 'local list',
        attributes: { provider: 'one', 'provider.type': 'local', operation: 'list' },
        operation: 'list',
      },
    ]);
  });

  it('with tracing off the calls go straight through', async () => {
    const registry = buildProviders(
      parseProvidersConfig('providers:\n  - name: one\n    type: local\n', 'test'),
      { logger: pino({ level: 'silent' }), stateRoot: '/nonexistent' },
      { local: { build: (name) => scripted(name) } },
    );
    await expect(
      registry.get('one')!.create(
        {
          uid: 'u',
          namespace: 'n',
          proxyName: 'p',
          placement: {},
          port: 3128,
          installation: 'i',
          name: 'b',
        },
        new AbortController().signal,
      ),
    ).resolves.toBe('id-b');
  });
});

describe('the decorators keep what they do not wrap', () => {
  it('idAliases reaches the provider through the metrics and tracing decorators', () => {
    const base: Provider = { ...scripted('aliased'), idAliases: (id) => [`old/${id}`] };
    const decorated = withTracing(withMetrics(base, registerProviderRequestMetrics(new Registry())));
    expect(decorated.idAliases?.('zones/z/instances/i')).toEqual(['old/zones/z/instances/i']);
    expect(
      'idAliases' in withMetrics(scripted('plain'), registerProviderRequestMetrics(new Registry())),
    ).toBe(false);
  });
});
