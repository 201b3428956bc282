/**
 * The `gcp` provider: every instance is one Compute Engine VM with an
 * ephemeral external IP, made through `@google-cloud/compute`'s
 * InstancesClient (REST transport).
 *
 * Profile (contract §4): readiness provisioning-window (minutes of boot);
 * create-return submit with a bounded look at the insert operation (see
 * create); delete-return returns-early (`get` shows the VM until the delete
 * operation removes it); ip-source assigned-at-create (the external NAT IP
 * of the first NIC); gc-mark native-labels (instance labels, in the insert);
 * created-at backend-timestamp (`creationTimestamp`); list-partial
 * omit-unreachable (one aggregated list with `returnPartialSuccess` per
 * project, the configured one and any other a providerID named; zones or
 * projects left out are logged); quota detected (403 quotaExceeded and quota codes
 * of a failed operation; 429 and 403 rate limits are Transient); not-found
 * status-404 naming the instance (a 404 for the project, zone or anything
 * else, and any token-source failure, is never NotFound); primary-key
 * name-is-key (`projects/<project>/zones/<zone>/instances/<name>`; the old
 * `zones/<zone>/instances/<name>` means the configured project);
 * provisioning-state native (PROVISIONING, STAGING, REPAIRING); async-ops
 * task-handle (operations are read: the insert's in create, the delete's
 * own by name on each delete poll, unfinished ones on the instance in get
 * and when a delete is refused as busy); secondary-resources cascade (boot disk
 * auto-delete); credentials environment (Application Default Credentials,
 * or the entry's own key file and/or impersonated service account,
 * credentials.ts; resolved by the provider on the first call and on every
 * call until they exist, so a provider without them fails only its own
 * calls: see auth.ts); client-kind vendor-sdk; timeouts per-call (each request bounded
 * by callTimeoutMs and the caller's signal).
 *
 * Calls used: instances insert, get, delete, aggregatedList (the seed's
 * four) and zoneOperations get, wait and list (to close the seed's gaps: a
 * failed insert reaches the Proxy's status, a delete is not resubmitted
 * while one runs, a 409 waits on the insert holding the name). A stocked-out
 * zone falls back to `gcp.zones` of the same region (placement.ts); check()
 * reuses a fresh listByTag instead of its own call.
 *
 * Construction does nothing (contract §7): the clients are built on the
 * first call, after the provider has resolved ADC itself (never inside the
 * client library, whose failure there escaped as an unhandled rejection).
 */
// Types only at import: the client library (with its protobuf descriptors,
// ~190 MiB of heap) loads on the first call, so processes that configure no
// gcp provider (the bridge, the api, a local-only worker) never pay for it.
import type { Agent as HttpsAgent } from 'node:https';
import type { InstancesClient, ZoneOperationsClient, protos } from '@google-cloud/compute';
import type { AuthClient } from 'google-auth-library';
import type { Logger } from 'pino';
import { ProviderError } from '../errors.js';
import {
  MARK_MANAGED_VALUE,
  type CreateRequest,
  type ErrorClass,
  type Instance,
  type ListOptions,
  type Provider,
  type ProviderOperation,
  type TargetStatus,
} from '../types.js';
import { ComputeAuth, CredentialsError } from './auth.js';
import { EntryCredentials, endpointAgent } from './credentials.js';
import { candidateZones, checkCreateRequest } from './placement.js';
import {
  apiReasons,
  checkReason,
  classify,
  classifyOperationError,
  httpStatus,
  isInstanceNotFound,
  notFoundResource,
  type Classification,
  type ClassifyCall,
} from './classify.js';
import type { GcpConfig } from './config.js';
import {
  buildInsertBody,
  formatProviderId,
  LABEL_MANAGED,
  LABEL_UID,
  lastSegment,
  MANAGED_FILTER,
  parseProviderId,
  toInstance,
  type ParsedProviderId,
  type ComputeInstance,
} from './instance.js';
import { providerCall } from '../../tracing/seam.js';
import { boundedCall, CallEnded } from '../bounded-call.js';
import { operations, type OperationFrame, type Operations } from '../operation.js';

export const GCP_PROVIDER_TYPE = 'gcp';
/** What check() reports as the address when no endpoint override is configured. */
export const COMPUTE_ADDRESS = 'compute.googleapis.com';

type Operation = protos.google.cloud.compute.v1.IOperation;
type ComputeModule = {
  InstancesClient: typeof InstancesClient;
  ZoneOperationsClient: typeof ZoneOperationsClient;
};

export interface GcpProviderOptions {
  /** The configured name. */
  name: string;
  config: GcpConfig;
  logger: Logger;
  /** An auth client to use instead of Application Default Credentials (tests: a fake token). */
  authClient?: AuthClient;
  /** Bound on each Compute request (default 30 s; the caller's signal can only shorten it). */
  callTimeoutMs?: number;
  /** How long create watches its insert operation before returning (default 45 s). */
  insertWaitMs?: number;
  /** Longest single zoneOperations.wait request while create watches (default 10 s). */
  operationWaitMs?: number;
  /** Instances per aggregatedList page in listByTag (default 500). */
  listPageSize?: number;
  /**
   * How long past its read budget (see `listReuseMs`; 0 with the budget
   * off) a listByTag that succeeded answers check() without a call of its
   * own: default 150 s, the drift sweep's 2 min and a margin, by when the
   * sweep has listed again. Any failed Compute call since ends it.
   */
  checkReuseMs?: number;
}

