/**
 * The projects a gcp provider's VMs live in: the configured one, and any
 * other a providerID named (a Proxy made before `gcp.project` changed). A
 * VM stays where it was made: get and delete go to the project its ID
 * names, listByTag lists those projects too (so GC collects orphans there
 * and the drift sweep sees those VMs) while the worker runs. After a
 * restart a project is learnt again from the first get of such a Proxy
 * (the sweep's first "gone" for it triggers one). Memory only, a handful of
 * names.
 */
import { ProviderError } from '../errors.js';
import { CallEnded } from '../shared/bounded-call.js';
import { parseIdOrFail } from '../shared/identity.js';
import type { Operations } from '../shared/operation.js';
import type { ProviderOperation } from '../types.js';
import type { ComputeClient } from './compute-client.js';
import type { GcpConfig } from './config.js';
import { parseProviderId, type ParsedProviderId } from './instance.js';
import type { ListCache } from './list-cache.js';

export class Projects {
  private readonly others = new Set<string>();

  constructor(
    private readonly config: Pick<GcpConfig, 'project'>,
    private readonly ops: Operations,
    private readonly compute: ComputeClient,
    private readonly listCache: ListCache,
  ) {}

  /** The other projects a providerID has named, sorted. */
  other(): string[] {
    return [...this.others].sort();
  }

  /**
   * The project, zone and name of a providerID. The project is the one the
   * ID names, even when it is no longer the configured one: the VM is where
   * it was made, and asking the configured project would read it as gone
   * (a duplicate) or delete nothing (a leak). An ID in the old form (no
   * project, recorded before the project was part of it) means the
   * configured project.
   */
  parseId(operation: ProviderOperation, id: string): Required<ParsedProviderId> {
    const parsed = parseIdOrFail(
      this.ops,
      operation,
      id,
      parseProviderId,
      'projects/<project>/zones/<zone>/instances/<name>',
    );
    const project = parsed.project ?? this.config.project;
    if (project !== this.config.project) {
      // A project new to this worker: the kept list did not cover it.
      if (!this.others.has(project)) this.listCache.forget();
      this.others.add(project);
      this.ops.log.debug(
        { instance: id, project, configuredProject: this.config.project },
        `${operation}: the VM is in project ${project}, not the configured ${this.config.project}; asking its project`,
      );
    }
    return { project, zone: parsed.zone, name: parsed.name };
  }

  /**
   * A Permanent answer about a VM in another project than the configured
   * one names both projects: a switched `gcp.project` with an identity no
   * longer allowed in the old one is the likely cause, and "check
   * gcp.project" alone would point at the wrong one.
   */
  failIn(operation: ProviderOperation, id: string, project: string, err: unknown): unknown {
    if (project === this.config.project || err instanceof ProviderError || err instanceof CallEnded)
      return err;
    const c = this.compute.logApiError(operation, id, err);
    if (c.errorClass !== 'Permanent') return err;
    return this.ops.fail(
      'Permanent',
      operation,
      id,
      `${c.summary}; the providerID names project ${project}, the configured gcp.project is ${this.config.project} (the VM stays in ${project}: the credentials need access there)`,
      err,
    );
  }
}
