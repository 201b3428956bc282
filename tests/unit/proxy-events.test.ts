import { describe, expect, it } from 'vitest';
import { statusEvents } from '../../activities/proxy-events.js';
import type { Condition, ProxyStatus } from '../../resources/proxy-schema.js';

const T = '2026-12-01T00:00:00Z';
const cond = (type: string, status: Condition['status'], reason: string, message = ''): Condition => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: T,
});
const status = (...conditions: Condition[]): ProxyStatus => ({ conditions });

describe('statusEvents: the Events a status write stands for', () => {
  const provisioning = status(
    cond('Provisioned', 'False', 'Provisioning', 'instance i is provisioning'),
    cond('Healthy', 'Unknown', 'NotProbed'),
    cond('Ready', 'False', 'Provisioning'),
  );
  const running = status(
    cond('Provisioned', 'True', 'Running', 'instance i is running at 10.0.0.1'),
    cond('Healthy', 'Unknown', 'NotProbed'),
    cond('Ready', 'False', 'NotProbed'),
  );
  const ready = status(
    cond('Provisioned', 'True', 'Running', 'instance i is running at 10.0.0.1'),
    cond('Healthy', 'True', 'ProbeSucceeded', 'probe ok'),
    cond('Ready', 'True', 'Ready', 'leasable at 10.0.0.1'),
  );
  const unhealthy = status(
    cond('Provisioned', 'True', 'Running', 'instance i is running at 10.0.0.1'),
    cond('Healthy', 'False', 'BadStatus', 'the target answered 500'),
    cond('Ready', 'False', 'BadStatus', 'the target answered 500'),
  );

  it('none for the first status (Pending) or for Provisioning (the create activity reports that)', () => {
    expect(statusEvents(undefined, status(cond('Provisioned', 'False', 'Pending')))).toEqual([]);
    expect(statusEvents(undefined, provisioning)).toEqual([]);
  });

  it('Running, then healthy and Ready, each with the condition’s reason', () => {
    expect(statusEvents(provisioning, running)).toEqual([
      { type: 'Normal', reason: 'Running', action: 'Provision', note: 'instance i is running at 10.0.0.1' },
    ]);
    expect(statusEvents(running, ready)).toEqual([
      { type: 'Normal', reason: 'ProbeSucceeded', action: 'HealthCheck', note: 'became healthy: probe ok' },
      {
        type: 'Normal',
        reason: 'Ready',
        action: 'Provision',
        note: 'usable by crawlers: leasable at 10.0.0.1',
      },
    ]);
  });

  it('unhealthy is a Warning with the probe’s reason; Ready going False adds nothing more', () => {
    expect(statusEvents(ready, unhealthy)).toEqual([
      {
        type: 'Warning',
        reason: 'BadStatus',
        action: 'HealthCheck',
        note: 'became unhealthy: the target answered 500',
      },
    ]);
  });

  it('errors are Warnings with the Provisioned reason; Replacing and Deleting are Normal', () => {
    const quota = status(cond('Provisioned', 'False', 'QuotaExceeded', 'quota CPUS exceeded'));
    expect(statusEvents(provisioning, quota)).toEqual([
      { type: 'Warning', reason: 'QuotaExceeded', action: 'Provision', note: 'quota CPUS exceeded' },
    ]);
    const permanent = status(cond('Provisioned', 'False', 'PermanentError', 'bad zone'));
    expect(statusEvents(provisioning, permanent)[0]).toMatchObject({
      type: 'Warning',
      reason: 'PermanentError',
    });
    const replacing = status(
      cond('Provisioned', 'False', 'Replacing', 'replacing instance i: the spec changed'),
    );
    expect(statusEvents(ready, replacing)[0]).toMatchObject({
      type: 'Normal',
      reason: 'Replacing',
      action: 'Replace',
    });
    const deleting = status(cond('Provisioned', 'False', 'Deleting', 'the instance is being deleted'));
    expect(statusEvents(ready, deleting)[0]).toMatchObject({
      type: 'Normal',
      reason: 'Deleting',
      action: 'Delete',
    });
    const blocked = status(
      cond('Provisioned', 'False', 'DeletionBlocked', 'the instance cannot be deleted yet (retried): x'),
    );
    expect(statusEvents(deleting, blocked)).toEqual([
      {
        type: 'Warning',
        reason: 'DeletionBlocked',
        action: 'Delete',
        note: 'the instance cannot be deleted yet (retried): x',
      },
    ]);
  });

  it('a write that changes only messages or latency stands for no Event', () => {
    const later = status(
      cond('Provisioned', 'True', 'Running', 'instance i is running at 10.0.0.1'),
      cond('Healthy', 'True', 'ProbeSucceeded', 'probe ok in 12 ms'),
      cond('Ready', 'True', 'Ready', 'leasable at 10.0.0.1'),
    );
    expect(statusEvents(ready, { ...later, latencyMillis: 12 })).toEqual([]);
  });
});
