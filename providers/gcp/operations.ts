/**
 * Zone operations, read to close the seed's gaps: one by name (a delete's
 * own, on each deletion poll), the unfinished ones on an instance, and the
 * insert's, watched for a bounded time so a failed insert is create's
 * answer (with its class and codes) rather than a NotFound on the next get.
 */
import type { Operations } from '../shared/operation.js';
import { CallEnded } from '../shared/bounded-call.js';
import type { ErrorClass, ProviderOperation } from '../types.js';
import { classifyOperationError, notFoundResource } from './classify.js';
import type { ComputeClient, Operation } from './compute-client.js';
import type { GcpConfig } from './config.js';

/** Reason codes of a finished operation's error, identifiers only. */
function operationCodes(op: Operation): string[] {
  return (op.error?.errors ?? []).map((e) => e.code ?? '').filter((c) => /^[A-Z][A-Z0-9_]{0,63}$/.test(c));
}

/** What a user can do about a failed insert, by code; the operation's own message is never copied. */
function operationHint(codes: string[], errorClass: ErrorClass): string {
  if (errorClass === 'QuotaExceeded') return 'no quota or capacity in the zone now; retried later';
  if (codes.includes('RESOURCE_NOT_FOUND') || codes.includes('NOT_FOUND'))
    return 'check placement.image, placement.machineType and the network';
  if (errorClass === 'Permanent') return 'fix the placement or the provider config';
  return 'retried';
}

export class ZoneOperations {
  constructor(
    private readonly compute: ComputeClient,
    private readonly ops: Operations,
    private readonly config: Pick<GcpConfig, 'project'>,
    /** Longest single zoneOperations.wait request. */
    private readonly operationWaitMs: number,
  ) {}

  /** One zone operation by name; undefined when the API no longer has it (operations age out). */
  async get(
    operation: ProviderOperation,
    project: string,
    zone: string,
    name: string,
    signal: AbortSignal,
  ): Promise<Operation | undefined> {
    const { operations } = await this.compute.api();
    try {
      const [op] = await this.compute.call(signal, operation, 'zoneOperations.get', () =>
        operations.get({ project, zone, operation: name }, this.compute.callOptions),
      );
      return op;
    } catch (err) {
      if (notFoundResource(err) === `projects/${project}/zones/${zone}/operations/${name}`) return undefined;
      throw err;
    }
  }

  /**
   * Unfinished operations on one instance. One zoneOperations.list filtered
   * on status server-side; the target is matched here by its path suffix
   * (the API's targetLink host is not ours to predict).
   */
  async unfinished(
    operation: ProviderOperation,
    project: string,
    zone: string,
    name: string,
    signal: AbortSignal,
  ): Promise<Operation[]> {
    const { operations } = await this.compute.api();
    const suffix = `/zones/${zone}/instances/${name}`;
    const [ops] = await this.compute.call(signal, operation, 'zoneOperations.list', () =>
      operations.list(
        { project, zone, filter: 'status != DONE', maxResults: 500 },
        { ...this.compute.callOptions, autoPaginate: true },
      ),
    );
    return ops.filter((o) => (o.targetLink ?? '').endsWith(suffix) && o.status !== 'DONE');
  }

  /**
   * One zoneOperations.wait of at most `leftMs` (and operationWaitMs);
   * `fallback` when our own bound on it ends it first (not a failure: the
   * caller looks again while time is left).
   */
  async wait<T>(
    project: string,
    zone: string,
    name: string,
    leftMs: number,
    signal: AbortSignal,
    fallback: T,
  ): Promise<Operation | T> {
    const { operations } = await this.compute.api();
    const waitMs = Math.min(leftMs, this.operationWaitMs);
    return this.compute
      .call(
        signal,
        'create',
        'zoneOperations.wait',
        () => operations.wait({ project, zone, operation: name }, this.compute.callOptions),
        // The server holds a wait up to two minutes; our budget is the smaller.
        waitMs + 1_000,
      )
      .then(
        ([op]) => op,
        (err: unknown) => {
          if (err instanceof CallEnded && err.by === 'timeout') return fallback;
          throw err;
        },
      );
  }

  /**
   * Watches the insert operation until `deadline` (insertWaitMs after the
   * first insert was answered): an insert the API accepted can still fail
   * (no quota or capacity in the zone, an image that does not exist). Seen
   * here, the failure is create's answer, with its class and codes, so it
   * reaches the Proxy's status (Failed with the reason, or the
   * QuotaExceeded condition and a later retry) instead of reading as
   * NotFound on the next get. An operation still running at the bound is
   * left to get, which reports the VM as it provisions.
   */
  async watchInsert(
    zone: string,
    first: Operation,
    id: string,
    deadline: number,
    signal: AbortSignal,
  ): Promise<void> {
    const project = this.config.project;
    let op = first;
    while (op.status !== 'DONE') {
      const left = deadline - Date.now();
      if (left <= 0) {
        this.ops.log.info(
          { instance: id, operation: op.name },
          'insert still running; get reports its progress',
        );
        return;
      }
      op = await this.wait(project, zone, first.name ?? '', left, signal, op);
    }
    const codes = operationCodes(op);
    if (codes.length === 0 && !op.error) return;
    const status = typeof op.httpErrorStatusCode === 'number' ? op.httpErrorStatusCode : undefined;
    const errorClass = classifyOperationError(codes, status);
    this.ops.log.warn(
      { instance: id, operation: op.name, codes, httpErrorStatusCode: status },
      'insert operation failed',
    );
    throw this.ops.fail(
      errorClass,
      'create',
      id,
      `insert operation ${op.name ?? ''} failed: ${codes.join(', ') || 'unknown error'}` +
        `${status === undefined ? '' : ` (HTTP ${status})`}; ${operationHint(codes, errorClass)}` +
        ` (gcloud compute operations describe ${op.name ?? ''} --zone ${zone} --project ${project})`,
    );
  }
}