/**
 * A periodic reader fires on a schedule's grid: a list made at one fire is
 * due again at the fire its budget names, not one later because that fire's
 * activity started a few milliseconds earlier than the last one's.
 */
const LIST_DUE_SLACK_MS = 2_000;

/** The last complete listByTag, while nothing since has made it stale. */
interface KeptListing {
  /** When it started (Date.now()): what it shows is at most this old. */
  at: number;
  latencyMillis: number;
  instances: Instance[];
  /** The aggregated-list pages it took (at least one per project listed). */
  pages: number;
}

export interface GcpProvider extends Provider {
  readonly config: GcpConfig;
  check(signal: AbortSignal): Promise<TargetStatus[]>;
  idAliases(id: string): string[];
  close(): Promise<void>;
}

export function createGcpProvider(options: GcpProviderOptions): GcpProvider {
  const log = options.logger.child({ provider: options.name, providerType: GCP_PROVIDER_TYPE });
  return new GcpProviderImpl(options, log);
}

interface Clients {
  instances: InstancesClient;
  operations: ZoneOperationsClient;
}

/** A ProviderError's own message, without the provider, operation and instance it is prefixed with, nor the class. */
function innerMessage(err: ProviderError): string {
  const prefix = `${err.provider}: ${err.operation}${err.instance === '' ? '' : ` ${err.instance}`}: `;
  const text = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
  return text.replace(/ \([A-Za-z]+\)$/, '');
}

/** How long one create watches its inserts: insertWaitMs from the first insert's answer, across zones. */
interface InsertBudget {
  deadline?: number;
}

/** How many delete operations a provider remembers (one per VM being deleted; the oldest goes first). */
const TRACKED_DELETES_MAX = 10_000;

/** The key of one VM in the delete-operation table. */
function vmKey(project: string, zone: string, name: string): string {
  return `${project}/${zone}/${name}`;
}

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

class GcpProviderImpl implements GcpProvider {
  readonly type = GCP_PROVIDER_TYPE;
  /** listByTag is one filtered, paged aggregatedList. */
  readonly capabilities = { cheapListByTag: true };
  readonly name: string;
  readonly config: GcpConfig;
  private clients: Clients | undefined;
  /** The one build of the clients in flight (concurrent first calls share it; cleared when it ends). */
  private building: Promise<Clients> | undefined;
  private loading: Promise<ComputeModule> | undefined;
  /** The https agent trusting gcp.endpointCaFile, when set (closed with the clients). */
  private agent: HttpsAgent | undefined;
  /** This entry's credentials: resolved on the first call and again on each call until they exist. */
  private readonly entryCredentials: EntryCredentials;
  private readonly callTimeoutMs: number;
  private readonly insertWaitMs: number;
  private readonly operationWaitMs: number;
  private readonly pageSize: number;
  private readonly checkReuseMs: number;
  /**
   * The last listByTag that succeeded, while nothing has made it stale: no
   * Compute call failed since, this provider inserted or deleted nothing
   * since, and no get saw one of its VMs otherwise. check(), and the drift
   * sweep and GC (`reuse`), may answer from it (see listReuseMs).
   */
  private lastList: KeptListing | undefined;
  /** Bumped whenever lastList goes stale: a listing started before the bump is not kept. */
  private listEpoch = 0;
  private readonly frame: OperationFrame;
  /** fail() and run() in this provider's frame. */
  private readonly ops: Operations;
  /**
   * The delete operation submitted (or found) for each VM being deleted, by
   * project/zone/name: the deletion poll calls delete every few seconds, and
   * one GET of the operation answers "still running" where listing the
   * zone's operations on every poll cost a list per VM per poll. Memory
   * only: a worker that does not know the operation submits the delete, and
   * GCE's `resourceNotReady` answer sends it to the list once.
   */
  private readonly deletes = new Map<string, string>();
  /**
   * Projects other than the configured one that a providerID named (a
   * Proxy made before `gcp.project` changed): listByTag lists them too, so
   * GC collects orphans there and the drift sweep sees those VMs, while
   * the worker runs. After a restart a project is learnt again from the
   * first get of such a Proxy (the sweep's first "gone" for it triggers
   * one). Memory only, a handful of names.
   */
  private readonly otherProjects = new Set<string>();

