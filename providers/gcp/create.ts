/**
 * create for the gcp provider: the request checked before any call
 * (placement.ts), one insert per candidate zone until one has capacity (a
 * stocked-out zone falls back to `gcp.zones` of the same region), a 409
 * adopted only when the existing VM's UID label is the request's, and the
 * insert operation watched within one budget for the whole create.
 */
import { ProviderError } from '../errors.js';
import { CallEnded } from '../shared/bounded-call.js';
import { foreignOwner } from '../shared/identity.js';
import type { Operations } from '../shared/operation.js';
import type { CreateRequest } from '../types.js';
import { httpStatus, isInstanceNotFound } from './classify.js';
import type { ComputeClient, Operation } from './compute-client.js';
import type { GcpConfig } from './config.js';
import type { Deletes } from './deletes.js';
import {
  buildInsertBody,
  formatProviderId,
  LABEL_UID,
  lastSegment,
  vmUserData,
  type ComputeInstance,
} from './instance.js';
import type { ListCache } from './list-cache.js';
import type { ZoneOperations } from './operations.js';
import { candidateZones, checkCreateRequest } from './placement.js';

/** How long one create watches its inserts: insertWaitMs from the first insert's answer, across zones. */
interface InsertBudget {
  deadline?: number;
}

/** A ProviderError's own message, without the provider, operation and instance it is prefixed with, nor the class. */
function innerMessage(err: ProviderError): string {
  const prefix = `${err.provider}: ${err.operation}${err.instance === '' ? '' : ` ${err.instance}`}: `;
  const text = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
  return text.replace(/ \([A-Za-z]+\)$/, '');
}

export interface InsertsDeps {
  compute: ComputeClient;
  operations: ZoneOperations;
  deletes: Deletes;
  listCache: ListCache;
  ops: Operations;
  config: GcpConfig;
  /** How long create watches its insert operation before returning. */
  insertWaitMs: number;
}

export class Inserts {
  constructor(private readonly deps: InsertsDeps) {}

  /** The request's VM inserted (or adopted); its providerID. Runs inside the operation frame. */
  async create(req: CreateRequest, instance: string, signal: AbortSignal): Promise<string> {
    const { ops } = this.deps;
    // Made once: every zone tried gets the same user-data (one salt for the htpasswd).
    const userData = vmUserData(req);
    const zones = candidateZones(this.validate(req, instance, userData), this.deps.config.zones);
    // One watch budget for the whole create, whichever zones it tries, from the first insert's answer.
    const budget: InsertBudget = {};
    if (zones.length > 1) {
      // A retried create must not make a second VM of this name in an
      // earlier zone that has capacity again: look for it first (one call).
      const placed = await this.placedZone(req.name, zones, signal);
      if (placed !== undefined) return this.insertIn(req, userData, placed, budget, signal);
    }
    const stockedOut: string[] = [];
    let last: ProviderError | undefined;
    for (const zone of zones) {
      try {
        return await this.insertIn(req, userData, zone, budget, signal);
      } catch (err) {
        // No capacity or quota in this zone: the next one of the region, if any.
        if (!(err instanceof ProviderError) || err.errorClass !== 'QuotaExceeded') throw err;
        stockedOut.push(zone);
        last = err;
        if (zones.length > 1) {
          ops.log.warn(
            { instance: req.name, zone, next: zones[stockedOut.length] },
            'create: no capacity or quota in the zone',
          );
        }
      }
    }
    // (zones is never empty, so last is set here.)
    if (last === undefined) throw ops.fail('Transient', 'create', req.name, 'no zone to try');
    if (zones.length === 1) throw last;
    throw ops.fail(
      'QuotaExceeded',
      'create',
      req.name,
      `no capacity or quota in any zone tried (${stockedOut.join(', ')}); last: ${innerMessage(last)}`,
    );
  }

  /** Placement and marks checked before any API call (placement.ts); the zone, or Permanent naming the field. */
  private validate(req: CreateRequest, instance: string, userData: string | undefined): string {
    const checked = checkCreateRequest(req, this.deps.config, userData);
    if ('problem' in checked) throw this.deps.ops.fail('Permanent', 'create', instance, checked.problem);
    return checked.zone;
  }

  /** The candidate zone already holding a VM of this name (a retried create), from one filtered aggregated list. */
  private async placedZone(name: string, zones: string[], signal: AbortSignal): Promise<string | undefined> {
    const { compute } = this.deps;
    const { instances } = await compute.api();
    let found: string | undefined;
    await compute.call(signal, 'create', 'instances.aggregatedList', async () => {
      const pages = instances.aggregatedListAsync(
        {
          project: this.deps.config.project,
          filter: `name = ${name}`,
          returnPartialSuccess: true,
          maxResults: 500,
        },
        { ...compute.callOptions, autoPaginate: false },
      );
      for await (const [scope, scoped] of pages) {
        for (const inst of scoped.instances ?? []) {
          const zone = lastSegment(inst.zone) || lastSegment(scope);
          if (inst.name === name && zones.includes(zone)) found ??= zone;
        }
      }
    });
    return found;
  }

