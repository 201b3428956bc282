/**
 * check() for the gcp provider: one target, the project. One
 * aggregatedList page holding at most one managed VM proves the
 * credentials, the Compute API being enabled and compute.instances.list
 * (what listByTag and GC rely on) in a single request, whatever the
 * project's size; not create or delete rights. A listing that succeeded
 * recently, with no call failing since, proved the same and answers
 * instead of a call.
 */
import { CallEnded } from '../shared/bounded-call.js';
import type { Operations } from '../shared/operation.js';
import type { TargetStatus } from '../types.js';
import { CredentialsError } from './auth.js';
import { checkReason, classify, httpStatus } from './classify.js';
import type { ComputeClient } from './compute-client.js';
import type { GcpConfig } from './config.js';
import { MANAGED_FILTER } from './instance.js';
import type { ListCache } from './list-cache.js';

export async function checkProject(
  deps: {
    compute: ComputeClient;
    listCache: ListCache;
    ops: Operations;
    config: GcpConfig;
    /** How long past its read budget a listing answers check() (see GcpProviderOptions.checkReuseMs). */
    checkReuseMs: number;
  },
  signal: AbortSignal,
): Promise<TargetStatus[]> {
  const { compute, config } = deps;
  const started = Date.now();
  const target = { name: config.project, address: compute.address() };
  if (signal.aborted) {
    return [{ ...target, ready: false, reason: 'Timeout', message: 'check aborted before it ran' }];
  }
  // The drift sweep lists every 2 min (or less often, by the read budget)
  // and the checks run every minute: a list that succeeded, with no call
  // failing since, proved the same (credentials, the API,
  // compute.instances.list), so the check reuses it instead of a call.
  const recent = deps.listCache.recent(deps.checkReuseMs);
  if (recent !== undefined) {
    return [
      {
        ...target,
        ready: true,
        reason: 'Reachable',
        latencyMillis: recent.latencyMillis,
        details: {
          network: config.network,
          networkTag: config.networkTag,
          from: `the aggregated list ${Math.round((Date.now() - recent.at) / 1000)} s ago`,
        },
      },
    ];
  }
  try {
    const { instances } = await compute.api();
    await compute.call(signal, 'check', 'instances.aggregatedList', async () => {
      const pages = instances.aggregatedListAsync(
        { project: config.project, filter: MANAGED_FILTER, maxResults: 1, returnPartialSuccess: true },
        { ...compute.callOptions, autoPaginate: false },
      );
      // The first entry comes from the first page; stop there (the iterator would fetch every page).
      for await (const entry of pages) {
        void entry;
        break;
      }
    });
    return [
      {
        ...target,
        ready: true,
        reason: 'Reachable',
        latencyMillis: Date.now() - started,
        details: { network: config.network, networkTag: config.networkTag },
      },
    ];
  } catch (err) {
    const ended = err instanceof CallEnded;
    const reason = checkReason(err, ended || signal.aborted);
    const message = ended
      ? err.message
      : err instanceof CredentialsError
        ? `credentials: ${err.message}`
        : `aggregated list (managed filter, maxResults 1): ${classify(err).summary}`;
    deps.ops.log.debug({ reason, httpStatus: httpStatus(err) }, 'check failed');
    return [{ ...target, ready: false, reason, message, latencyMillis: Date.now() - started }];
  }
}
