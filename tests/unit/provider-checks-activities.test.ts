/**
 * checkProviders (the provider-checks activity) against providers that break
 * the contract: a check() that never resolves and ignores its signal, one
 * that throws, one that answers garbage. Each is reported as failed targets
 * in the same round, next to a healthy provider's verdict, and logged; a
 * throw never puts backend text into the report. Called outside an activity
 * context: the KubeConfig is never dialled by checkProviders.
 *
 * Then the writes of publishProviderHealth and deleteStaleProviderHealth, with
 * the apiserver calls replaced (the integration test runs them against a real
 * one): an unlabelled object is adopted, the status patch tests the owner, a
 * delete is pinned to the UID listed.
 */
import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createProviderCheckActivities } from '../../activities/provider-check-activities.js';
import { API_VERSION } from '../../kube/coordinates.js';
import type { ProviderRegistry } from '../../providers/config.js';
import { providerError } from '../../providers/errors.js';
import type { Provider, TargetStatus } from '../../providers/types.js';

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

function capturingLogger(): { logger: Logger; records: LogLine[] } {
  const records: LogLine[] = [];
  const logger: Logger = pino(
    { level: 'debug' },
    { write: (line: string) => records.push(JSON.parse(line) as LogLine) },
  );
  return { logger, records };
}

function offlineKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: true }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

function fake(name: string, check: Provider['check']): Provider {
  const unused = () => Promise.reject(new Error('unused'));
  return { name, type: 'fake', create: unused, get: unused, delete: unused, listByTag: unused, check };
}

const registryOf = (providers: Provider[]): ProviderRegistry => ({
  get: (name) => providers.find((p) => p.name === name),
  names: () => providers.map((p) => p.name),
  close: () => Promise.resolve(),
});

const healthy: TargetStatus[] = [{ name: 'api', ready: true, reason: 'Reachable', latencyMillis: 3 }];

