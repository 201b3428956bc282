/**
 * ProxyPool object (+ its members in the cache) → the PoolDesired signal.
 * Pure. A member counts only by what the pool decides on (existence,
 * readiness, drain, template hash, spec, labels, the end its provider
 * announced), so a member's routine status write (a latency report)
 * changes nothing the bridge sends.
 */
import { createHash } from 'node:crypto';
import {
  DEFAULT_MAX_LEASES,
  LABEL_POOL_TEMPLATE_HASH,
  type Proxy,
  type ProxyPool,
} from '../resources/proxy-schema.js';
import { templateHashOf } from '../kube/proxy-pools.js';
import type { PoolDesired } from '../workflows/pool/types.js';

/** What a member says to its pool's decisions, as one line. */
function memberLine(p: Proxy): string {
  const conditions = p.status?.conditions ?? [];
  const is = (type: string) => conditions.some((c) => c.type === type && c.status === 'True');
  return JSON.stringify([
    p.metadata.name,
    p.metadata.uid,
    p.metadata.labels?.[LABEL_POOL_TEMPLATE_HASH] ?? '',
    is('Ready'),
    is('Draining'),
    Boolean(p.metadata.deletionTimestamp),
    p.metadata.generation ?? 0,
    p.metadata.labels ?? {},
    p.metadata.annotations ?? {},
    // An end announced after the member was Ready (a Spot notice) is a reason to look now.
    p.status?.expiresAt ?? '',
  ]);
}

export function membersVersion(members: readonly Proxy[]): string {
  const lines = members.map(memberLine).sort();
  return createHash('sha256').update(lines.join('\n')).digest('hex').slice(0, 16);
}

export function poolDesiredOf(pool: ProxyPool, members: readonly Proxy[]): PoolDesired {
  const { strategy, autoscaling, rotation } = pool.spec;
  return {
    generation: pool.metadata.generation ?? 1,
    replicas: pool.spec.replicas,
    templateHash: templateHashOf(pool),
    strategy: {
      maxSurge: strategy.maxSurge,
      maxUnavailable: strategy.maxUnavailable,
      drainTimeoutSeconds: strategy.drainTimeoutSeconds,
    },
    ...(autoscaling
      ? {
          autoscaling: {
            minReplicas: autoscaling.minReplicas,
            maxReplicas: autoscaling.maxReplicas,
            targetUtilization: autoscaling.targetUtilization,
            scaleUpStabilizationMs: autoscaling.scaleUpStabilizationSeconds * 1000,
            scaleDownStabilizationMs: autoscaling.scaleDownStabilizationSeconds * 1000,
          },
        }
      : {}),
    ...(rotation && (rotation.maxAgeSeconds !== undefined || rotation.afterBans)
      ? {
          rotation: {
            ...(rotation.maxAgeSeconds !== undefined ? { maxAgeMs: rotation.maxAgeSeconds * 1000 } : {}),
            ...(rotation.afterBans
              ? {
                  afterBans: {
                    reports: rotation.afterBans.reports,
                    distinctTargets: rotation.afterBans.distinctTargets,
                    windowMs: rotation.afterBans.windowSeconds * 1000,
                  },
                }
              : {}),
          },
        }
      : {}),
    ...(pool.spec.budget
      ? {
          budget: {
            maxPerHour: pool.spec.budget.maxPerHour,
            ...(pool.spec.budget.maxPerDay !== undefined ? { maxPerDay: pool.spec.budget.maxPerDay } : {}),
          },
        }
      : {}),
    maxLeasesPerMember: pool.spec.template.spec.maxLeases ?? DEFAULT_MAX_LEASES,
    deletionRequested: Boolean(pool.metadata.deletionTimestamp),
    membersVersion: membersVersion(members),
  };
}