  constructor(
    options: GcpProviderOptions,
    private readonly log: Logger,
  ) {
    this.name = options.name;
    this.config = options.config;
    this.callTimeoutMs = options.callTimeoutMs ?? 30_000;
    this.insertWaitMs = options.insertWaitMs ?? 45_000;
    this.operationWaitMs = options.operationWaitMs ?? 10_000;
    this.pageSize = options.listPageSize ?? 500;
    this.checkReuseMs = options.checkReuseMs ?? 150_000;
    this.entryCredentials = new EntryCredentials(this.config, options.authClient);
    this.frame = {
      provider: this.name,
      log,
      classify: (operation, instance, err) => this.wrap(operation, instance, err),
      callerCaused: (err) => err instanceof CallEnded && err.by === 'caller',
    };
    this.ops = operations(this.frame);
  }

  // -- plumbing -------------------------------------------------------------

  private wrap(
    operation: ProviderOperation,
    instance: string,
    err: unknown,
    call: ClassifyCall = 'other',
  ): ProviderError {
    if (err instanceof ProviderError) return err;
    if (err instanceof CallEnded) return this.ops.fail('Transient', operation, instance, err.message);
    const c = this.logApiError(operation, instance, err, call);
    return this.ops.fail(c.errorClass, operation, instance, c.summary, err);
  }

  /** The raw status and reasons at debug, because the class collapses them (never the body). */
  private logApiError(
    operation: ProviderOperation,
    instance: string,
    err: unknown,
    call: ClassifyCall = 'other',
  ): Classification {
    const c = classify(err, call);
    if (err instanceof CredentialsError) {
      this.log.debug({ operation, instance, errorClass: c.errorClass }, 'credentials failed');
    } else {
      this.log.debug(
        { operation, instance, httpStatus: c.status, reasons: c.reasons },
        'Compute API call failed',
      );
    }
    return c;
  }

  /**
   * One Compute request (or one bounded sequence of page requests), bounded
   * by the caller's signal and by `timeoutMs`. The SDK's REST transport
   * ignores its own deadlines, so the bound is enforced here: the promise
   * settles the moment either fires (the abandoned HTTP request is left to
   * finish on its own).
   */
  private call<T>(
    signal: AbortSignal,
    operation: ProviderOperation,
    request: string,
    fn: () => Promise<T>,
    timeoutMs = this.callTimeoutMs,
  ): Promise<T> {
    // One client span per Compute request (list: its bounded page walk), its result the error class.
    const bounded = () =>
      boundedCall(signal, timeoutMs, 'Compute API call', fn).catch((err: unknown) => {
        // A failure other than "no such thing" or the caller giving up: the next check must ask Compute itself.
        if (httpStatus(err) !== 404 && !(err instanceof CallEnded && err.by === 'caller')) this.forgetList();
        throw err;
      });
    return providerCall(this, request, bounded, {
      operation,
      classify: (err) =>
        err instanceof CallEnded
          ? 'Transient'
          : classify(err, request === 'instances.insert' ? 'insert' : 'other').errorClass,
    });
  }

  /** Per-request options: no SDK retries (the activity retry policy owns retries) and our timeout. */
  private get callOptions() {
    return { timeout: this.callTimeoutMs, maxRetries: 0 };
  }

  /** The kept listing is no longer what Compute would answer (or a call failed): list again next time. */
  private forgetList(): void {
    this.lastList = undefined;
    this.listEpoch += 1;
  }

  /**
   * How long the kept listing is fresh for a periodic reader, by the entry's
   * read budget: the listing's pages may be spent `listCallsPerVmHour`
   * times per listed VM per hour, so a small fleet lists less often (5 VMs
   * at 0.75: every 16 min) and a large one on every drift sweep; never
   * longer than `listMaxAgeSeconds`. 0 when the budget is off.
   */
  private listReuseMs(kept: KeptListing): number {
    const budget = this.config.listCallsPerVmHour;
    if (budget <= 0) return 0;
    const perListMs = (kept.pages * 3_600_000) / (budget * Math.max(1, kept.instances.length));
    return Math.min(perListMs, this.config.listMaxAgeSeconds * 1000);
  }

  /**
   * A get saw this VM (or its absence): when the kept listing says
   * otherwise, it is stale (a VM that started, stopped, moved or went away
   * since), and the next periodic reader lists again rather than report
   * drift the Proxy's own poll has already seen.
   */
  private noteSeen(id: string, seen: Instance | undefined): void {
    const kept = this.lastList;
    if (kept === undefined) return;
    const listed = kept.instances.find((i) => i.id === id);
    if (listed === undefined && seen === undefined) return;
    if (
      listed === undefined ||
      seen === undefined ||
      listed.state !== seen.state ||
      (listed.ip ?? '') !== (seen.ip ?? '')
    )
      this.forgetList();
  }

  /**
   * The clients, built on the first call (contract §7: construction dials
   * nothing) and kept once they work. Credentials come first, from our own
   * call (auth.ts says why); then each client's stub is created and awaited
   * here, so a failure of it is this call's error and never an unobserved
   * rejection. A build that fails leaves nothing behind: the next call tries
   * again (credentials mounted later are picked up without a restart).
   */
  private api(): Promise<Clients> {
    if (this.clients !== undefined) return Promise.resolve(this.clients);
    this.building ??= this.build().finally(() => {
      this.building = undefined;
    });
    return this.building;
  }

