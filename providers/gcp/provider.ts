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
 * With `gcp.firewall` the entry also owns a firewall rule (firewall.ts):
 * check() reports it as a second target, creating or correcting it, and
 * orphan GC's listing (`collectOrphans`) deletes the rules of entries no
 * longer configured. The installation and the configured entries come with
 * the options, from the composition root (ProviderDeps).
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
 *
 * This file is the wiring point: the Compute client (compute-client.ts),
 * the kept listing (list-cache.ts), the projects (projects.ts), zone
 * operations (operations.ts), create (create.ts), delete and its tracking
 * (deletes.ts), the listing (listing.ts) and the check (check.ts) are built
 * here once, in this provider's operation frame.
 */
import type { AuthClient } from 'google-auth-library';
import type { Logger } from 'pino';
import { providerOperations, type Operations } from '../shared/operation.js';
import type { CreateRequest, Instance, ListOptions, Provider, TargetStatus } from '../types.js';
import { checkProject } from './check.js';
import { isInstanceNotFound } from './classify.js';
import { ComputeClient } from './compute-client.js';
import type { GcpConfig } from './config.js';
import { Inserts } from './create.js';
import { Deletes } from './deletes.js';
import { Firewalls } from './firewall.js';
import { formatProviderId, parseProviderId, toInstance } from './instance.js';
import { ListCache } from './list-cache.js';
import { Listings } from './listing.js';
import { ZoneOperations } from './operations.js';
import { Projects } from './projects.js';

export const GCP_PROVIDER_TYPE = 'gcp';

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
  /** How long a check waits on a firewall rule change's operation (default 8 s); longer reports Pending. */
  firewallWaitMs?: number;
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
  /**
   * The installation the worker serves: the managed firewall rule's name
   * and mark are made from it. Absent: the rule is not managed (its check
   * target says Unmanaged, GC collects no rule).
   */
  installation?: string;
  /** Every configured provider entry (name and type): GC keeps their rules. Absent: GC collects no rule. */
  entries?: readonly { name: string; type: string }[];
}

export interface GcpProvider extends Provider {
  readonly config: GcpConfig;
  check(signal: AbortSignal): Promise<TargetStatus[]>;
  idAliases(id: string): string[];
  close(): Promise<void>;
}

export function createGcpProvider(options: GcpProviderOptions): GcpProvider {
  return new GcpProviderImpl(options);
}

class GcpProviderImpl implements GcpProvider {
  readonly type = GCP_PROVIDER_TYPE;
  /** listByTag is one filtered, paged aggregatedList. */
  readonly capabilities = { cheapListByTag: true };
  readonly name: string;
  readonly config: GcpConfig;
  private readonly checkReuseMs: number;
  private readonly ops: Operations;
  private readonly compute: ComputeClient;
  private readonly listCache: ListCache;
  private readonly projects: Projects;
  private readonly operations: ZoneOperations;
  private readonly deletes: Deletes;
  private readonly inserts: Inserts;
  private readonly listings: Listings;
  /** Only with gcp.firewall. */
  private readonly firewalls: Firewalls | undefined;

  constructor(options: GcpProviderOptions) {
    const config = options.config;
    this.name = options.name;
    this.config = config;
    this.checkReuseMs = options.checkReuseMs ?? 150_000;
    const listCache = (this.listCache = new ListCache(config));
    const ops = (this.ops = providerOperations({
      name: options.name,
      type: GCP_PROVIDER_TYPE,
      logger: options.logger,
      classify: (err, operation, instance) => this.compute.logApiError(operation, instance, err),
    }));
    const compute = (this.compute = new ComputeClient({
      provider: { type: GCP_PROVIDER_TYPE, name: options.name },
      config,
      log: ops.log,
      authClient: options.authClient,
      callTimeoutMs: options.callTimeoutMs ?? 30_000,
      onFailure: () => listCache.forget(),
    }));
    const projects = (this.projects = new Projects(config, ops, compute, listCache));
    const operations = (this.operations = new ZoneOperations(
      compute,
      ops,
      config,
      options.operationWaitMs ?? 10_000,
    ));
    const deletes = (this.deletes = new Deletes({ compute, operations, projects, listCache, ops }));
    const insertWaitMs = options.insertWaitMs ?? 45_000;
    this.inserts = new Inserts({ compute, operations, deletes, listCache, ops, config, insertWaitMs });
    const pageSize = options.listPageSize ?? 500;
    this.listings = new Listings({ compute, listCache, projects, ops, config, pageSize });
    const firewall = config.firewall;
    const entry = { name: options.name, type: GCP_PROVIDER_TYPE };
    const { installation, entries } = options;
    this.firewalls =
      firewall &&
      new Firewalls({
        compute,
        ops,
        config,
        firewall,
        entry,
        installation,
        entries,
        operationWaitMs: options.firewallWaitMs,
      });
  }

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, () => this.inserts.create(req, instance, signal));
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id), signal, async () => {
      const { project, zone, name } = this.projects.parseId('get', id);
      const { instances } = await this.compute.api();
      try {
        const [inst] = await this.compute.call(signal, 'get', 'instances.get', () =>
          instances.get({ project, zone, instance: name }, this.compute.callOptions),
        );
        const out = toInstance(inst, project, zone);
        this.ops.log.debug({ instance: id, status: inst.status, state: out.state, ip: out.ip }, 'get');
        this.listCache.noteSeen(out.id, out);
        return out;
      } catch (err) {
        // Only Compute's own 404 for this VM means gone: not one for the project or zone, not a token source's.
        if (!isInstanceNotFound(err, project, zone, name))
          throw this.projects.failIn('get', id, project, err);
        this.compute.logApiError('get', id, err);
      }
      // Gone: a delete remembered for it is over, and a kept listing showing it is stale.
      this.deletes.forget(project, zone, name);
      this.listCache.noteSeen(formatProviderId(project, zone, name), undefined);
      // Gone, unless an insert is still being processed: then the name is
      // taken and a NotFound would make the control plane create again.
      const pending = (await this.operations.unfinished('get', project, zone, name, signal)).find(
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

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id), signal, () => this.deletes.delete(id, signal));
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

  async listByTag(signal: AbortSignal, options?: ListOptions): Promise<Instance[]> {
    const listed = await this.listings.listByTag(signal, options);
    // Only GC's listing collects: the drift sweep and lookups list as before.
    if (options?.collectOrphans && this.firewalls) await this.firewalls.collect(signal);
    return listed;
  }

  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const { compute, listCache, ops, config, checkReuseMs } = this;
    const project = checkProject({ compute, listCache, ops, config, checkReuseMs }, signal);
    if (this.firewalls === undefined) return project;
    const [targets, rule] = await Promise.all([project, this.firewalls.check(signal)]);
    return [...targets, rule];
  }

  async close(): Promise<void> {
    this.listCache.forget();
    await this.compute.close();
  }
}
