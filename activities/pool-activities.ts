/**
 * The ProxyPool workflow's hands: it lists, makes, deletes and restores its
 * member Proxies and writes the pool's status, all through the typed
 * clients in kube/. The template is read here from the pool itself, so it
 * never enters workflow history (it may carry inline cloud-init).
 *
 * Every call is idempotent (a retried create finds its own member; a
 * delete of a gone member is a no-op), and none throws for an answer the
 * pool can live with: a refused create is an Event on the pool and a member
 * fewer, made again at the next look.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import {
  LABEL_POOL,
  LABEL_POOL_TEMPLATE_HASH,
  type Proxy,
  type ProxyPool,
} from '../resources/proxy-schema.js';
import { apiErrorLine, httpCode } from '../kube/errors.js';
import type { EventRecorder } from '../kube/events.js';
import { createProviderHealthClient } from '../kube/provider-healths.js';
import { createProxyClient } from '../kube/proxies.js';
import {
  canonicalJson,
  controllingPool,
  createProxyPoolClient,
  memberProxy,
  memberTemplate,
  poolSelector,
  templateHashOf,
} from '../kube/proxy-pools.js';
import type { PoolCostObservation, PoolMember, PoolRef } from '../workflows/pool/types.js';
import { COSTING_PHASES, instanceHourPrice, type PriceBook } from '../providers/prices.js';
import type { PoolActivities } from './types.js';

export interface PoolActivitiesDeps {
  kubeConfig: KubeConfig;
  logger: Logger;
  events?: EventRecorder;
  /**
   * Whether this worker's calls to a provider are paused (its circuit is
   * open), with the last failure: a pool on that provider pauses rotation
   * and scale-up.
   */
  providerPaused?: (provider: string) => string | undefined;
  /**
   * The providers config's prices: the list reports what the members cost
   * (the pool's costPerHour, its budget). Absent: no cost is reported.
   */
  prices?: PriceBook;
}

const proxiesText = (n: number): string => `${n} ${n === 1 ? 'proxy' : 'proxies'}`;

function condition(proxy: Proxy, type: string): boolean {
  return (proxy.status?.conditions ?? []).some((c) => c.type === type && c.status === 'True');
}

/** Whether a member is what the pool's template makes now: spec equal, template labels and annotations present. */
export function matchesTemplate(proxy: Proxy, pool: ProxyPool): boolean {
  const template = memberTemplate(pool);
  if (canonicalJson(proxy.spec) !== canonicalJson(template.spec)) return false;
  const labels = proxy.metadata.labels ?? {};
  const annotations = proxy.metadata.annotations ?? {};
  return (
    Object.entries(template.labels).every(([k, v]) => labels[k] === v) &&
    labels[LABEL_POOL] === pool.metadata.name &&
    Object.entries(template.annotations).every(([k, v]) => annotations[k] === v)
  );
}

export function memberOf(proxy: Proxy, pool: ProxyPool | undefined, currentHash: string): PoolMember {
  const hash = proxy.metadata.labels?.[LABEL_POOL_TEMPLATE_HASH] ?? '';
  return {
    name: proxy.metadata.name,
    uid: proxy.metadata.uid ?? '',
    templateHash: hash,
    ready: condition(proxy, 'Ready') && !proxy.metadata.deletionTimestamp,
    deleting: Boolean(proxy.metadata.deletionTimestamp),
    draining: condition(proxy, 'Draining'),
    createdAt: proxy.metadata.creationTimestamp ?? '',
    ...(proxy.status?.expiresAt ? { expiresAt: proxy.status.expiresAt } : {}),
    // Only a member of the current template can be out of step with it; older ones are being replaced.
    matchesTemplate: !pool || hash !== currentHash || matchesTemplate(proxy, pool),
  };
}

/**
 * What the pool's members cost: how many run (their phase), at the hourly
 * price of the template's entry and machine type (the price of the members
 * the pool makes now, which a budget is about).
 */
export function costOf(prices: PriceBook, pool: ProxyPool, members: readonly Proxy[]): PoolCostObservation {
  const { provider = '', placement } = pool.spec.template.spec;
  const perInstanceHour = instanceHourPrice(prices, provider, placement?.machineType);
  return {
    ...(prices.currency !== undefined ? { currency: prices.currency } : {}),
    ...(perInstanceHour !== undefined ? { perInstanceHour } : {}),
    running: members.filter((p) => COSTING_PHASES.has(p.status?.phase ?? '')).length,
  };
}

