/**
 * listByTag for the gcp provider: one paged, filtered aggregated list of
 * the configured project, then one of each other project a providerID has
 * named (projects.ts), so GC and the drift sweep see the VMs still
 * referenced where they were made. Another project that cannot be listed
 * is left out with a warning, like an unreachable zone (absence from a
 * listing is never "gone" for GC). A listing that succeeded is kept
 * (list-cache.ts) for periodic readers within the read budget.
 */
import type { Operations } from '../shared/operation.js';
import { MARK_MANAGED_VALUE, type Instance, type ListOptions } from '../types.js';
import type { ComputeClient } from './compute-client.js';
import type { GcpConfig } from './config.js';
import { LABEL_MANAGED, lastSegment, MANAGED_FILTER, toInstance } from './instance.js';
import type { ListCache } from './list-cache.js';
import type { Projects } from './projects.js';

export interface ListingsDeps {
  compute: ComputeClient;
  listCache: ListCache;
  projects: Projects;
  ops: Operations;
  config: Pick<GcpConfig, 'project'>;
  /** Instances per aggregatedList page. */
  pageSize: number;
}

export class Listings {
  constructor(private readonly deps: ListingsDeps) {}

  listByTag(signal: AbortSignal, options?: ListOptions): Promise<Instance[]> {
    const { listCache, ops } = this.deps;
    if (options?.reuse !== undefined && !signal.aborted) {
      const reused = listCache.reusable(options.reuse.withinMs);
      if (reused !== undefined) {
        ops.log.debug(
          { count: reused.instances.length, ageSeconds: Math.round(reused.ageMs / 1000) },
          'list: answered from the kept listing',
        );
        return Promise.resolve(reused.instances);
      }
    }
    return ops.run('list', '', signal, () => this.list(signal));
  }

  private async list(signal: AbortSignal): Promise<Instance[]> {
    const { compute, config, listCache, ops, pageSize } = this.deps;
    const out: Instance[] = [];
    const started = Date.now();
    const begun = listCache.begin();
    let pages = 0;
    const listed = await this.listProject(config.project, signal);
    out.push(...listed);
    pages += Math.max(1, Math.ceil(listed.length / pageSize));
    for (const project of this.deps.projects.other()) {
      try {
        const more = await this.listProject(project, signal);
        out.push(...more);
        pages += Math.max(1, Math.ceil(more.length / pageSize));
      } catch (err) {
        if (signal.aborted) throw err;
        const c = compute.logApiError('list', '', err);
        ops.log.warn(
          { project, configuredProject: config.project, error: c.summary },
          'list: a project Proxies still reference could not be listed; its VMs are left out',
        );
      }
    }
    listCache.keep(begun, { at: started, latencyMillis: Date.now() - started, instances: out, pages });
    return out;
  }

  /** The managed VMs of one project: one bounded call walking the aggregated list's pages. */
  private async listProject(project: string, signal: AbortSignal): Promise<Instance[]> {
    const { compute, ops, pageSize } = this.deps;
    const { instances } = await compute.api();
    const out: Instance[] = [];
    // Every page repeats the warning for an unreachable zone: a set.
    const unreachable = new Set<string>();
    let stop = false;
    const walk = async () => {
      const pages = instances.aggregatedListAsync(
        { project, filter: MANAGED_FILTER, returnPartialSuccess: true, maxResults: pageSize },
        // The iterator pages by itself; autoPaginate left true only makes gax print a process warning.
        { ...compute.callOptions, autoPaginate: false },
      );
      for await (const [scope, scoped] of pages) {
        if (stop) return;
        if (scoped.warning?.code === 'UNREACHABLE') unreachable.add(scope);
        for (const inst of scoped.instances ?? []) {
          // The filter already guarantees the label; checked again so a
          // filter mistake can never hand GC a VM we do not own.
          if (inst.labels?.[LABEL_MANAGED] !== MARK_MANAGED_VALUE) continue;
          out.push(toInstance(inst, project, lastSegment(inst.zone) || lastSegment(scope)));
        }
      }
    };
    try {
      // The whole list is one bounded call: a page per callTimeoutMs at most, and at most four times that.
      await compute.call(signal, 'list', 'instances.aggregatedList', walk, compute.callTimeoutMs * 4);
    } finally {
      stop = true;
    }
    if (unreachable.size > 0) {
      ops.log.warn(
        { project, unreachable: [...unreachable].sort(), listed: out.length },
        'list: zones left out (unreachable); their VMs are not listed',
      );
    }
    ops.log.debug({ project, filter: MANAGED_FILTER, count: out.length }, 'list');
    return out;
  }
}
