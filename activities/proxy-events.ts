/**
 * Which Kubernetes Events a Proxy status write stands for: the transitions a
 * person needs to know about, read off the conditions before and after, so
 * each Event's reason is the reason of the condition it reports. Pure: the
 * status-write activity reads the status as it is, computes the new one's
 * events here, and records them after the write lands.
 *
 * Instance creation and release come from the activities that do them
 * (createInstance, removeProxyFinalizer); the rest from here:
 * Provisioned → Running, Replacing, Deleting, DeletionBlocked and each error reason; Healthy
 * → True or False; Ready → True.
 */
import type { Condition, ProxyStatus } from '../resources/proxy-schema.js';
import type { ProxyEvent } from '../kube/events.js';

/** Provisioned reasons worth an Event, with its type and action. Pending, Provisioning and External are not. */
const PROVISIONED: Record<string, Pick<ProxyEvent, 'type' | 'action'>> = {
  Running: { type: 'Normal', action: 'Provision' },
  Replacing: { type: 'Normal', action: 'Replace' },
  Deleting: { type: 'Normal', action: 'Delete' },
  DeletionBlocked: { type: 'Warning', action: 'Delete' },
  QuotaExceeded: { type: 'Warning', action: 'Provision' },
  PermanentError: { type: 'Warning', action: 'Provision' },
  ProviderNotConfigured: { type: 'Warning', action: 'Provision' },
  CloudInitError: { type: 'Warning', action: 'Provision' },
  TransientError: { type: 'Warning', action: 'Provision' },
};

function find(status: ProxyStatus | undefined, type: string): Condition | undefined {
  return status?.conditions?.find((c) => c.type === type);
}

function changed(before: Condition | undefined, after: Condition | undefined): after is Condition {
  return after !== undefined && (before?.status !== after.status || before.reason !== after.reason);
}

export function statusEvents(before: ProxyStatus | undefined, after: ProxyStatus): ProxyEvent[] {
  const events: ProxyEvent[] = [];
  const provisioned = find(after, 'Provisioned');
  if (changed(find(before, 'Provisioned'), provisioned)) {
    const kind = PROVISIONED[provisioned.reason];
    if (kind) events.push({ ...kind, reason: provisioned.reason, note: provisioned.message });
  }
  const healthy = find(after, 'Healthy');
  if (changed(find(before, 'Healthy'), healthy) && healthy.status !== 'Unknown') {
    events.push({
      type: healthy.status === 'True' ? 'Normal' : 'Warning',
      reason: healthy.reason,
      action: 'HealthCheck',
      note:
        healthy.status === 'True'
          ? `became healthy: ${healthy.message}`
          : `became unhealthy: ${healthy.message}`,
    });
  }
  const ready = find(after, 'Ready');
  const wasReady = find(before, 'Ready')?.status === 'True';
  if (ready?.status === 'True' && !wasReady) {
    events.push({
      type: 'Normal',
      reason: 'Ready',
      action: 'Provision',
      note: `usable by crawlers: ${ready.message}`,
    });
  }
  return events;
}
