/**
 * Provider checks on the real Temporal dev server and apiserver, through
 * their Temporal Schedule, against real `local` providers: ProviderHealth
 * objects created, updated with per-target transition times when a real
 * fault (the state directory replaced by a file) comes and goes, deleted
 * when a provider leaves the config; a provider whose name is not a valid
 * object name gets metrics and no object; the worker's gauges; the
 * transition log lines. Then providers that break the contract (a check()
 * that hangs and ignores its signal, one that throws, one that answers
 * garbage) next to a healthy one, and an object of the same name owned by
 * another installation, which is left alone. Last, the activities' writes
 * against the apiserver when someone else acts in between: an unlabelled
 * object adopted (and so cleaned up), an owner change between the read and
 * the status write, an object recreated between the listing and the delete.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createProviderCheckActivities,
  type ProviderCheckActivities,
} from '../../activities/provider-check-activities.js';
import { ensureSchedules, scheduleIds, type SchedulesConfig } from '../../cli/schedules.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/provider.js';
import type { Provider, TargetStatus } from '../../providers/types.js';
import type { ProviderHealthClient } from '../../kube/provider-healths.js';
import type { ProviderHealth } from '../../resources/proxy-schema.js';
import type { ChecksRoundReport } from '../../workflows/provider-checks/types.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import {
  createProviderHealth,
  deleteProviderHealth,
  kubeConfig,
  providerHealthClient,
} from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import {
  LEVEL,
  mutableRegistry,
  nthResult,
  startScheduleWorker,
  type MutableRegistry,
  type ScheduleWorker,
} from './gc-helpers.js';

describe('provider checks schedule and ProviderHealth objects', () => {
  let kc: KubeConfig;
  let api: ProviderHealthClient;
  let stateRoot: string;
  let registry: MutableRegistry;
  let sw: ScheduleWorker;
  const suffix = randomBytes(3).toString('hex');
  const names = { a: `pc-a-${suffix}`, b: `pc-b-${suffix}`, bad: `Bad_Name_${suffix}` };
  const providers: Record<keyof typeof names, LocalProvider> = {} as Record<
    keyof typeof names,
    LocalProvider
  >;
  const prefix = `pc-${suffix}`;

  beforeAll(async () => {
    kc = kubeConfig();
    api = providerHealthClient(kc);
    stateRoot = mkdtempSync(join(tmpdir(), 'ep-pc-'));
    for (const key of ['a', 'b', 'bad'] as const) {
      providers[key] = createLocalProvider({
        name: names[key],
        config: localConfigSchema.parse({ addressRange: privateLoopbackRange() }),
        stateDir: join(stateRoot, key),
        logger: pino({ level: 'silent' }),
      });
    }
    registry = mutableRegistry([providers.a, providers.b, providers.bad]);
    sw = await startScheduleWorker({ prefix: 'pc', kubeConfig: kc, registry });
  });

  afterAll(async () => {
    await sw?.close();
    await registry?.close();
    rmSync(stateRoot, { recursive: true, force: true });
  });

  const config = (intervalMs: number, idPrefix = prefix, timeoutMs = 5_000): SchedulesConfig => ({
    taskQueue: sw.taskQueue,
    idPrefix,
    gc: { intervalMs: 0 },
    // An hour: rounds are triggered by hand, one at a time.
    providerChecks: { intervalMs, timeoutMs },
  });

  const get = (name: string): Promise<ProviderHealth | undefined> => api.get(name);

  let rounds = 0;
  const round = async (): Promise<ChecksRoundReport> => {
    const handle = sw.client.schedule.getHandle(scheduleIds(prefix).providerChecks);
    await handle.trigger();
    rounds++;
    return nthResult<ChecksRoundReport>(sw.client, handle, rounds);
  };

  const target = (ph: ProviderHealth | undefined, name: string) =>
    ph?.status?.targets?.find((t) => t.name === name);
  const ready = (ph: ProviderHealth | undefined) => ph?.status?.conditions?.find((c) => c.type === 'Ready');

  it('creates, updates with transition times, and deletes ProviderHealth objects; exports gauges', async () => {
    expect((await ensureSchedules(sw.client, config(3_600_000))).providerChecks).toBe('created');
    try {
      // Round 1: every provider checked; objects for the valid names only.
      const r1 = await round();
      expect(r1.published).toEqual([names.a, names.b].sort());
      expect(r1.invalidNames).toEqual([names.bad]);
      const a1 = await get(names.a);
      expect(a1?.metadata.labels).toMatchObject({
        'app.kubernetes.io/managed-by': 'egress-proxies',
        'crawl.example.com/installation': sw.installation,
      });
      expect(a1?.status).toMatchObject({ type: 'local', targetsReady: '2/2' });
      expect(ready(a1)).toMatchObject({ status: 'True', reason: 'AllTargetsReady' });
      expect(target(a1, 'state-dir')).toMatchObject({ ready: true, reason: 'Reachable' });
      expect(await get(names.b)).toBeDefined();
      expect(await get(names.bad.toLowerCase())).toBeUndefined();
      const scrape1 = await sw.metrics.metrics();
      expect(scrape1).toContain(
        `proxy_operator_provider_target_up{provider="${names.bad}",target="state-dir"} 1`,
      );
      expect(scrape1).toContain(
        `proxy_operator_provider_target_up{provider="${names.a}",target="loopback"} 1`,
      );
      expect(scrape1).toMatch(
        new RegExp(
          `proxy_operator_provider_check_duration_seconds\\{provider="${names.a}",target="state-dir"\\} [0-9.e-]+`,
        ),
      );
      expect(scrape1).toMatch(
        new RegExp(
          `proxy_operator_provider_check_timestamp_seconds\\{provider="${names.a}",target="state-dir"\\} [0-9.e+]+`,
        ),
      );

      // Round 2: a's state directory is replaced by a file: that target goes down, the other keeps its time.
      const dir = providers.a.stateDir;
      renameSync(dir, `${dir}.moved`);
      writeFileSync(dir, 'not a directory\n');
      const r2 = await round();
      const a2 = await get(names.a);
      expect(a2?.status?.targetsReady).toBe('1/2');
      expect(ready(a2)).toMatchObject({ status: 'False', reason: 'TargetsNotReady' });
      expect(ready(a2)?.message).toContain('state-dir: ');
      expect(target(a2, 'state-dir')).toMatchObject({ ready: false });
      expect(target(a2, 'state-dir')?.lastTransitionTime).toBe(a2?.status?.lastCheckTime);
      expect(target(a2, 'loopback')?.lastTransitionTime).toBe(target(a1, 'loopback')?.lastTransitionTime);
      expect(a2?.status?.lastCheckTime).not.toBe(a1?.status?.lastCheckTime);
      expect(r2.transitions).toContainEqual(
        expect.objectContaining({ kind: 'down', provider: names.a, target: 'state-dir' }),
      );
      expect(await sw.metrics.metrics()).toContain(
        `proxy_operator_provider_target_up{provider="${names.a}",target="state-dir"} 0`,
      );
      // The workflow's transition line: WARNING, with provider, target, address, reason and message.
      // (A triggered round gets no previous result, so every failing target is "down" to it; the
      // "up" line and the silence of a steady target are checked on scheduled rounds below.)
      const down = r2.transitions.find((t) => t.provider === names.a && t.target === 'state-dir');
      expect(
        await sw.logs.waitFor('WARNING: provider target not ready', {
          provider: names.a,
          target: 'state-dir',
          reason: down?.reason,
          message: down?.message,
          ...(down?.address === undefined ? {} : { address: down.address }),
        }),
      ).toMatchObject({ level: LEVEL.warn, workflowType: 'providerChecksWorkflow', taskQueue: sw.taskQueue });
      // Nothing for the steady targets.
      expect(sw.logs.find('WARNING: provider target not ready', { target: 'loopback' })).toEqual([]);

      // Round 3: repaired: back up, with a new transition time; the condition's time moves too.
      rmSync(dir);
      renameSync(`${dir}.moved`, dir);
      await round();
      const a3 = await get(names.a);
      expect(ready(a3)).toMatchObject({ status: 'True' });
      expect(target(a3, 'state-dir')).toMatchObject({
        ready: true,
        lastTransitionTime: a3?.status?.lastCheckTime,
      });
      expect(ready(a3)?.lastTransitionTime).toBe(a3?.status?.lastCheckTime);
      expect(target(a3, 'loopback')?.lastTransitionTime).toBe(target(a1, 'loopback')?.lastTransitionTime);

      // Round 4: b leaves the config: its object goes, and so do its gauges.
      registry.set([providers.a, providers.bad]);
      const r4 = await round();
      expect(r4.deleted).toEqual([names.b]);
      expect(await get(names.b)).toBeUndefined();
      expect(await get(names.a)).toBeDefined();
      expect(await sw.metrics.metrics()).not.toContain(`provider="${names.b}"`);

      // Checks off: the schedule goes and a cleanup round deletes this installation's objects.
      expect((await ensureSchedules(sw.client, config(0))).providerChecks).toBe('deleted');
      await eventually(`${names.a} deleted`, async () =>
        (await get(names.a)) === undefined ? true : undefined,
      );
    } finally {
      await ensureSchedules(sw.client, config(0)).catch(() => undefined);
    }
  });

  it('publishes a healthy provider next to hung, throwing and garbage-answering checks; leaves another installation’s object alone', async () => {
    const faultPrefix = `${prefix}-f`;
    const n = {
      ok: `pc-ok-${suffix}`,
      hung: `pc-hung-${suffix}`,
      throws: `pc-throws-${suffix}`,
      malformed: `pc-malformed-${suffix}`,
      shared: `pc-shared-${suffix}`,
    };
    const ok = createLocalProvider({
      name: n.ok,
      config: localConfigSchema.parse({ addressRange: privateLoopbackRange() }),
      stateDir: join(stateRoot, 'ok'),
      logger: pino({ level: 'silent' }),
    });
    const stub = (name: string, check: Provider['check']): Provider => {
      const unused = () => Promise.reject(new Error('unused'));
      return { name, type: 'stub', create: unused, get: unused, delete: unused, listByTag: unused, check };
    };
    let hungCalls = 0;
    // Answers in round 1, never resolves (ignoring its signal) in round 2, answers again from round 3.
    const hung = stub(n.hung, () =>
      ++hungCalls === 2
        ? new Promise<never>(() => {})
        : Promise.resolve([
            { name: 'api', address: 'api.example.com:443', ready: true, reason: 'Reachable' },
            { name: 'quota', ready: true, reason: 'Reachable' },
          ]),
    );
    const throws = stub(n.throws, () =>
      Promise.reject(
        Object.assign(new Error('GET https://admin:s3cret@backend.example.com/ failed'), {
          code: 'ECONNREFUSED',
        }),
      ),
    );
    const malformed = stub(n.malformed, () =>
      Promise.resolve([{ name: 'api', ready: 'yes' }] as unknown as TargetStatus[]),
    );
    const shared = stub(n.shared, () => Promise.resolve([{ name: 'api', ready: true, reason: 'Reachable' }]));
    // The same object name, created by another installation on this cluster.
    const foreign = await createProviderHealth(api, n.shared, {
      'app.kubernetes.io/managed-by': 'egress-proxies',
      'crawl.example.com/installation': 'another-installation',
    });
    registry.set([ok, hung, throws, malformed, shared]);
    // Scheduled rounds, not triggered ones: only those receive the previous
    // round's result, which the transition lines compare against. Each
    // provider's behaviour is keyed on its round, not on timing.
    expect((await ensureSchedules(sw.client, config(6_000, faultPrefix, 2_500))).providerChecks).toBe(
      'created',
    );
    const handle = sw.client.schedule.getHandle(scheduleIds(faultPrefix).providerChecks);
    try {
      // Round 1: every check answers, badly for two of them; the foreign object is not written.
      const r1 = await nthResult<ChecksRoundReport>(sw.client, handle, 1);
      expect(r1.published).toEqual([n.ok, n.hung, n.throws, n.malformed].sort());
      expect(r1.publishFailures.map((f) => f.provider)).toEqual([n.shared]);
      expect(r1.publishFailures[0]?.error).toBe(
        `ForeignProviderHealth: ProviderHealth ${n.shared} carries crawl.example.com/installation=another-installation, not ${sw.installation}; left alone`,
      );
      const ok1 = await get(n.ok);
      expect(ready(ok1)).toMatchObject({ status: 'True' });
      const thrown = await get(n.throws);
      expect(thrown?.status?.targets).toEqual([
        expect.objectContaining({
          name: 'check',
          ready: false,
          reason: 'APIError',
          message: 'check threw instead of reporting a verdict: Error (ECONNREFUSED)',
        }),
      ]);
      expect(ready(thrown)).toMatchObject({ status: 'False', reason: 'TargetsNotReady' });
      expect(target(await get(n.malformed), 'api')).toMatchObject({
        ready: false,
        reason: 'APIError',
        message: 'the provider returned a malformed verdict',
      });
      const untouched = await get(n.shared);
      expect(untouched?.metadata.resourceVersion).toBe(foreign.metadata.resourceVersion);
      expect(untouched?.status).toBeUndefined();
      expect(
        await sw.logs.waitFor(
          'WARNING: ProviderHealth object belongs to another installation; not overwriting it',
          {
            provider: n.shared,
            owner: 'another-installation',
            installation: sw.installation,
          },
        ),
      ).toMatchObject({ level: LEVEL.warn });
      await sw.logs.waitFor('writing ProviderHealth failed; the next round writes again', {
        provider: n.shared,
        error: r1.publishFailures[0]?.error,
      });
      expect(
        await sw.logs.waitFor('check threw instead of reporting a verdict', {
          provider: n.throws,
          error: { name: 'Error', code: 'ECONNREFUSED' },
        }),
      ).toMatchObject({ level: LEVEL.warn });
      await sw.logs.waitFor('WARNING: provider target not ready', {
        provider: n.throws,
        target: 'check',
        reason: 'APIError',
      });
      expect(JSON.stringify(sw.logs.lines)).not.toContain('s3cret');
      expect(JSON.stringify(r1)).not.toContain('s3cret');

      // Round 2: the hung provider stops answering. Within this one round its
      // targets are Timeout and the healthy provider is published as usual.
      const r2 = await nthResult<ChecksRoundReport>(sw.client, handle, 2);
      expect(r2.published).toEqual([n.ok, n.hung, n.throws, n.malformed].sort());
      const okNow = await get(n.ok);
      expect(ready(okNow)).toMatchObject({ status: 'True' });
      expect(okNow?.status?.lastCheckTime).not.toBe(ok1?.status?.lastCheckTime);
      const hungNow = await get(n.hung);
      expect(hungNow?.status?.targets).toEqual([
        expect.objectContaining({
          name: 'api',
          ready: false,
          reason: 'Timeout',
          message: 'check did not finish in time',
        }),
        expect.objectContaining({ name: 'quota', ready: false, reason: 'Timeout' }),
      ]);
      expect(ready(hungNow)).toMatchObject({ status: 'False' });
      expect(
        r2.transitions.filter((t) => t.provider === n.hung).map((t) => [t.kind, t.target, t.reason]),
      ).toEqual([
        ['down', 'api', 'Timeout'],
        ['down', 'quota', 'Timeout'],
      ]);
      await sw.logs.waitFor('check ignored its deadline; reporting its targets as Timeout', {
        provider: n.hung,
      });
      expect(
        await sw.logs.waitFor('WARNING: provider target not ready', {
          provider: n.hung,
          target: 'api',
          address: 'api.example.com:443',
          reason: 'Timeout',
          message: 'check did not finish in time',
        }),
      ).toMatchObject({ level: LEVEL.warn });
      // Still down, same reason: no second line.
      expect(sw.logs.find('WARNING: provider target not ready', { provider: n.throws })).toHaveLength(1);

      // Round 3: it answers again: the info line.
      const r3 = await nthResult<ChecksRoundReport>(sw.client, handle, 3);
      expect(r3.transitions.filter((t) => t.provider === n.hung).map((t) => t.kind)).toEqual(['up', 'up']);
      expect(ready(await get(n.hung))).toMatchObject({ status: 'True' });
      expect(
        await sw.logs.waitFor('provider target ready', {
          provider: n.hung,
          target: 'api',
          reason: 'Reachable',
        }),
      ).toMatchObject({ level: LEVEL.info });
    } finally {
      await ensureSchedules(sw.client, config(0, faultPrefix)).catch(() => undefined);
      await ok.close();
      await deleteProviderHealth(api, n.shared).catch(() => undefined);
    }
  });
});

describe('ProviderHealth writes when someone else acts in between', () => {
  let api: ProviderHealthClient;
  let acts: ProviderCheckActivities;
  const suffix = randomBytes(3).toString('hex');
  // An installation of its own: its cleanup can touch nothing of the other tests'.
  const installation = `pcw-${suffix}`;
  const ours = {
    'app.kubernetes.io/managed-by': 'egress-proxies',
    'crawl.example.com/installation': installation,
  };
  const created: string[] = [];

  beforeAll(() => {
    const kc = kubeConfig();
    api = providerHealthClient(kc);
    acts = createProviderCheckActivities({
      registry: { get: () => undefined, names: () => [], close: () => Promise.resolve() },
      kubeConfig: kc,
      installation,
      logger: pino({ level: 'silent' }),
      metrics: new Registry(),
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  afterAll(async () => {
    for (const name of created) {
      await deleteProviderHealth(api, name).catch(() => undefined);
    }
  });

  const get = (name: string): Promise<ProviderHealth | undefined> => api.get(name);
  const create = (name: string, labels?: Record<string, string>): Promise<ProviderHealth> => {
    created.push(name);
    return createProviderHealth(api, name, labels);
  };
  /** Sets the installation label of the object as it is now (its other labels kept). */
  const relabel = async (name: string, installationValue: string) => {
    const object = await get(name);
    if (!object) throw new Error(`ProviderHealth ${name} not found`);
    await api.setLabels(object, {
      ...object.metadata.labels,
      'crawl.example.com/installation': installationValue,
    });
  };
  const result = (provider: string) => ({
    provider,
    type: 'stub',
    supported: true,
    targets: [{ name: 'api', ready: true, reason: 'Reachable', latencyMillis: 1 }],
    checkedAt: new Date().toISOString(),
  });
  /** Runs `between` once, right after the first `method` call (the activity's own read) returns. */
  const after = (
    method: 'getClusterCustomObject' | 'listClusterCustomObject',
    between: () => Promise<unknown>,
  ) => {
    const original = Reflect.get(CustomObjectsApi.prototype, method) as (
      this: CustomObjectsApi,
      ...args: unknown[]
    ) => Promise<unknown>;
    let fired = false;
    vi.spyOn(CustomObjectsApi.prototype, method).mockImplementation(async function (
      this: CustomObjectsApi,
      ...args: unknown[]
    ) {
      const answer = await original.apply(this, args);
      if (!fired) {
        fired = true;
        await between();
      }
      return answer as never;
    } as never);
  };

  it('adopts an object without an installation label, writes its status, and cleans it up later', async () => {
    const name = `pcw-unlabelled-${suffix}`;
    const before = await create(name, { team: 'crawl' });
    expect(await acts.publishProviderHealth({ result: result(name) })).toBe('updated');
    const adopted = await get(name);
    expect(adopted?.metadata.uid).toBe(before.metadata.uid);
    expect(adopted?.metadata.labels).toEqual({ team: 'crawl', ...ours });
    expect(adopted?.status).toMatchObject({ type: 'stub', targetsReady: '1/1' });
    // Its provider is no longer configured: the cleanup, scoped by our labels, now finds it.
    expect(await acts.deleteStaleProviderHealth({ keep: [] })).toEqual([name]);
    expect(await get(name)).toBeUndefined();
  });

  it('an object claimed by another installation between the read and the status write is not written', async () => {
    const name = `pcw-claimed-${suffix}`;
    await create(name, ours);
    after('getClusterCustomObject', () => relabel(name, 'another-installation'));
    await expect(acts.publishProviderHealth({ result: result(name) })).rejects.toMatchObject({ code: 422 });
    vi.restoreAllMocks();
    const now = await get(name);
    expect(now?.status).toBeUndefined();
    expect(now?.metadata.labels?.['crawl.example.com/installation']).toBe('another-installation');
    // The retry reads it afresh and finds it foreign.
    await expect(acts.publishProviderHealth({ result: result(name) })).rejects.toMatchObject({
      type: 'ForeignProviderHealth',
    });
  });

  it('an unlabelled object claimed by another installation before the adoption is not adopted', async () => {
    const name = `pcw-raced-${suffix}`;
    await create(name);
    after('getClusterCustomObject', () => relabel(name, 'another-installation'));
    await expect(acts.publishProviderHealth({ result: result(name) })).rejects.toMatchObject({ code: 422 });
    const now = await get(name);
    expect(now?.status).toBeUndefined();
    expect(now?.metadata.labels).toEqual({ 'crawl.example.com/installation': 'another-installation' });
  });

  it('an object recreated between the listing and the delete is kept', async () => {
    const name = `pcw-recreated-${suffix}`;
    const first = await create(name, ours);
    let second: ProviderHealth | undefined;
    after('listClusterCustomObject', async () => {
      await deleteProviderHealth(api, name);
      await eventually(`${name} gone`, async () => ((await get(name)) === undefined ? true : undefined));
      second = await create(name, ours);
    });
    expect(await acts.deleteStaleProviderHealth({ keep: [] })).toEqual([]);
    expect(second?.metadata.uid).not.toBe(first.metadata.uid);
    expect((await get(name))?.metadata.uid).toBe(second?.metadata.uid);
    // The next round deletes the new one, still stale.
    vi.restoreAllMocks();
    expect(await acts.deleteStaleProviderHealth({ keep: [] })).toEqual([name]);
  });
});
