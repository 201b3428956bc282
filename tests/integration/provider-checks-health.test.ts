/**
 * Provider checks on the real Temporal dev server and apiserver, through
 * their Temporal Schedule, against real `local` providers: ProviderHealth
 * objects created, updated with per-target transition times when a real
 * fault (the state directory replaced by a file) comes and goes, deleted
 * when a provider leaves the config; a provider whose name is not a valid
 * object name gets metrics and no object; the worker's gauges.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds, type SchedulesConfig } from '../../cli/schedules.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/provider.js';
import { GROUP, PROVIDER_HEALTH_PLURAL, VERSION, type ProviderHealth } from '../../resources/proxy-schema.js';
import type { ChecksRoundReport } from '../../workflows/provider-checks/types.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import { customObjects, kubeConfig } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import {
  mutableRegistry,
  nthResult,
  startScheduleWorker,
  type MutableRegistry,
  type ScheduleWorker,
} from './gc-helpers.js';

describe('provider checks schedule and ProviderHealth objects', () => {
  let kc: KubeConfig;
  let api: CustomObjectsApi;
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
    api = customObjects(kc);
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

  const config = (intervalMs: number): SchedulesConfig => ({
    taskQueue: sw.taskQueue,
    idPrefix: prefix,
    gc: { intervalMs: 0 },
    // An hour: rounds are triggered by hand, one at a time.
    providerChecks: { intervalMs, timeoutMs: 5_000 },
  });

  const get = async (name: string): Promise<ProviderHealth | undefined> => {
    try {
      return (await api.getClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: PROVIDER_HEALTH_PLURAL,
        name,
      })) as ProviderHealth;
    } catch (error) {
      if ((error as { code?: number }).code === 404) return undefined;
      throw error;
    }
  };

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
});
