/**
 * delete for the gcp provider, and its tracking of delete operations. The
 * deletion poll calls delete every few seconds, and a second delete on a
 * VM being deleted is refused by the API (400 resourceNotReady). A delete
 * this provider submitted (or found) is followed by its own operation, one
 * GET per poll, where listing the zone's operations on every poll cost a
 * list per VM per poll; only a refused submit (the VM busy with an
 * operation this worker does not know: a delete from another worker, an
 * insert still running) lists the zone's unfinished operations, once.
 * Memory only: a worker that does not know the operation submits the
 * delete, and GCE's `resourceNotReady` answer sends it to the list once.
 */
import type { Operations } from '../shared/operation.js';
import { apiReasons, httpStatus, isInstanceNotFound } from './classify.js';
import type { ComputeClient, Operation } from './compute-client.js';
import type { ListCache } from './list-cache.js';
import type { ZoneOperations } from './operations.js';
import type { Projects } from './projects.js';

/** How many delete operations a provider remembers (one per VM being deleted; the oldest goes first). */
const TRACKED_DELETES_MAX = 10_000;

/** The key of one VM in the delete-operation table. */
function vmKey(project: string, zone: string, name: string): string {
  return `${project}/${zone}/${name}`;
}

export interface DeletesDeps {
  compute: ComputeClient;
  operations: ZoneOperations;
  projects: Projects;
  listCache: ListCache;
  ops: Operations;
}

export class Deletes {
  /** The delete operation submitted (or found) for each VM being deleted, by project/zone/name. */
  private readonly tracked = new Map<string, string>();

  constructor(private readonly deps: DeletesDeps) {}

  /** The VM is gone, or its name is being reused: a delete remembered for it is over. */
  forget(project: string, zone: string, name: string): void {
    this.tracked.delete(vmKey(project, zone, name));
  }

  /** Remembers the delete operation of a VM (bounded: the oldest entry goes first). */
  private track(key: string, operation: string): void {
    this.tracked.delete(key);
    this.tracked.set(key, operation);
    if (this.tracked.size > TRACKED_DELETES_MAX) {
      const oldest = this.tracked.keys().next().value;
      if (oldest !== undefined) this.tracked.delete(oldest);
    }
  }

  /** Submits a delete unless one is already running for this VM (run inside the operation frame). */
  async delete(id: string, signal: AbortSignal): Promise<void> {
    const { compute, ops } = this.deps;
    const { project, zone, name } = this.deps.projects.parseId('delete', id);
    const key = vmKey(project, zone, name);
    const tracked = this.tracked.get(key);
    if (tracked !== undefined) {
      const op = await this.deps.operations.get('delete', project, zone, tracked, signal);
      if (op !== undefined && op.status !== 'DONE') {
        ops.log.debug({ instance: id, operation: tracked, status: op.status }, 'delete: already running');
        return;
      }
      // Done (the VM is gone, or the delete failed) or aged out: forget it
      // and submit again (a 404 for the VM is success, a failed delete is retried).
      this.tracked.delete(key);
    }
    const { instances } = await compute.api();
    try {
      const [lro] = await compute
        .call(signal, 'delete', 'instances.delete', () =>
          instances.delete({ project, zone, instance: name }, compute.callOptions),
        )
        .finally(() => {
          // The VM is going: the kept listing (or one running) still shows it Running.
          this.deps.listCache.forget();
        });
      const op = (lro as { latestResponse?: Operation }).latestResponse ?? {};
      if (op.name) this.track(key, op.name);
      ops.log.info({ instance: id, operation: op.name }, 'delete submitted');
    } catch (err) {
      if (isInstanceNotFound(err, project, zone, name)) {
        compute.logApiError('delete', id, err);
        ops.log.debug({ instance: id }, 'delete: already gone');
        return;
      }
      if (!(httpStatus(err) === 400 && apiReasons(err).includes('resourceNotReady'))) {
        throw this.deps.projects.failIn('delete', id, project, err);
      }
      compute.logApiError('delete', id, err);
      await this.busy(id, project, zone, name, signal, err);
    }
  }

  /** The VM refused a delete as busy: which operation holds it decides. */
  private async busy(
    id: string,
    project: string,
    zone: string,
    name: string,
    signal: AbortSignal,
    refusal: unknown,
  ): Promise<void> {
    const { ops } = this.deps;
    const running = await this.deps.operations.unfinished('delete', project, zone, name, signal);
    const deleting = running.find((o) => o.operationType === 'delete');
    if (deleting?.name) {
      this.track(vmKey(project, zone, name), deleting.name);
      ops.log.debug({ instance: id, operation: deleting.name }, 'delete: already running');
      return;
    }
    const inserting = running.find((o) => o.operationType === 'insert');
    if (inserting !== undefined) {
      throw ops.fail(
        'Transient',
        'delete',
        id,
        `insert operation ${inserting.name ?? ''} is still running; delete once it ends`,
      );
    }
    // Busy with something already over, or not ours to see: resourceNotReady is Transient.
    throw ops.wrap('delete', id, refusal);
  }
}
