import { describe, expect, it } from 'vitest';
import { ConfigError, DEFAULT_MAX_CACHED_WORKFLOWS, readCommonConfig } from '../../cli/config.js';

describe('common CLI configuration', () => {
  it('has working defaults with no flags and no environment', () => {
    const config = readCommonConfig({ HOME: '/home/u' }, {});
    expect(config).toMatchObject({
      temporalAddress: '127.0.0.1:7233',
      temporalNamespace: 'default',
      taskQueue: 'egress-proxies',
      logLevel: 'info',
      maxCachedWorkflows: DEFAULT_MAX_CACHED_WORKFLOWS,
      gc: { intervalMs: 600_000, minAgeMs: 600_000, dryRun: false },
      providerCheckIntervalMs: 60_000,
      reconcilePeriodMs: 120_000,
    });
    expect(config.timing.driftPollMs).toBe(600_000);
    expect(config.timing.safetyPollMs).toBe(6 * 3_600_000);
    expect(config.driftSweepMs).toBe(120_000);
    expect(config.reconcilePeriodMs).toBeLessThanOrEqual(5 * 60_000);
    expect(readCommonConfig({}, { reconcilePeriod: '5s' }).reconcilePeriodMs).toBe(5_000);
    expect(config.timing.deletionPollMs).toBe(config.timing.provisioningPollMs);
  });

  it('takes flags over the environment', () => {
    const env = { TEMPORAL_ADDRESS: '127.0.0.2:7233', MAX_CACHED_WORKFLOWS: '300' };
    expect(readCommonConfig(env, {})).toMatchObject({
      temporalAddress: '127.0.0.2:7233',
      maxCachedWorkflows: 300,
    });
    expect(
      readCommonConfig(env, {
        temporalAddress: '127.0.0.3:7233',
        maxCachedWorkflows: '2500',
        driftPoll: '30s',
        safetyPoll: '2h',
        driftSweep: '0',
      }),
    ).toMatchObject({
      temporalAddress: '127.0.0.3:7233',
      maxCachedWorkflows: 2500,
      timing: { driftPollMs: 30_000, safetyPollMs: 7_200_000 },
      driftSweepMs: 0,
    });
  });

  it.each([
    [{ maxCachedWorkflows: '0' }, '--max-cached-workflows'],
    [{ maxCachedWorkflows: '12x' }, '--max-cached-workflows'],
    [{ maxCachedWorkflows: '-5' }, '--max-cached-workflows'],
    [{ driftPoll: 'soon' }, '--drift-poll'],
    [{ safetyPoll: '0' }, 'timing.safetyPollMs'],
    [{ driftSweep: 'often' }, '--drift-sweep'],
    [{ reconcilePeriod: 'often' }, '--reconcile-period'],
    [{ logLevel: 'loud' }, 'logLevel'],
    [{ installation: 'Not_A_Label' }, 'installation'],
  ])('rejects %o naming %s', (flags, named) => {
    expect(() => readCommonConfig({}, flags)).toThrow(ConfigError);
    expect(() => readCommonConfig({}, flags)).toThrow(named);
  });
});