export function createPoolActivities(deps: PoolActivitiesDeps): PoolActivities {
  const proxies = createProxyClient(deps.kubeConfig);
  const pools = createProxyPoolClient(deps.kubeConfig);
  const log = deps.logger.child({ component: 'pool-activities' });

  const event = async (
    ref: PoolRef,
    type: 'Normal' | 'Warning',
    reason: string,
    action: string,
    note: string,
  ): Promise<void> => {
    await deps.events?.record({ ...ref, kind: 'ProxyPool' }, { type, reason, action, note });
  };

  const healths = createProviderHealthClient(deps.kubeConfig);
  /** Ready unless this worker's circuit is open or the ProviderHealth's Ready condition is False. */
  const providerState = async (name: string): Promise<{ name: string; ready: boolean; message: string }> => {
    const paused = deps.providerPaused?.(name);
    if (paused !== undefined) return { name, ready: false, message: `calls paused: ${paused}` };
    const health = await healths.get(name);
    const ready = health?.status?.conditions?.find((c) => c.type === 'Ready');
    if (ready?.status === 'False')
      return { name, ready: false, message: `${ready.reason}: ${ready.message}` };
    return { name, ready: true, message: ready ? ready.reason : 'not checked yet' };
  };

  const ownedMembers = async (ref: PoolRef): Promise<Proxy[]> => {
    const list = await proxies.list(ref.namespace, { labelSelector: poolSelector(ref.name) });
    // The label finds them; the controller reference says they are this pool's (never another's).
    return list.items.filter((p) => controllingPool(p)?.uid === ref.uid);
  };

  return {
    async listPoolMembers({ pool: ref }) {
      const pool = await pools.read(ref);
      const hash = pool ? templateHashOf(pool) : '';
      const owned = await ownedMembers(ref);
      const members = owned.map((p) => memberOf(p, pool, hash));
      const watched = pool && (pool.spec.autoscaling || pool.spec.rotation);
      const provider = watched ? await providerState(pool.spec.template.spec.provider ?? '') : undefined;
      const cost = pool && deps.prices ? costOf(deps.prices, pool, owned) : undefined;
      return {
        poolExists: pool !== undefined,
        templateHash: hash,
        members,
        ...(provider ? { provider } : {}),
        ...(cost ? { cost } : {}),
      };
    },

    async createPoolMembers({ pool: ref, templateHash, names }) {
      const pool = await pools.read(ref);
      if (!pool || templateHashOf(pool) !== templateHash) return { created: 0 };
      let created = 0;
      const refused: string[] = [];
      for (const name of names) {
        try {
          await proxies.create(memberProxy(pool, name));
          created++;
        } catch (error) {
          if (httpCode(error) === 409) {
            const existing = await proxies.get(ref.namespace, name);
            if (existing && controllingPool(existing)?.uid === ref.uid) created++;
            continue;
          }
          const code = httpCode(error);
          if (code === undefined || code >= 500 || code === 429) throw error;
          refused.push(`${name}: ${apiErrorLine(error)}`);
        }
      }
      if (created > 0) {
        await event(
          ref,
          'Normal',
          'ScalingUp',
          'Create',
          `created ${proxiesText(created)} from template ${templateHash}`,
        );
      }
      if (refused.length > 0) {
        log.warn({ pool: `${ref.namespace}/${ref.name}`, refused }, 'the apiserver refused a member');
        await event(ref, 'Warning', 'CreateRefused', 'Create', refused.join('; '));
      }
      return { created };
    },

    async deletePoolMembers({ pool: ref, members, reason }) {
      let deleted = 0;
      const gone: typeof members = [];
      for (const m of members) {
        if ((await proxies.delete({ namespace: ref.namespace, name: m.name, uid: m.uid })) === 'deleted') {
          deleted++;
          gone.push(m);
        }
      }
      if (reason === 'Rotated') {
        // One Event per member: `kubectl describe pxpool` says which proxy went and why.
        for (const m of gone) {
          const why =
            m.rotation === 'Banned'
              ? 'its ban reports reached spec.rotation.afterBans'
              : m.rotation === 'Expiring'
                ? 'its provider ends it soon (status.expiresAt)'
                : 'it reached spec.rotation.maxAgeSeconds';
          await event(
            ref,
            'Normal',
            'Rotated',
            'Delete',
            `rotating ${m.name} out (${m.rotation ?? 'MaxAge'}): ${why}; it drains its leases, a new proxy takes its place`,
          );
        }
        return { deleted };
      }
      if (deleted > 0) {
        const what =
          reason === 'PoolDeleted'
            ? 'the pool is deleted'
            : reason === 'RollingOut'
              ? 'rolled over'
              : 'scaled down';
        await event(
          ref,
          'Normal',
          reason,
          'Delete',
          `deleting ${proxiesText(deleted)} (${what}); each drains its leases first: ${members.map((m) => m.name).join(', ')}`,
        );
      }
      return { deleted };
    },

    async restorePoolMembers({ pool: ref, templateHash, members }) {
      const pool = await pools.read(ref);
      if (!pool || templateHashOf(pool) !== templateHash) return { restored: 0 };
      const made = memberTemplate(pool);
      let restored = 0;
      for (const m of members) {
        const proxy = await proxies.get(ref.namespace, m.name);
        if (!proxy || proxy.metadata.uid !== m.uid || proxy.metadata.deletionTimestamp) continue;
        const outcome = await proxies.patch(
          { namespace: ref.namespace, name: m.name, uid: m.uid },
          {
            spec: made.spec,
            labels: {
              ...(proxy.metadata.labels ?? {}),
              ...made.labels,
              [LABEL_POOL]: ref.name,
              [LABEL_POOL_TEMPLATE_HASH]: templateHash,
            },
            annotations: { ...(proxy.metadata.annotations ?? {}), ...made.annotations },
          },
        );
        if (outcome === 'patched') restored++;
      }
      if (restored > 0) {
        await event(
          ref,
          'Normal',
          'Restored',
          'Restore',
          `put ${proxiesText(restored)} edited by hand back to the template: ${members.map((m) => m.name).join(', ')}`,
        );
      }
      return { restored };
    },

    async writePoolStatus({ pool: ref, status, event: change }) {
      const written = await pools.writeStatus(ref, status);
      if (written === 'written' && change) await event(ref, change.type, change.reason, 'Scale', change.note);
      return written;
    },
  };
}