describe('checkProviders with providers that break the contract', () => {
  it('reports a hung, a throwing and a garbage-answering check as failed targets in the same round', async () => {
    const { logger, records } = capturingLogger();
    const metrics = new Registry();
    const providers = [
      fake('ok', () => Promise.resolve(healthy)),
      // Never answers and ignores its signal: only the deadline plus grace ends it.
      fake('hung', () => new Promise<never>(() => {})),
      fake('throws', () =>
        Promise.reject(
          Object.assign(new Error('POST https://user:hunter2@backend/ failed'), { code: 'ECONNRESET' }),
        ),
      ),
      fake('throws-sync', () => {
        throw providerError({
          errorClass: 'Transient',
          operation: 'check',
          provider: 'throws-sync',
          instance: '',
          message: 'backend unreachable',
        });
      }),
      fake('malformed', () =>
        Promise.resolve([{ name: 'api', ready: 'yes' }, { ready: true }] as unknown as TargetStatus[]),
      ),
      fake('not-array', () => Promise.resolve({ ready: true } as unknown as TargetStatus[])),
      fake('no-check', undefined),
    ];
    const acts = createProviderCheckActivities({
      registry: registryOf(providers),
      kubeConfig: offlineKubeConfig(),
      installation: 'unit',
      logger,
      metrics,
    });

    const round = await acts.checkProviders({ timeoutMs: 200, staleAfterMs: 60_000 });
    const by = Object.fromEntries(round.results.map((r) => [r.provider, r]));
    expect(round.installation).toBe('unit');
    expect(round.results.map((r) => r.provider)).toEqual(providers.map((p) => p.name));

    expect(by.ok?.targets).toEqual([expect.objectContaining({ name: 'api', ready: true })]);
    // Never answered before: one 'check' target, Timeout.
    expect(by.hung).toMatchObject({
      supported: true,
      targets: [{ name: 'check', ready: false, reason: 'Timeout', message: 'check did not finish in time' }],
    });
    expect(by.throws?.targets).toEqual([
      expect.objectContaining({
        name: 'check',
        ready: false,
        reason: 'APIError',
        message: 'check threw instead of reporting a verdict: Error (ECONNRESET)',
      }),
    ]);
    expect(JSON.stringify(round)).not.toContain('hunter2');
    expect(by['throws-sync']?.targets[0]).toMatchObject({
      ready: false,
      reason: 'APIError',
      message:
        'check threw instead of reporting a verdict: throws-sync: check: backend unreachable (Transient)',
    });
    expect(by.malformed?.targets).toEqual([
      { name: 'api', ready: false, reason: 'APIError', message: 'the provider returned a malformed verdict' },
      {
        name: 'check',
        ready: false,
        reason: 'APIError',
        message: 'the provider returned a malformed verdict',
      },
    ]);
    expect(by['not-array']?.targets).toEqual([
      expect.objectContaining({ name: 'check', ready: false, reason: 'APIError' }),
    ]);
    expect(by['no-check']).toMatchObject({ supported: false, targets: [] });

    const warnings = records.filter((r) => r.level === 40);
    expect(warnings).toContainEqual(
      expect.objectContaining({
        provider: 'hung',
        msg: 'check ignored its deadline; reporting its targets as Timeout',
      }),
    );
    expect(warnings).toContainEqual(
      expect.objectContaining({
        provider: 'throws',
        msg: 'check threw instead of reporting a verdict',
        error: { name: 'Error', code: 'ECONNRESET' },
      }),
    );
    expect(warnings).toContainEqual(
      expect.objectContaining({
        provider: 'not-array',
        msg: 'check returned a non-array; reporting it as a failed target',
      }),
    );
    expect(JSON.stringify(records)).not.toContain('hunter2');

    const scrape = await metrics.metrics();
    expect(scrape).toContain('proxy_operator_provider_target_up{provider="ok",target="api"} 1');
    expect(scrape).toContain('proxy_operator_provider_target_up{provider="hung",target="check"} 0');
  });

  it('reports a check that hangs after answering once as Timeout on the targets (and addresses) it named', async () => {
    const { logger } = capturingLogger();
    let calls = 0;
    const flaky = fake('flaky', () => {
      calls++;
      if (calls === 1)
        return Promise.resolve([
          { name: 'api', address: 'api.example.com:443', ready: true, reason: 'Reachable' },
          { name: 'quota', ready: true, reason: 'Reachable' },
        ]);
      return new Promise<never>(() => {});
    });
    const acts = createProviderCheckActivities({
      registry: registryOf([flaky, fake('ok', () => Promise.resolve(healthy))]),
      kubeConfig: offlineKubeConfig(),
      installation: 'unit',
      logger,
      metrics: new Registry(),
    });
    const first = await acts.checkProviders({ timeoutMs: 200, staleAfterMs: 60_000 });
    expect(first.results[0]?.targets.map((t) => [t.name, t.ready])).toEqual([
      ['api', true],
      ['quota', true],
    ]);
    const second = await acts.checkProviders({ timeoutMs: 200, staleAfterMs: 60_000 });
    expect(second.results[0]?.targets).toEqual([
      {
        name: 'api',
        address: 'api.example.com:443',
        ready: false,
        reason: 'Timeout',
        message: 'check did not finish in time',
        latencyMillis: expect.any(Number) as number,
      },
      {
        name: 'quota',
        ready: false,
        reason: 'Timeout',
        message: 'check did not finish in time',
        latencyMillis: expect.any(Number) as number,
      },
    ]);
    expect(second.results[1]?.targets).toEqual([expect.objectContaining({ name: 'api', ready: true })]);
  });

  it('hands the check a signal that aborts at the deadline', async () => {
    const { logger } = capturingLogger();
    let aborted = false;
    const polite = fake(
      'polite',
      (signal) =>
        new Promise<TargetStatus[]>((resolve) => {
          signal.addEventListener('abort', () => {
            aborted = true;
            resolve([{ name: 'api', ready: false, reason: 'Timeout', message: 'aborted' }]);
          });
        }),
    );
    const acts = createProviderCheckActivities({
      registry: registryOf([polite]),
      kubeConfig: offlineKubeConfig(),
      installation: 'unit',
      logger,
      metrics: new Registry(),
    });
    const round = await acts.checkProviders({ timeoutMs: 100, staleAfterMs: 60_000 });
    expect(aborted).toBe(true);
    // Its own verdict, not the made-up one.
    expect(round.results[0]?.targets).toEqual([
      expect.objectContaining({ name: 'api', reason: 'Timeout', message: 'aborted' }),
    ]);
  });
});

