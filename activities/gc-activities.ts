/**
 * Activities of the orphan GC workflow: list each provider's marked
 * instances under a deadline of its own, list the live Proxy UIDs, and
 * delete one confirmed orphan (re-reading its marks first, logging loudly).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ProviderRegistry } from '../providers/config.js';
import { classOf, isProviderError, safeCause } from '../providers/errors.js';
import { unlistedOf, type Instance, type Provider } from '../providers/types.js';
import { createProxyClient } from '../kube/proxies.js';
import type { GcEnvironment, ListedInstance, OrphanSighting } from '../workflows/gc/types.js';
import { activityCancellation, withDeadline } from './deadline.js';
import { nonRetryable, toApplicationFailure } from './failures.js';

/** Stable failure types of the GC activities (the workflow logs them; it never branches on messages). */
export const GcFailure = {
  ProviderNotConfigured: 'ProviderNotConfigured',
  ListTimeout: 'ListTimeout',
  ListGarbage: 'ListGarbage',
} as const;

export type DeleteOrphanOutcome = 'deleted' | 'gone' | 'marks-changed';

export interface GcActivities {
  /** The installation identity and the configured providers, from the worker's config. */
  gcEnvironment(): Promise<GcEnvironment>;
  /** One provider's listByTag, bounded by `timeoutMs` even when the backend ignores cancellation. */
  gcListInstances(input: { provider: string; timeoutMs: number }): Promise<ListedInstance[]>;
  /** Every Proxy UID in the cluster (deleting ones included). Throws when the list cannot be read whole. */
  gcListLiveProxyUids(): Promise<string[]>;
  /** Re-reads the instance's marks, then deletes it and logs a WARNING line. */
  gcDeleteOrphan(input: OrphanSighting): Promise<DeleteOrphanOutcome>;
}

export interface GcActivityDeps {
  registry: ProviderRegistry;
  kubeConfig: KubeConfig;
  /** This installation's identity: the only installation mark GC deletes. */
  installation: string;
  logger: Logger;
  /** Page size of the Proxy list. Default 500. */
  proxyPageSize?: number;
  /**
   * A namespace-scoped install's namespaces (`--watch-namespaces`): the live
   * set is their Proxies, listed one namespace at a time. All namespaces when unset.
   */
  namespaces?: readonly string[];
  /**
   * How much older than the provider's own read budget allows (0 without a
   * budget) a listing it made may be and still answer GC's list instead of
   * a call of its own: the drift sweep lists every 2 min by default, so
   * 150 s takes the sweep's. 0: only within the budget.
   */
  listReuseMs?: number;
}

/** How recent a listing GC reuses by default: the drift sweep's default 2 min and a margin. */
export const GC_LIST_REUSE_MS = 150_000;

/** Why a listed value is not an Instance we can vouch for, or undefined when it is one. */
function invalidInstance(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return 'not an object';
  const i = value as Partial<Record<keyof Instance, unknown>>;
  if (typeof i.id !== 'string' || i.id === '') return 'no id';
  if (typeof i.uid !== 'string') return `${i.id}: uid is not a string`;
  if (typeof i.installation !== 'string') return `${i.id}: installation is not a string`;
  if (i.createdAt !== undefined && !(i.createdAt instanceof Date && !Number.isNaN(i.createdAt.getTime())))
    return `${i.id}: createdAt is not a valid Date`;
  return undefined;
}

/** Validates a listing whole: one bad entry means the provider cannot vouch for any of it. */
export function toListedInstances(provider: string, listed: unknown): ListedInstance[] {
  if (!Array.isArray(listed))
    throw nonRetryable(GcFailure.ListGarbage, `${provider}: listByTag returned a non-array`);
  const seen = new Set<string>();
  const out: ListedInstance[] = [];
  for (const value of listed as unknown[]) {
    const problem = invalidInstance(value);
    if (problem !== undefined)
      throw nonRetryable(GcFailure.ListGarbage, `${provider}: listByTag returned garbage (${problem})`);
    const instance = value as Instance;
    if (seen.has(instance.id))
      throw nonRetryable(GcFailure.ListGarbage, `${provider}: listByTag returned ${instance.id} twice`);
    seen.add(instance.id);
    out.push({
      id: instance.id,
      uid: instance.uid,
      installation: instance.installation,
      ...(instance.createdAt === undefined ? {} : { createdAt: instance.createdAt.toISOString() }),
    });
  }
  return out;
}