  private async build(): Promise<Clients> {
    this.loading ??= import('@google-cloud/compute');
    const compute = await this.loading;
    const resolved = await this.entryCredentials.resolve(compute.InstancesClient.scopes);
    const agent = await endpointAgent(this.config, resolved.credential);
    this.agent?.destroy();
    this.agent = agent;
    const auth =
      agent === undefined
        ? resolved
        : new ComputeAuth(resolved.inner, resolved.credential, agent, resolved.impersonation);
    const opts: NonNullable<ConstructorParameters<typeof InstancesClient>[0]> = { fallback: true };
    if (this.config.endpoint !== undefined) {
      const url = new URL(this.config.endpoint);
      const protocol = url.protocol.replace(':', '');
      opts.apiEndpoint = url.hostname;
      opts.port = url.port === '' ? (protocol === 'https' ? 443 : 80) : Number(url.port);
      opts.protocol = protocol;
    }
    // The client takes any object with fetch and getRequestHeaders as its auth client.
    opts.authClient = auth as unknown as AuthClient;
    const clients: Clients = {
      instances: new compute.InstancesClient(opts),
      operations: new compute.ZoneOperationsClient(opts),
    };
    // Both stubs now, observed: every later method call re-throws this promise
    // from an unobserved .catch, so a client whose stub failed is never used.
    const made = await Promise.allSettled([clients.instances.initialize(), clients.operations.initialize()]);
    const failed = made.find((r) => r.status === 'rejected');
    if (failed !== undefined) {
      await Promise.allSettled([clients.instances.close(), clients.operations.close()]);
      throw failed.reason instanceof CredentialsError
        ? failed.reason
        : new CredentialsError(
            'Transient',
            'Unreachable',
            `the Compute client could not be set up with ${auth.credential}`,
          );
    }
    this.clients = clients;
    this.log.info(
      { project: this.config.project, endpoint: this.address(), credentials: auth.credential },
      'gcp provider ready',
    );
    return clients;
  }

  private address(): string {
    return this.config.endpoint ?? COMPUTE_ADDRESS;
  }