describe('ProviderHealth writes', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  const acts = () =>
    createProviderCheckActivities({
      registry: registryOf([]),
      kubeConfig: offlineKubeConfig(),
      installation: 'unit',
      logger: capturingLogger().logger,
      metrics: new Registry(),
    });
  const result = {
    provider: 'p1',
    type: 'fake',
    supported: true,
    targets: [{ name: 'api', ready: true, reason: 'Reachable', latencyMillis: 3 }],
    checkedAt: '2025-01-01T00:00:00.000Z',
  };
  const statusPatch = () =>
    vi.spyOn(CustomObjectsApi.prototype, 'patchClusterCustomObjectStatus').mockResolvedValue({});
  const body = (spy: { mock: { calls: unknown[][] } }, call = 0) =>
    (spy.mock.calls[call]?.[0] as { body: unknown }).body;

  it('adopts an object without an installation label, pinned to the version read, keeping its labels', async () => {
    const read = {
      apiVersion: API_VERSION,
      kind: 'ProviderHealth',
      metadata: { name: 'p1', uid: 'uid-1', resourceVersion: '41', labels: { team: 'crawl' } },
    };
    vi.spyOn(CustomObjectsApi.prototype, 'getClusterCustomObject').mockResolvedValue(read);
    const labelled = {
      ...read,
      metadata: {
        ...read.metadata,
        resourceVersion: '42',
        labels: {
          team: 'crawl',
          'app.kubernetes.io/managed-by': 'egress-proxies',
          'crawl.example.com/installation': 'unit',
        },
      },
    };
    const metaPatch = vi
      .spyOn(CustomObjectsApi.prototype, 'patchClusterCustomObject')
      .mockResolvedValue(labelled);
    const status = statusPatch();

    expect(await acts().publishProviderHealth({ result })).toBe('updated');
    expect(metaPatch).toHaveBeenCalledOnce();
    expect(body(metaPatch)).toEqual([
      { op: 'test', path: '/metadata/uid', value: 'uid-1' },
      { op: 'test', path: '/metadata/resourceVersion', value: '41' },
      { op: 'add', path: '/metadata/labels', value: labelled.metadata.labels },
    ]);
    expect(status).toHaveBeenCalledOnce();
    expect(metaPatch.mock.invocationCallOrder[0]).toBeLessThan(status.mock.invocationCallOrder[0]!);
  });

  it("the status patch tests the object's UID and that it is still this installation's", async () => {
    vi.spyOn(CustomObjectsApi.prototype, 'getClusterCustomObject').mockResolvedValue({
      apiVersion: API_VERSION,
      kind: 'ProviderHealth',
      metadata: {
        name: 'p1',
        uid: 'uid-1',
        resourceVersion: '41',
        labels: {
          'app.kubernetes.io/managed-by': 'egress-proxies',
          'crawl.example.com/installation': 'unit',
        },
      },
    });
    const metaPatch = vi.spyOn(CustomObjectsApi.prototype, 'patchClusterCustomObject');
    const status = statusPatch();

    await acts().publishProviderHealth({ result });
    expect(metaPatch).not.toHaveBeenCalled();
    expect(body(status)).toEqual([
      { op: 'test', path: '/metadata/uid', value: 'uid-1' },
      { op: 'test', path: '/metadata/labels/crawl.example.com~1installation', value: 'unit' },
      { op: 'add', path: '/status', value: expect.objectContaining({ type: 'fake' }) as unknown },
    ]);
  });

  it('deletes a stale object only if it still has the UID listed; a recreated one is kept', async () => {
    const item = (name: string, uid: string) => ({
      apiVersion: API_VERSION,
      kind: 'ProviderHealth',
      metadata: { name, uid },
    });
    const list = vi.spyOn(CustomObjectsApi.prototype, 'listClusterCustomObject').mockResolvedValue({
      items: [item('kept', 'uid-k'), item('gone', 'uid-g'), item('recreated', 'uid-r')],
    });
    const del = vi
      .spyOn(CustomObjectsApi.prototype, 'deleteClusterCustomObject')
      .mockImplementation((req: { name: string }) =>
        req.name === 'recreated'
          ? Promise.reject(Object.assign(new Error('Precondition failed: UID'), { code: 409 }))
          : Promise.resolve({}),
      );

    expect(await acts().deleteStaleProviderHealth({ keep: ['kept'] })).toEqual(['gone']);
    expect((list.mock.calls[0]?.[0] as { labelSelector: string }).labelSelector).toBe(
      'app.kubernetes.io/managed-by=egress-proxies,crawl.example.com/installation=unit',
    );
    expect(del.mock.calls.map((c) => c[0])).toEqual([
      expect.objectContaining({ name: 'gone', body: { preconditions: { uid: 'uid-g' } } }),
      expect.objectContaining({ name: 'recreated', body: { preconditions: { uid: 'uid-r' } } }),
    ]);
  });
});