export function createGcActivities(deps: GcActivityDeps): GcActivities {
  const proxies = createProxyClient(deps.kubeConfig);
  const log = deps.logger.child({ component: 'orphan-gc' });
  const pageSize = deps.proxyPageSize ?? 500;
  const listReuseMs = deps.listReuseMs ?? GC_LIST_REUSE_MS;

  const lookup = (name: string): Provider => {
    const provider = deps.registry.get(name);
    if (!provider)
      throw nonRetryable(GcFailure.ProviderNotConfigured, `provider "${name}" is not configured`);
    return provider;
  };

  return {
    // eslint-disable-next-line @typescript-eslint/require-await
    async gcEnvironment() {
      return {
        installation: deps.installation,
        providers: deps.registry.names().map((name) => ({ name, type: deps.registry.get(name)?.type ?? '' })),
      };
    },

    async gcListInstances({ provider: name, timeoutMs }) {
      const provider = lookup(name);
      try {
        const listed = await withDeadline(
          timeoutMs,
          // A recent listing is as good as a new one here: every instance in it
          // existed when it was made, before the live set is read (the workflow's
          // order), and each deletion re-reads the instance's marks first.
          // GC's listing: the provider may also collect what it made besides instances.
          (signal) => provider.listByTag(signal, { reuse: { withinMs: listReuseMs }, collectOrphans: true }),
          () =>
            nonRetryable(GcFailure.ListTimeout, `${name}: listByTag did not answer within ${timeoutMs} ms`),
        );
        const unlisted = Array.isArray(listed) ? unlistedOf(listed) : [];
        // Only listed instances can become orphans: an unlisted part's are left alone this sweep.
        if (unlisted.length > 0)
          log.warn(
            { provider: name, unlisted: unlisted.map((u) => `${u.target}: ${u.message}`) },
            'part of the provider could not be listed; its instances are left alone this sweep',
          );
        return toListedInstances(name, listed);
      } catch (error) {
        const failure = error instanceof ApplicationFailure ? error : toApplicationFailure(error);
        log.warn(
          { provider: name, type: failure.type, error: failure.message },
          'listing instances failed; skipping this provider for this sweep',
        );
        throw failure;
      }
    },

    async gcListLiveProxyUids() {
      const uids: string[] = [];
      for (const proxy of await proxies.listAll({ namespaces: deps.namespaces, pageSize })) {
        // A Proxy without a UID cannot come from the apiserver; refusing
        // the list is safer than a live set with a hole in it.
        if (!proxy.metadata.uid)
          throw new Error(`Proxy ${proxy.metadata.namespace}/${proxy.metadata.name} has no uid`);
        uids.push(proxy.metadata.uid);
      }
      return uids;
    },

    async gcDeleteOrphan({ provider: name, id, uid }) {
      const provider = lookup(name);
      const signal = activityCancellation();
      let current: Instance;
      try {
        current = await provider.get(id, signal);
      } catch (error) {
        if (classOf(error) === 'NotFound') return 'gone';
        throw toApplicationFailure(error);
      }
      if (current.uid !== uid || current.installation !== deps.installation) {
        log.warn(
          { provider: name, providerID: id, uid, nowUid: current.uid, nowInstallation: current.installation },
          'orphan marks changed since the sweep listed it; not deleting',
        );
        return 'marks-changed';
      }
      log.warn({ provider: name, providerID: id, uid }, 'WARNING: deleting orphaned instance');
      try {
        await provider.delete(id, signal);
      } catch (error) {
        log.error(
          {
            provider: name,
            providerID: id,
            uid,
            error: isProviderError(error) ? error.toJSON() : safeCause(error),
          },
          'deleting orphaned instance failed',
        );
        throw toApplicationFailure(error);
      }
      log.warn({ provider: name, providerID: id, uid }, 'deleted orphaned instance');
      return 'deleted';
    },
  };
}