  /**
   * The project, zone and name of a providerID. The project is the one the
   * ID names, even when it is no longer the configured one: the VM is where
   * it was made, and asking the configured project would read it as gone
   * (a duplicate) or delete nothing (a leak). An ID in the old form (no
   * project, recorded before the project was part of it) means the
   * configured project.
   */
  private parseId(operation: ProviderOperation, id: string): Required<ParsedProviderId> {
    const parsed = typeof id === 'string' ? parseProviderId(id) : undefined;
    if (parsed === undefined) {
      throw this.ops.fail(
        'Permanent',
        operation,
        JSON.stringify(String(id).slice(0, 80)),
        'malformed providerID (want projects/<project>/zones/<zone>/instances/<name>)',
      );
    }
    const project = parsed.project ?? this.config.project;
    if (project !== this.config.project) {
      // A project new to this worker: the kept list did not cover it.
      if (!this.otherProjects.has(project)) this.forgetList();
      this.otherProjects.add(project);
      this.log.debug(
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
  private failIn(operation: ProviderOperation, id: string, project: string, err: unknown): unknown {
    if (project === this.config.project || err instanceof ProviderError || err instanceof CallEnded)
      return err;
    const c = this.logApiError(operation, id, err);
    if (c.errorClass !== 'Permanent') return err;
    return this.ops.fail(
      'Permanent',
      operation,
      id,
      `${c.summary}; the providerID names project ${project}, the configured gcp.project is ${this.config.project} (the VM stays in ${project}: the credentials need access there)`,
      err,
    );
  }

  /** Remembers the delete operation of a VM (bounded: the oldest entry goes first). */
  private trackDelete(key: string, operation: string): void {
    this.deletes.delete(key);
    this.deletes.set(key, operation);
    if (this.deletes.size > TRACKED_DELETES_MAX) {
      const oldest = this.deletes.keys().next().value;
      if (oldest !== undefined) this.deletes.delete(oldest);
    }
  }

  /**
   * Unfinished operations on one instance. One zoneOperations.list filtered
   * on status server-side; the target is matched here by its path suffix
   * (the API's targetLink host is not ours to predict).
   */
  private async unfinishedOperations(
    operation: ProviderOperation,
    project: string,
    zone: string,
    name: string,
    signal: AbortSignal,
  ): Promise<Operation[]> {
    const { operations } = await this.api();
    const suffix = `/zones/${zone}/instances/${name}`;
    const [ops] = await this.call(signal, operation, 'zoneOperations.list', () =>
      operations.list(
        { project, zone, filter: 'status != DONE', maxResults: 500 },
        { ...this.callOptions, autoPaginate: true },
      ),
    );
    return ops.filter((o) => (o.targetLink ?? '').endsWith(suffix) && o.status !== 'DONE');
  }

  // -- the contract ---------------------------------------------------------

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, () => this.creating(req, instance, signal));
  }

  private async creating(req: CreateRequest, instance: string, signal: AbortSignal): Promise<string> {
    const zones = candidateZones(this.validate(req, instance), this.config.zones);
    // One watch budget for the whole create, whichever zones it tries, from the first insert's answer.
    const budget: InsertBudget = {};
    if (zones.length > 1) {
      // A retried create must not make a second VM of this name in an
      // earlier zone that has capacity again: look for it first (one call).
      const placed = await this.placedZone(req.name, zones, signal);
      if (placed !== undefined) return this.insertIn(req, placed, budget, signal);
    }
    const stockedOut: string[] = [];
    let last: ProviderError | undefined;
    for (const zone of zones) {
      try {
        return await this.insertIn(req, zone, budget, signal);
      } catch (err) {
        // No capacity or quota in this zone: the next one of the region, if any.
        if (!(err instanceof ProviderError) || err.errorClass !== 'QuotaExceeded') throw err;
        stockedOut.push(zone);
        last = err;
        if (zones.length > 1) {
          this.log.warn(
            { instance: req.name, zone, next: zones[stockedOut.length] },
            'create: no capacity or quota in the zone',
          );
        }
      }
    }
    // (zones is never empty, so last is set here.)
    if (last === undefined) throw this.ops.fail('Transient', 'create', req.name, 'no zone to try');
    if (zones.length === 1) throw last;
    throw this.ops.fail(
      'QuotaExceeded',
      'create',
      req.name,
      `no capacity or quota in any zone tried (${stockedOut.join(', ')}); last: ${innerMessage(last)}`,
    );
  }

  /** The candidate zone already holding a VM of this name (a retried create), from one filtered aggregated list. */
  private async placedZone(name: string, zones: string[], signal: AbortSignal): Promise<string | undefined> {
    const { instances } = await this.api();
    let found: string | undefined;
    await this.call(signal, 'create', 'instances.aggregatedList', async () => {
      const pages = instances.aggregatedListAsync(
        {
          project: this.config.project,
          filter: `name = ${name}`,
          returnPartialSuccess: true,
          maxResults: 500,
        },
        { ...this.callOptions, autoPaginate: false },
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
    zone: string,
    budget: InsertBudget,
    signal: AbortSignal,
  ): Promise<string> {
    const id = formatProviderId(this.config.project, zone, req.name);
    // A delete remembered for this name belongs to a VM that is gone (a replacement reuses the name).
    this.deletes.delete(vmKey(this.config.project, zone, req.name));
    const { instances } = await this.api();
    const body = buildInsertBody(req, this.config, zone);
    let operation: Operation;
    try {
      const [lro] = await this.call(signal, 'create', 'instances.insert', () =>
        instances.insert({ project: this.config.project, zone, instanceResource: body }, this.callOptions),
      ).finally(() => {
        // Whatever the answer, a VM may now exist that the kept listing (or one running) lacks.
        this.forgetList();
      });
      operation = (lro as { latestResponse?: Operation }).latestResponse ?? {};
    } catch (err) {
      // A synchronous 404 here (image, network, machine type) is never NotFound: classified as insert's.
      if (httpStatus(err) !== 409) throw this.wrap('create', req.name, err, 'insert');
      this.logApiError('create', id, err);
      return this.adopt(req, zone, id, signal);
    }
    this.log.info(
      {
        instance: req.name,
        zone,
        uid: req.uid,
        machineType: req.placement.machineType,
        image: req.placement.image,
        project: this.config.project,
        network: this.config.subnetwork === undefined ? this.config.network : undefined,
        subnetwork: this.config.subnetwork,
        networkTag: this.config.networkTag,
        diskSizeGb: this.config.diskSizeGb,
        diskType: this.config.diskType,
        provisioningModel: this.config.provisioningModel,
        internalOnly: this.config.internalOnly,
        serviceAccount: this.config.serviceAccount?.email,
        port: req.port,
        operation: operation.name,
        // Never the text: it may hold secrets.
        cloudInitBytes: Buffer.byteLength(req.cloudInit ?? '', 'utf8'),
      },
      'insert submitted',
    );
    budget.deadline ??= Date.now() + this.insertWaitMs;
    if (operation.name) await this.watchInsert(zone, operation, id, budget.deadline, signal);
    return id;
  }

  /**
   * Watches the insert operation until `deadline` (insertWaitMs after the first insert was answered): an insert the API
   * accepted can still fail (no quota or capacity in the zone, an image
   * that does not exist). Seen here, the failure is create's answer, with
   * its class and codes, so it reaches the Proxy's status (Failed with the
   * reason, or the QuotaExceeded condition and a later retry) instead of
   * reading as NotFound on the next get. An operation still running at the
   * bound is left to get, which reports the VM as it provisions.
   */
  private async watchInsert(
    zone: string,
    first: Operation,
    id: string,
    deadline: number,
    signal: AbortSignal,
  ): Promise<void> {
    const { operations } = await this.api();
    let op = first;
    while (op.status !== 'DONE') {
      const left = deadline - Date.now();
      if (left <= 0) {
        this.log.info({ instance: id, operation: op.name }, 'insert still running; get reports its progress');
        return;
      }
      const waitMs = Math.min(left, this.operationWaitMs);
      [op] = await this.call(
        signal,
        'create',
        'zoneOperations.wait',
        () =>
          operations.wait(
            { project: this.config.project, zone, operation: first.name ?? '' },
            this.callOptions,
          ),
        // The server holds a wait up to two minutes; our budget is the smaller.
        waitMs + 1_000,
      ).catch((err: unknown) => {
        // Our own bound on one wait is not a failure: look again while time is left.
        if (err instanceof CallEnded && err.by === 'timeout') return [op];
        throw err;
      });
    }
    const codes = operationCodes(op);
    if (codes.length === 0 && !op.error) return;
    const status = typeof op.httpErrorStatusCode === 'number' ? op.httpErrorStatusCode : undefined;
    const errorClass = classifyOperationError(codes, status);
    this.log.warn(
      { instance: id, operation: op.name, codes, httpErrorStatusCode: status },
      'insert operation failed',
    );
    throw this.ops.fail(
      errorClass,
      'create',
      id,
      `insert operation ${op.name ?? ''} failed: ${codes.join(', ') || 'unknown error'}` +
        `${status === undefined ? '' : ` (HTTP ${status})`}; ${operationHint(codes, errorClass)}` +
        ` (gcloud compute operations describe ${op.name ?? ''} --zone ${zone} --project ${this.config.project})`,
    );
  }

  /** Placement and marks checked before any API call (placement.ts); the zone, or Permanent naming the field. */
  private validate(req: CreateRequest, instance: string): string {
    const checked = checkCreateRequest(req, this.config);
    if ('problem' in checked) throw this.ops.fail('Permanent', 'create', instance, checked.problem);
    return checked.zone;
  }

  /** 409 on insert: a VM of this name exists. It is ours only if its UID label says so. */
  private async adopt(req: CreateRequest, zone: string, id: string, signal: AbortSignal): Promise<string> {
    const existing = await this.existingVm(req.name, zone, signal);
    const owner = existing.labels?.[LABEL_UID] ?? '';
    if (owner !== req.uid) {
      throw this.ops.fail(
        'Permanent',
        'create',
        req.name,
        `a VM with this name belongs to another owner (uid label "${owner.slice(0, 64)}", want "${req.uid}"); not adopting it`,
      );
    }
    this.log.debug({ instance: req.name, zone }, 'create: adopted the existing VM');
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
    const { instances, operations } = await this.api();
    const project = this.config.project;
    const deadline = Date.now() + this.insertWaitMs;
    for (;;) {
      try {
        const [existing] = await this.call(signal, 'create', 'instances.get', () =>
          instances.get({ project, zone, instance: name }, this.callOptions),
        );
        return existing;
      } catch (err) {
        if (!isInstanceNotFound(err, project, zone, name)) throw err;
        this.logApiError('create', name, err);
      }
      const left = deadline - Date.now();
      const inserting =
        left > 0
          ? (await this.unfinishedOperations('create', project, zone, name, signal)).find(
              (o) => o.operationType === 'insert',
            )
          : undefined;
      if (inserting?.name == null) {
        throw this.ops.fail('Transient', 'create', name, 'the existing VM disappeared during create; retry');
      }
      const waitMs = Math.min(left, this.operationWaitMs);
      this.log.debug(
        { instance: name, operation: inserting.name },
        'create: the name is taken by an insert still running; waiting on it',
      );
      await this.call(
        signal,
        'create',
        'zoneOperations.wait',
        () => operations.wait({ project, zone, operation: inserting.name ?? '' }, this.callOptions),
        waitMs + 1_000,
      ).catch((err: unknown) => {
        if (!(err instanceof CallEnded && err.by === 'timeout')) throw err;
      });
    }
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id), signal, async () => {
      const { project, zone, name } = this.parseId('get', id);
      const { instances } = await this.api();
      try {
        const [inst] = await this.call(signal, 'get', 'instances.get', () =>
          instances.get({ project, zone, instance: name }, this.callOptions),
        );
        const out = toInstance(inst, project, zone);
        this.log.debug({ instance: id, status: inst.status, state: out.state, ip: out.ip }, 'get');
        this.noteSeen(out.id, out);
        return out;
      } catch (err) {
        // Only Compute's own 404 for this VM means gone: not one for the project or zone, not a token source's.
        if (!isInstanceNotFound(err, project, zone, name)) throw this.failIn('get', id, project, err);
        this.logApiError('get', id, err);
      }
      // Gone: a delete remembered for it is over, and a kept listing showing it is stale.
      this.deletes.delete(vmKey(project, zone, name));
      this.noteSeen(formatProviderId(project, zone, name), undefined);
      // Gone, unless an insert is still being processed: then the name is
      // taken and a NotFound would make the control plane create again.
      const pending = (await this.unfinishedOperations('get', project, zone, name, signal)).find(
        (o) => o.operationType === 'insert',
      );
      if (pending !== undefined) {
        throw this.ops.fail(
          'Transient',
          'get',
          id,
          `insert operation ${pending.name ?? ''} is still running`,
        );
      }
      throw this.ops.fail('NotFound', 'get', id, 'no such VM');
    });
  }

  /**
   * Submits a delete unless one is already running for this VM: the
   * deletion poll calls delete every few seconds, and a second delete on a
   * VM being deleted is refused by the API (400 resourceNotReady). A delete
   * this provider submitted (or found) is followed by its own operation, one
   * GET per poll; only a refused submit (the VM busy with an operation this
   * worker does not know: a delete from another worker, an insert still
   * running) lists the zone's unfinished operations, once.
   */
  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id), signal, async () => {
      const { project, zone, name } = this.parseId('delete', id);
      const key = vmKey(project, zone, name);
      const tracked = this.deletes.get(key);
      if (tracked !== undefined) {
        const op = await this.operation('delete', project, zone, tracked, signal);
        if (op !== undefined && op.status !== 'DONE') {
          this.log.debug({ instance: id, operation: tracked, status: op.status }, 'delete: already running');
          return;
        }
        // Done (the VM is gone, or the delete failed) or aged out: forget it
        // and submit again (a 404 for the VM is success, a failed delete is retried).
        this.deletes.delete(key);
      }
      const { instances } = await this.api();
      try {
        const [lro] = await this.call(signal, 'delete', 'instances.delete', () =>
          instances.delete({ project, zone, instance: name }, this.callOptions),
        ).finally(() => {
          // The VM is going: the kept listing (or one running) still shows it Running.
          this.forgetList();
        });
        const op = (lro as { latestResponse?: Operation }).latestResponse ?? {};
        if (op.name) this.trackDelete(key, op.name);
        this.log.info({ instance: id, operation: op.name }, 'delete submitted');
      } catch (err) {
        if (isInstanceNotFound(err, project, zone, name)) {
          this.logApiError('delete', id, err);
          this.log.debug({ instance: id }, 'delete: already gone');
          return;
        }
        if (!(httpStatus(err) === 400 && apiReasons(err).includes('resourceNotReady'))) {
          throw this.failIn('delete', id, project, err);
        }
        this.logApiError('delete', id, err);
        await this.busyDelete(id, project, zone, name, signal, err);
      }
    });
  }

  /** The VM refused a delete as busy: which operation holds it decides. */
  private async busyDelete(
    id: string,
    project: string,
    zone: string,
    name: string,
    signal: AbortSignal,
    refusal: unknown,
  ): Promise<void> {
    const running = await this.unfinishedOperations('delete', project, zone, name, signal);
    const deleting = running.find((o) => o.operationType === 'delete');
    if (deleting?.name) {
      this.trackDelete(vmKey(project, zone, name), deleting.name);
      this.log.debug({ instance: id, operation: deleting.name }, 'delete: already running');
      return;
    }
    const inserting = running.find((o) => o.operationType === 'insert');
    if (inserting !== undefined) {
      throw this.ops.fail(
        'Transient',
        'delete',
        id,
        `insert operation ${inserting.name ?? ''} is still running; delete once it ends`,
      );
    }
    // Busy with something already over, or not ours to see: resourceNotReady is Transient.
    throw this.wrap('delete', id, refusal);
  }

  /** One zone operation by name; undefined when the API no longer has it (operations age out). */
  private async operation(
    operation: ProviderOperation,
    project: string,
    zone: string,
    name: string,
    signal: AbortSignal,
  ): Promise<Operation | undefined> {
    const { operations } = await this.api();
    try {
      const [op] = await this.call(signal, operation, 'zoneOperations.get', () =>
        operations.get({ project, zone, operation: name }, this.callOptions),
      );
      return op;
    } catch (err) {
      if (notFoundResource(err) === `projects/${project}/zones/${zone}/operations/${name}`) return undefined;
      throw err;
    }
  }

  /**
   * A VM of the configured project is also named by the old ID form
   * (`zones/<zone>/instances/<name>`), which Proxies made before the project
   * was in the ID still carry: the drift sweep matches them through this
   * instead of reading every such Proxy as gone on every sweep.
   */
  idAliases(id: string): string[] {
    const parsed = parseProviderId(id);
    if (parsed?.project !== this.config.project) return [];
    return [`zones/${parsed.zone}/instances/${parsed.name}`];
  }

  /**
   * One paged, filtered aggregated list of the configured project, then one
   * of each other project a providerID has named (see `otherProjects`), so
   * GC and the drift sweep see the VMs still referenced where they were
   * made. Another project that cannot be listed is left out with a warning,
   * like an unreachable zone (absence from a listing is never "gone" for GC).
   */
  listByTag(signal: AbortSignal, options?: ListOptions): Promise<Instance[]> {
    const kept = this.lastList;
    if (options?.reuse !== undefined && kept !== undefined && !signal.aborted) {
      const ageMs = Date.now() - kept.at;
      // The budget says when the list is due again (the sweep, withinMs 0, lists then); a
      // caller with a window of its own (GC) takes it that much longer, by when the
      // sweep has listed, so it never lists just before the sweep would.
      if (ageMs + LIST_DUE_SLACK_MS < this.listReuseMs(kept) + options.reuse.withinMs) {
        this.log.debug(
          { count: kept.instances.length, ageSeconds: Math.round(ageMs / 1000) },
          'list: answered from the kept listing',
        );
        return Promise.resolve(kept.instances.map((i) => ({ ...i })));
      }
    }
    return this.ops.run('list', '', signal, async () => {
      const out: Instance[] = [];
      const started = Date.now();
      const epoch = this.listEpoch;
      let pages = 0;
      const listed = await this.listProject(this.config.project, signal);
      out.push(...listed);
      pages += Math.max(1, Math.ceil(listed.length / this.pageSize));
      for (const project of [...this.otherProjects].sort()) {
        try {
          const more = await this.listProject(project, signal);
          out.push(...more);
          pages += Math.max(1, Math.ceil(more.length / this.pageSize));
        } catch (err) {
          if (signal.aborted) throw err;
          const c = this.logApiError('list', '', err);
          this.log.warn(
            { project, configuredProject: this.config.project, error: c.summary },
            'list: a project Proxies still reference could not be listed; its VMs are left out',
          );
        }
      }
      // Kept unless something made listings stale while this one ran (an insert, a delete, a failure).
      if (epoch === this.listEpoch)
        this.lastList = {
          at: started,
          latencyMillis: Date.now() - started,
          instances: out.map((i) => ({ ...i })),
          pages,
        };
      return out;
    });
  }

  /** The managed VMs of one project: one bounded call walking the aggregated list's pages. */
  private async listProject(project: string, signal: AbortSignal): Promise<Instance[]> {
    const { instances } = await this.api();
    const out: Instance[] = [];
    // Every page repeats the warning for an unreachable zone: a set.
    const unreachable = new Set<string>();
    let stop = false;
    const walk = async () => {
      const pages = instances.aggregatedListAsync(
        { project, filter: MANAGED_FILTER, returnPartialSuccess: true, maxResults: this.pageSize },
        // The iterator pages by itself; autoPaginate left true only makes gax print a process warning.
        { ...this.callOptions, autoPaginate: false },
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
      // The whole list is one bounded call: a page per this.callTimeoutMs at most, and at most four times that.
      await this.call(signal, 'list', 'instances.aggregatedList', walk, this.callTimeoutMs * 4);
    } finally {
      stop = true;
    }
    if (unreachable.size > 0) {
      this.log.warn(
        { project, unreachable: [...unreachable].sort(), listed: out.length },
        'list: zones left out (unreachable); their VMs are not listed',
      );
    }
    this.log.debug({ project, filter: MANAGED_FILTER, count: out.length }, 'list');
    return out;
  }

  /**
   * One target, the project: one aggregatedList page holding at most one
   * managed VM. It proves the credentials, the Compute API being enabled
   * and compute.instances.list (what listByTag and GC rely on) in a single
   * request, whatever the project's size; not create or delete rights.
   */
  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const started = Date.now();
    const target = { name: this.config.project, address: this.address() };
    if (signal.aborted) {
      return [{ ...target, ready: false, reason: 'Timeout', message: 'check aborted before it ran' }];
    }
    // The drift sweep lists every 2 min (or less often, by the read budget)
    // and the checks run every minute: a list that succeeded, with no call
    // failing since, proved the same (credentials, the API,
    // compute.instances.list), so the check reuses it instead of a call.
    const recent = this.lastList;
    if (recent !== undefined && Date.now() - recent.at < this.listReuseMs(recent) + this.checkReuseMs) {
      return [
        {
          ...target,
          ready: true,
          reason: 'Reachable',
          latencyMillis: recent.latencyMillis,
          details: {
            network: this.config.network,
            networkTag: this.config.networkTag,
            from: `the aggregated list ${Math.round((Date.now() - recent.at) / 1000)} s ago`,
          },
        },
      ];
    }
    try {
      const { instances } = await this.api();
      await this.call(signal, 'check', 'instances.aggregatedList', async () => {
        const pages = instances.aggregatedListAsync(
          { project: this.config.project, filter: MANAGED_FILTER, maxResults: 1, returnPartialSuccess: true },
          { ...this.callOptions, autoPaginate: false },
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
          details: { network: this.config.network, networkTag: this.config.networkTag },
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
      this.log.debug({ reason, httpStatus: httpStatus(err) }, 'check failed');
      return [{ ...target, ready: false, reason, message, latencyMillis: Date.now() - started }];
    }
  }

  async close(): Promise<void> {
    const clients = this.clients;
    this.clients = undefined;
    this.forgetList();
    this.agent?.destroy();
    this.agent = undefined;
    if (clients === undefined) return;
    await Promise.allSettled([clients.instances.close(), clients.operations.close()]);
  }
}