  /** One insert in one zone: submitted, adopted on 409, its operation watched within the create's budget. */
  private async insertIn(
    req: CreateRequest,
    userData: string | undefined,
    zone: string,
    budget: InsertBudget,
    signal: AbortSignal,
  ): Promise<string> {
    const { compute, config, ops } = this.deps;
    const id = formatProviderId(config.project, zone, req.name);
    // A delete remembered for this name belongs to a VM that is gone (a replacement reuses the name).
    this.deps.deletes.forget(config.project, zone, req.name);
    const { instances } = await compute.api();
    const body = buildInsertBody(req, config, zone, userData);
    let operation: Operation;
    try {
      const [lro] = await compute
        .call(signal, 'create', 'instances.insert', () =>
          instances.insert({ project: config.project, zone, instanceResource: body }, compute.callOptions),
        )
        .finally(() => {
          // Whatever the answer, a VM may now exist that the kept listing (or one running) lacks.
          this.deps.listCache.forget();
        });
      operation = (lro as { latestResponse?: Operation }).latestResponse ?? {};
    } catch (err) {
      if (httpStatus(err) !== 409) throw this.insertFailure(req.name, err);
      compute.logApiError('create', id, err);
      return this.adopt(req, zone, id, signal);
    }
    ops.log.info(
      {
        instance: req.name,
        zone,
        uid: req.uid,
        machineType: req.placement.machineType,
        image: req.placement.image,
        project: config.project,
        network: config.subnetwork === undefined ? config.network : undefined,
        subnetwork: config.subnetwork,
        networkTag: config.networkTag,
        diskSizeGb: config.diskSizeGb,
        diskType: config.diskType,
        provisioningModel: config.provisioningModel,
        internalOnly: config.internalOnly,
        serviceAccount: config.serviceAccount?.email,
        port: req.port,
        operation: operation.name,
        // Never the text: it may hold secrets (and the htpasswd).
        cloudInitBytes: Buffer.byteLength(req.cloudInit ?? '', 'utf8'),
        credentialsPart: req.credentials !== undefined,
      },
      'insert submitted',
    );
    budget.deadline ??= Date.now() + this.deps.insertWaitMs;
    if (operation.name) await this.deps.operations.watchInsert(zone, operation, id, budget.deadline, signal);
    return id;
  }

  /** A synchronous insert failure: a 404 here (image, network, machine type) is never NotFound, so insert's own class. */
  private insertFailure(name: string, err: unknown): ProviderError {
    if (err instanceof ProviderError || err instanceof CallEnded)
      return this.deps.ops.wrap('create', name, err);
    const c = this.deps.compute.logApiError('create', name, err, 'insert');
    return this.deps.ops.fail(c.errorClass, 'create', name, c.summary, err);
  }

  /** 409 on insert: a VM of this name exists. It is ours only if its UID label says so. */
  private async adopt(req: CreateRequest, zone: string, id: string, signal: AbortSignal): Promise<string> {
    const existing = await this.existingVm(req.name, zone, signal);
    const owner = existing.labels?.[LABEL_UID] ?? '';
    if (owner !== req.uid) throw foreignOwner(this.deps.ops, req.name, 'a VM', owner, req.uid, 'uid label');
    this.deps.ops.log.debug({ instance: req.name, zone }, 'create: adopted the existing VM');
    return id;
  }

  /**
   * The VM an insert's 409 says exists. GCE takes the name at once but
   * shows a new VM to get only a moment later (two concurrent creates of
   * one Proxy meet exactly this): a 404 with an insert of that name still
   * running waits on that operation (bounded by insertWaitMs) and reads
   * again. A 404 with no insert running is a VM that went away meanwhile.
   */
  private async existingVm(name: string, zone: string, signal: AbortSignal): Promise<ComputeInstance> {
    const { compute, ops } = this.deps;
    const { instances } = await compute.api();
    const project = this.deps.config.project;
    const deadline = Date.now() + this.deps.insertWaitMs;
    for (;;) {
      try {
        const [existing] = await compute.call(signal, 'create', 'instances.get', () =>
          instances.get({ project, zone, instance: name }, compute.callOptions),
        );
        return existing;
      } catch (err) {
        if (!isInstanceNotFound(err, project, zone, name)) throw err;
        compute.logApiError('create', name, err);
      }
      const left = deadline - Date.now();
      const inserting =
        left > 0
          ? (await this.deps.operations.unfinished('create', project, zone, name, signal)).find(
              (o) => o.operationType === 'insert',
            )
          : undefined;
      if (inserting?.name == null) {
        throw ops.fail('Transient', 'create', name, 'the existing VM disappeared during create; retry');
      }
      ops.log.debug(
        { instance: name, operation: inserting.name },
        'create: the name is taken by an insert still running; waiting on it',
      );
      await this.deps.operations.wait(project, zone, inserting.name, left, signal, undefined);
    }
  }
}
