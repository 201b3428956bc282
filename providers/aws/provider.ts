/**
 * The `aws` provider (issue 59): every instance is one EC2 instance, made
 * through `@aws-sdk/client-ec2` (v3).
 *
 * Profile (contract §4): readiness provisioning-window (pending, then
 * running with its address); create-return submit (RunInstances answers
 * with the instance pending); delete-return returns-early (shutting-down is
 * Terminated until EC2 says terminated, then NotFound); ip-source
 * assigned-at-create (the public IPv4 address, or the private one with
 * internalOnly); gc-mark native-tags (TagSpecifications, in the RunInstances
 * call itself); created-at backend-timestamp (LaunchTime); list-partial
 * none (one paged DescribeInstances for the entry's region: all or an
 * error); quota detected (EC2's limit codes); not-found
 * InvalidInstanceID.NotFound or the terminated state, except for an
 * instance this process made within `visibilityGraceMs` (EC2's eventual
 * consistency: "not visible yet", Transient, never "gone", which would make
 * a second instance); primary-key generated id (`<region>/<i-...>`; the
 * contract's name is the Name tag); provisioning-state native (pending);
 * async-ops none; secondary-resources cascade (the root volume and the
 * network interface go with the instance); credentials environment (the
 * SDK's default chain or `aws.profile`, resolved on each request by the
 * SDK); client-kind vendor-sdk; timeouts per-call.
 *
 * Create exactly once: a create first looks for a live instance with the
 * request's Name tag (one DescribeInstances; adopted when its UID tag is
 * the request's, refused when another's), then calls RunInstances with a
 * ClientToken from the Proxy UID, the spec hash and a generation: a create
 * retried after a lost answer sends the same token and gets the same
 * instance from EC2, across workers. The generation is the first whose
 * token no ended instance of this name carries (DescribeInstances shows
 * each instance's ClientToken), so replacing a terminated instance with
 * the same spec is a new instance, not the dead one again. Creates of one
 * name in this process run one after the other.
 */
import type { Filter, Instance as Ec2Instance } from '@aws-sdk/client-ec2';
import type { Logger } from 'pino';
import { ProviderError } from '../errors.js';
import { CallEnded } from '../shared/bounded-call.js';
import { foreignOwner, parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Operations } from '../shared/operation.js';
import {
  MARK_INSTALLATION,
  MARK_MANAGED,
  MARK_MANAGED_VALUE,
  MARK_UID,
  type CreateRequest,
  type Instance,
  type Listing,
  type ListOptions,
  type Provider,
  type ProviderOperation,
  type TargetStatus,
  type UnlistedScope,
} from '../types.js';
import { checkReason, classify, ec2ErrorCode, encodedAuthorizationMessage, httpStatus } from './classify.js';
import { Ec2Clients, type AwsCredentials } from './client.js';
import { INSTANCE_TYPE, validImage, type AwsConfig } from './config.js';
import { SecurityGroups } from './security-group.js';
import {
  candidates,
  clientToken,
  formatProviderId,
  INTERRUPTION_NOTICE_CODES,
  interruptionEndsAt,
  LIVE_STATES,
  NAME_TAG,
  parseProviderId,
  requestSpecHash,
  runInstancesInput,
  tagValue,
  toInstance,
  validZone,
  vmUserData,
  wasInterrupted,
  MARK_SPEC_HASH,
} from './instance.js';

export const AWS_PROVIDER_TYPE = 'aws';

/** Generations a create walks at most (each one a token whose instance has ended). */
const MAX_GENERATIONS = 64;

export interface AwsProviderOptions {
  /** The configured name. */
  name: string;
  config: AwsConfig;
  logger: Logger;
  /** Credentials instead of the SDK's default chain (tests: static fake keys). */
  credentials?: AwsCredentials;
  /** Bound on each EC2 request (default 30 s; the caller's signal can only shorten it). */
  callTimeoutMs?: number;
  /**
   * How long after this process made an instance an InvalidInstanceID.NotFound
   * for it means "not visible yet" (Transient) rather than gone. EC2
   * documents the delay without a bound ("a couple of seconds" up to "a few
   * minutes"); default 5 min.
   */
  visibilityGraceMs?: number;
  /** Instances per DescribeInstances page in listByTag (5 to 1000; default 1000). */
  listPageSize?: number;
  /**
   * Called once per instance EC2 interrupts (a Spot notice seen, or an
   * instance found ended by one): the worker counts
   * `egress_provider_interruptions_total`.
   */
  onInterruption?: () => void;
  /**
   * The installation the worker serves: the managed security group's name
   * and marks are made from it. Absent: no group is managed (check says
   * Unmanaged; instances launch without it).
   */
  installation?: string;
  /** Every configured provider entry (name and type): GC keeps their groups. */
  entries?: readonly { name: string; type: string }[];
}

export interface AwsProvider extends Provider {
  readonly config: AwsConfig;
  check(signal: AbortSignal): Promise<TargetStatus[]>;
  close(): Promise<void>;
}

export function createAwsProvider(options: AwsProviderOptions): AwsProvider {
  return new AwsProviderImpl(options);
}

const PROVIDER_ID_FORM = '<region>/i-<8 or 17 hex digits>';

class AwsProviderImpl implements AwsProvider {
  readonly type = AWS_PROVIDER_TYPE;
  /** listByTag is one filtered, paged DescribeInstances. */
  readonly capabilities = { cheapListByTag: true };
  readonly name: string;
  readonly config: AwsConfig;
  private readonly ops: Operations;
  private readonly ec2: Ec2Clients;
  private readonly visibilityGraceMs: number;
  private readonly pageSize: number;
  /** Instances this process made, by instance id: when, for the visibility grace. */
  private readonly made = new Map<string, number>();
  /** Regions listByTag lists: the configured one, and any a providerID named since the start. */
  private readonly regions: Set<string>;
  /** The create of each name in flight in this process: the next one waits for it. */
  private readonly creating = new Map<string, Promise<unknown>>();
  /** Instances whose interruption was counted, by instance id: when (kept an hour, so each counts once). */
  private readonly interrupted = new Map<string, number>();
  private readonly onInterruption: () => void;
  /** The worker's installation, when given: only its instances' interruptions are counted. */
  private readonly installation: string | undefined;
  /** Only with aws.securityGroup (and an installation). */
  private readonly groups: SecurityGroups | undefined;

  constructor(options: AwsProviderOptions) {
    this.name = options.name;
    this.config = options.config;
    this.visibilityGraceMs = options.visibilityGraceMs ?? 300_000;
    this.regions = new Set([options.config.region]);
    this.pageSize = Math.max(5, Math.min(1000, options.listPageSize ?? 1000));
    this.onInterruption = options.onInterruption ?? (() => undefined);
    this.installation = options.installation;
    this.ops = providerOperations({
      name: options.name,
      type: AWS_PROVIDER_TYPE,
      logger: options.logger,
      classify: (err, operation, instance) => this.logged(operation, instance, err, 'EC2'),
    });
    this.ec2 = new Ec2Clients({
      provider: { type: AWS_PROVIDER_TYPE, name: options.name },
      config: options.config,
      credentials: options.credentials,
      callTimeoutMs: options.callTimeoutMs ?? 30_000,
    });
    const sg = options.config.securityGroup;
    this.groups =
      sg && options.installation
        ? new SecurityGroups({
            ec2: this.ec2,
            ops: this.ops,
            region: options.config.region,
            config: sg,
            entry: { name: options.name, type: AWS_PROVIDER_TYPE },
            installation: options.installation,
            entries: options.entries ?? [],
          })
        : undefined;
  }

  /** The class of an EC2 failure, with its raw code and status logged at debug (the class collapses them). */
  private logged(operation: ProviderOperation, instance: string, err: unknown, action: string) {
    const c = classify(err, action);
    this.ops.log.debug(
      {
        operation,
        instance,
        action,
        ec2Code: ec2ErrorCode(err),
        httpStatus: httpStatus(err),
        errorClass: c.errorClass,
      },
      'EC2 call failed',
    );
    return c;
  }

  /** An EC2 failure of `action` as this provider's ProviderError. */
  private failed(
    operation: ProviderOperation,
    instance: string,
    err: unknown,
    action: string,
    signal: AbortSignal,
  ) {
    if (err instanceof ProviderError || signal.aborted)
      return this.ops.wrap(operation, instance, err, signal);
    const c = this.logged(operation, instance, err, action);
    return this.ops.fail(c.errorClass, operation, instance, c.summary, err);
  }

  // -- create ------------------------------------------------------------------

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, async (s) => {
      const imageId = this.validate(req, instance);
      // One create per name at a time here: a second one sees the first's instance when it looks.
      const before = this.creating.get(instance) ?? Promise.resolve();
      const mine = before.catch(() => undefined).then(() => this.createOnce(req, instance, imageId, s));
      const settled = mine.catch(() => undefined);
      this.creating.set(instance, settled);
      try {
        return await mine;
      } finally {
        if (this.creating.get(instance) === settled) this.creating.delete(instance);
      }
    });
  }

  /** The request checked before any call; the AMI to launch. */
  private validate(req: CreateRequest, instance: string): string {
    const bad = (message: string) => this.ops.fail('Permanent', 'create', instance, message);
    if (instance === '') throw bad('the request has no instance name');
    if (typeof req.uid !== 'string' || req.uid === '') throw bad('the request has no Proxy UID');
    const { region, zone, machineType, image } = req.placement;
    if (region !== undefined && region !== this.config.region)
      throw bad(`placement.region "${region.slice(0, 64)}" is not this entry's region ${this.config.region}`);
    if (zone !== undefined && !validZone(zone))
      throw bad('placement.zone must be an availability zone such as eu-west-1a');
    if (zone !== undefined && !zone.startsWith(this.config.region))
      throw bad(`placement.zone is not in this entry's region ${this.config.region}`);
    if (machineType !== undefined && !INSTANCE_TYPE.test(machineType))
      throw bad('placement.machineType must be an EC2 instance type such as t3.micro');
    const imageId = image ?? this.config.imageId;
    if (imageId === undefined) throw bad('no AMI: set placement.image or aws.imageId');
    if (!validImage(imageId))
      throw bad(
        'placement.image must be an AMI id (ami-...) or an SSM parameter (resolve:ssm:/aws/service/...)',
      );
    return imageId;
  }

  private async createOnce(
    req: CreateRequest,
    instance: string,
    imageId: string,
    signal: AbortSignal,
  ): Promise<string> {
    const region = this.config.region;
    const named = await this.byName(req.name, signal);
    const adopted = this.adopt(req, instance, named);
    if (adopted !== undefined) return adopted;
    const spec = requestSpecHash(req);
    // Tokens EC2 would answer with an instance that has ended: skip their generations.
    const endedTokens = new Set(
      named
        .filter((i) => !isLive(i))
        .map((i) => i.ClientToken ?? '')
        .filter((t) => t !== ''),
    );
    // Made once: every candidate gets the same user data (one salt for the htpasswd).
    const userData = vmUserData(req);
    let groupIds: string[] = [];
    if (this.groups) {
      try {
        groupIds = [await this.groups.groupId(signal)];
      } catch (err) {
        throw this.failed('create', instance, err, 'the managed security group', signal);
      }
    }
    const tried = candidates(req, this.config);
    let generation = 0;
    while (endedTokens.has(clientToken(req.uid, spec, generation))) generation++;
    generations: for (; generation < MAX_GENERATIONS; generation++) {
      const token = clientToken(req.uid, spec, generation);
      const refused: string[] = [];
      for (const candidate of tried) {
        const input = runInstancesInput(
          req,
          this.config,
          candidate,
          imageId,
          spec,
          token,
          userData,
          groupIds,
        );
        let made: Ec2Instance | undefined;
        try {
          const out = await this.ec2.send(region, 'RunInstances', 'create', signal, (c, sdk, abortSignal) =>
            c.send(new sdk.RunInstancesCommand(input), { abortSignal }),
          );
          made = out.Instances?.[0];
        } catch (err) {
          const code = ec2ErrorCode(err);
          if (code === 'IdempotentInstanceTerminated') continue generations;
          if (code === 'IdempotentParameterMismatch') return this.madeWithToken(req, instance, signal, err);
          // The managed group deleted by hand since it was found: the next create finds or makes it again.
          if (code === 'InvalidGroup.NotFound' && this.groups) {
            this.groups.forget();
            throw this.ops.fail(
              'Transient',
              'create',
              instance,
              'the managed security group is gone; made again',
              err,
            );
          }
          const c = signal.aborted ? undefined : this.logged('create', instance, err, 'RunInstances');
          if (c?.capacity) {
            refused.push(describeCandidate(candidate));
            this.ops.log.warn(
              { instance, ...candidate, ec2Code: c.code, next: tried[tried.indexOf(candidate) + 1] },
              'create: no capacity for this candidate',
            );
            continue;
          }
          throw this.failed('create', instance, err, 'RunInstances', signal);
        }
        const instanceId = made?.InstanceId;
        if (instanceId === undefined)
          throw this.ops.fail('Transient', 'create', instance, 'RunInstances answered without an instance');
        // The token's instance, already ended (EC2 answering an old token as it did then): a new generation.
        if (!isLive(made!) || named.some((i) => i.InstanceId === instanceId && !isLive(i)))
          continue generations;
        this.made.set(instanceId, Date.now());
        this.forgetOldMade();
        this.ops.log.info(
          { instance, id: formatProviderId(region, instanceId), ...candidate, generation },
          'instance launched',
        );
        return formatProviderId(region, instanceId);
      }
      throw this.ops.fail(
        'Transient',
        'create',
        instance,
        `no capacity for any candidate tried (${refused.join(', ')}); retried with backoff`,
      );
    }
    throw this.ops.fail(
      'Transient',
      'create',
      instance,
      `every client token up to generation ${MAX_GENERATIONS} names an ended instance`,
    );
  }

  /**
   * IdempotentParameterMismatch: this token already made an instance, with
   * other parameters (another candidate, or a new htpasswd salt in the user
   * data of a retried create). That instance is the one: adopt it by name,
   * or wait until it is visible.
   */
  private async madeWithToken(
    req: CreateRequest,
    instance: string,
    signal: AbortSignal,
    cause: unknown,
  ): Promise<string> {
    const adopted = this.adopt(req, instance, await this.byName(req.name, signal));
    if (adopted !== undefined) return adopted;
    throw this.ops.fail(
      'Transient',
      'create',
      instance,
      'this create was made before (IdempotentParameterMismatch) and its instance is not visible yet',
      cause,
    );
  }

  /** The live instance of this name, when its UID tag is the request's; Permanent when another's. */
  private adopt(req: CreateRequest, instance: string, named: Ec2Instance[]): string | undefined {
    const live = named.filter(isLive);
    if (live.length === 0) return undefined;
    const mine = live.filter((i) => tagValue(i, MARK_UID) === req.uid);
    if (mine.length === 0) {
      const owner = tagValue(live[0]!, MARK_UID) ?? '';
      throw foreignOwner(this.ops, instance, 'an EC2 instance', owner, req.uid, 'uid tag');
    }
    // Two of ours (made before the token was in use, or by hand): the oldest, as a create retried saw first.
    mine.sort((a, b) => (a.LaunchTime?.getTime() ?? 0) - (b.LaunchTime?.getTime() ?? 0));
    const id = mine[0]!.InstanceId ?? '';
    this.ops.log.debug({ instance, id, specHash: tagValue(mine[0]!, MARK_SPEC_HASH) }, 'create: adopted');
    return formatProviderId(this.config.region, id);
  }

  /** Every instance carrying this Name tag and the managed mark, in any state (ended ones for their tokens). */
  private byName(name: string, signal: AbortSignal): Promise<Ec2Instance[]> {
    return this.describeAll('create', name, signal, [
      { Name: `tag:${NAME_TAG}`, Values: [name] },
      { Name: `tag:${MARK_MANAGED}`, Values: [MARK_MANAGED_VALUE] },
    ]);
  }

  private forgetOldMade(): void {
    const cutoff = Date.now() - this.visibilityGraceMs;
    for (const [id, at] of this.made) if (at < cutoff) this.made.delete(id);
  }

  /** Whether this process made the instance so recently that EC2 may not show it yet. */
  private justMade(instanceId: string): boolean {
    const at = this.made.get(instanceId);
    return at !== undefined && Date.now() - at < this.visibilityGraceMs;
  }

  // -- get, delete, list -------------------------------------------------------

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id), signal, async (s) => {
      const { region, instanceId } = parseIdOrFail(this.ops, 'get', id, parseProviderId, PROVIDER_ID_FORM);
      let found: Ec2Instance | undefined;
      try {
        const out = await this.ec2.send(region, 'DescribeInstances', 'get', s, (c, sdk, abortSignal) =>
          c.send(new sdk.DescribeInstancesCommand({ InstanceIds: [instanceId] }), { abortSignal }),
        );
        found = out.Reservations?.flatMap((r) => r.Instances ?? []).find((i) => i.InstanceId === instanceId);
      } catch (err) {
        if (ec2ErrorCode(err) !== 'InvalidInstanceID.NotFound')
          throw this.failed('get', id, err, 'DescribeInstances', s);
        this.logged('get', id, err, 'DescribeInstances');
      }
      if (found === undefined) throw this.notFound('get', id, instanceId);
      if (wasInterrupted(found)) this.countInterruption(found, found.StateReason?.Code);
      if (found.State?.Name === 'terminated')
        throw this.ops.fail(
          'NotFound',
          'get',
          id,
          wasInterrupted(found)
            ? `terminated by a Spot interruption (${found.StateReason?.Code})`
            : 'terminated',
        );
      // A live instance in a region EC2 answered for: listed from now on (see listByTag).
      this.regions.add(region);
      const notices =
        found.State?.Name === 'running' && found.SpotInstanceRequestId
          ? await this.interruptionNotices(region, s, [found.SpotInstanceRequestId])
          : undefined;
      const out = toInstance(found, region, this.config, this.noticeOf(found, notices));
      this.ops.log.debug({ instance: id, ec2State: found.State?.Name, state: out.state, ip: out.ip }, 'get');
      return out;
    });
  }

  /** NotFound, unless this process made the instance moments ago (not visible yet: Transient). */
  private notFound(operation: ProviderOperation, id: string, instanceId: string): ProviderError {
    if (this.justMade(instanceId))
      return this.ops.fail(
        'Transient',
        operation,
        id,
        `not visible yet (made ${Math.round((Date.now() - this.made.get(instanceId)!) / 1000)} s ago; EC2 is eventually consistent)`,
      );
    return this.ops.fail('NotFound', operation, id, 'no such instance');
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id), signal, async (s) => {
      const { region, instanceId } = parseIdOrFail(this.ops, 'delete', id, parseProviderId, PROVIDER_ID_FORM);
      try {
        // Idempotent in EC2 itself: an instance already shutting down or terminated answers with its state.
        await this.ec2.send(region, 'TerminateInstances', 'delete', s, (c, sdk, abortSignal) =>
          c.send(new sdk.TerminateInstancesCommand({ InstanceIds: [instanceId] }), { abortSignal }),
        );
      } catch (err) {
        if (ec2ErrorCode(err) !== 'InvalidInstanceID.NotFound')
          throw this.failed('delete', id, err, 'TerminateInstances', s);
        this.logged('delete', id, err, 'TerminateInstances');
        // Gone, unless made moments ago: then EC2 may not show it yet, and "gone" would leak it.
        const gone = this.notFound('delete', id, instanceId);
        if (gone.errorClass !== 'NotFound') throw gone;
      }
    });
  }

  /**
   * The configured region, and every other region where a get found a live
   * instance since the worker started (Proxies made before
   * `aws.region` changed): their instances stay in the listing, for orphan
   * GC and the drift sweep. The configured region must list; another one
   * that cannot is named in `unlisted` (its instances unknown, never gone).
   */
  listByTag(signal: AbortSignal, options?: ListOptions): Promise<Listing> {
    return this.ops.run('list', '', signal, async (s) => {
      // GC's listing also collects the groups of entries no longer configured (never failing it).
      if (options?.collectOrphans && this.groups) await this.groups.collect(s);
      const listing: Listing = await this.listRegion(this.config.region, s);
      const unlisted: UnlistedScope[] = [];
      for (const region of [...this.regions].filter((r) => r !== this.config.region).sort()) {
        try {
          listing.push(...(await this.listRegion(region, s)));
        } catch (err) {
          if (s.aborted) throw err;
          const message = err instanceof ProviderError ? err.message : 'listing failed';
          this.ops.log.warn({ region }, 'listByTag: a region named by a providerID could not be listed');
          unlisted.push({ target: region, idPrefix: `${region}/`, message });
        }
      }
      if (unlisted.length > 0) listing.unlisted = unlisted;
      return listing;
    });
  }

  private async listRegion(region: string, signal: AbortSignal): Promise<Instance[]> {
    const found = await this.describeAll(
      'list',
      '',
      signal,
      [
        { Name: `tag:${MARK_MANAGED}`, Values: [MARK_MANAGED_VALUE] },
        // Terminated instances stay listed for about an hour: gone for the contract.
        { Name: 'instance-state-name', Values: LIVE_STATES },
      ],
      region,
    );
    const spot = found.filter((i) => i.State?.Name === 'running' && i.SpotInstanceRequestId);
    const notices = spot.length > 0 ? await this.interruptionNotices(region, signal) : undefined;
    return found.map((i) => toInstance(i, region, this.config, this.noticeOf(i, notices)));
  }

  // -- Spot interruptions --------------------------------------------------------

  /**
   * The Spot requests EC2 has marked for interruption, by request id: when
   * each instance ends (two minutes after the notice). `requestIds`: only
   * those (a get); unset: every noticed request of the region, one filtered
   * call (a listing). A failure leaves the notices unknown, logged: the
   * instance is then replaced when EC2 ends it, not drained before.
   */
  private async interruptionNotices(
    region: string,
    signal: AbortSignal,
    requestIds?: string[],
  ): Promise<Map<string, Date> | undefined> {
    const out = new Map<string, Date>();
    let nextToken: string | undefined;
    try {
      for (let page = 0; page < 100; page++) {
        const answer = await this.ec2.send(
          region,
          'DescribeSpotInstanceRequests',
          requestIds ? 'get' : 'list',
          signal,
          (c, sdk, abortSignal) =>
            c.send(
              new sdk.DescribeSpotInstanceRequestsCommand({
                ...(requestIds
                  ? { SpotInstanceRequestIds: requestIds }
                  : {
                      Filters: [{ Name: 'status-code', Values: INTERRUPTION_NOTICE_CODES }],
                      MaxResults: 1000,
                      ...(nextToken !== undefined ? { NextToken: nextToken } : {}),
                    }),
              }),
              { abortSignal },
            ),
        );
        for (const r of answer.SpotInstanceRequests ?? []) {
          if (!r.SpotInstanceRequestId || !INTERRUPTION_NOTICE_CODES.includes(r.Status?.Code ?? '')) continue;
          out.set(r.SpotInstanceRequestId, interruptionEndsAt(r.Status?.UpdateTime, Date.now()));
        }
        nextToken = requestIds ? undefined : answer.NextToken || undefined;
        if (nextToken === undefined) return out;
      }
      return out;
    } catch (err) {
      if (signal.aborted) throw err;
      this.ops.log.warn(
        { region, ec2Code: ec2ErrorCode(err), httpStatus: httpStatus(err) },
        'DescribeSpotInstanceRequests failed: Spot interruption notices unknown until the next look',
      );
      return undefined;
    }
  }

  /** The end of an interruption announced for this instance, counted the first time it is seen. */
  private noticeOf(inst: Ec2Instance, notices: Map<string, Date> | undefined): Date | undefined {
    const endsAt = inst.SpotInstanceRequestId ? notices?.get(inst.SpotInstanceRequestId) : undefined;
    if (endsAt !== undefined) this.countInterruption(inst, 'notice');
    return endsAt;
  }

  /**
   * Counts an interruption once per instance, and only of this worker's
   * installation (the listing holds every installation's managed instances
   * of the account).
   */
  private countInterruption(inst: Ec2Instance, what: string | undefined): void {
    const instanceId = inst.InstanceId ?? '';
    if (this.installation !== undefined && tagValue(inst, MARK_INSTALLATION) !== this.installation) return;
    const now = Date.now();
    for (const [id, at] of this.interrupted) if (now - at > 3_600_000) this.interrupted.delete(id);
    if (instanceId === '' || this.interrupted.has(instanceId)) return;
    this.interrupted.set(instanceId, now);
    this.ops.log.info({ instance: instanceId, what }, 'Spot interruption');
    this.onInterruption();
  }

  /** Every page of a filtered DescribeInstances in `region` (default: the entry's). */
  private async describeAll(
    operation: ProviderOperation,
    instance: string,
    signal: AbortSignal,
    filters: Filter[],
    region = this.config.region,
  ): Promise<Ec2Instance[]> {
    const out: Ec2Instance[] = [];
    let nextToken: string | undefined;
    for (let page = 0; ; page++) {
      // A listing that never ends is a bug or a broken endpoint, not a fleet: 1,000 pages of 1,000.
      if (page >= 1000)
        throw this.ops.fail('Transient', operation, instance, 'DescribeInstances did not stop paging');
      let answer;
      try {
        answer = await this.ec2.send(region, 'DescribeInstances', operation, signal, (c, sdk, abortSignal) =>
          c.send(
            new sdk.DescribeInstancesCommand({
              Filters: filters,
              MaxResults: this.pageSize,
              ...(nextToken !== undefined ? { NextToken: nextToken } : {}),
            }),
            { abortSignal },
          ),
        );
      } catch (err) {
        throw this.failed(operation, instance, err, 'DescribeInstances', signal);
      }
      for (const r of answer.Reservations ?? []) out.push(...(r.Instances ?? []));
      nextToken = answer.NextToken || undefined;
      if (nextToken === undefined) return out;
    }
  }

  // -- check -------------------------------------------------------------------

  /**
   * One target, the region. First one DescribeInstances page of at most 5
   * managed instances: the credentials, the endpoint and
   * ec2:DescribeInstances (what get, listByTag and GC rely on). Then a
   * RunInstances with DryRun, built as a create would build it (the
   * entry's AMI, its first instance type and subnet, its security groups,
   * the marks as tags, IMDSv2; no user data, no client token of ours): EC2 answers
   * DryRunOperation when the call would have been allowed, and
   * UnauthorizedOperation when not, launching nothing either way. Without
   * `aws.imageId` there is nothing a create would launch, so the dry run
   * is skipped and the ready target says so. ec2:TerminateInstances is
   * not checked (EC2 has no dry run that proves it without an instance).
   */
  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    if (this.config.securityGroup === undefined) return this.checkRegion(signal);
    const group: Promise<TargetStatus> =
      this.groups?.check(signal) ??
      Promise.resolve({
        name: `security-group/(unmanaged)`,
        ready: false,
        reason: 'Unmanaged',
        message: 'aws.securityGroup is set but this process serves no installation: no group is managed',
      });
    const [region, sg] = await Promise.all([this.checkRegion(signal), group]);
    return [...region, sg];
  }

  private async checkRegion(signal: AbortSignal): Promise<TargetStatus[]> {
    const started = Date.now();
    const target = { name: this.config.region, address: this.ec2.address() };
    if (signal.aborted)
      return [{ ...target, ready: false, reason: 'Timeout', message: 'check aborted before it ran' }];
    const notReady = (err: unknown, what: string, action: string): TargetStatus[] => {
      const ended = err instanceof CallEnded;
      const reason = checkReason(err, ended || signal.aborted);
      let message = ended
        ? `${what}: ${err.message}`
        : `${what}: ${this.logged('check', '', err, action).summary}`;
      // The encoded authorization message runs past the message's 1,024 characters: whole, in details.
      const encoded = ended ? undefined : encodedAuthorizationMessage(err);
      if (encoded !== undefined && ec2ErrorCode(err) === 'UnauthorizedOperation')
        message = `${what}: EC2 answered ${httpStatus(err) ?? 403} UnauthorizedOperation: the credentials may not call ${action}; decode why with "aws sts decode-authorization-message --encoded-message <details.encodedAuthorizationMessage>"`;
      return [
        {
          ...target,
          ready: false,
          reason,
          message: message.slice(0, 1024),
          latencyMillis: Date.now() - started,
          ...(encoded !== undefined ? { details: { encodedAuthorizationMessage: encoded } } : {}),
        },
      ];
    };
    try {
      await this.ec2.send(this.config.region, 'DescribeInstances', 'check', signal, (c, sdk, abortSignal) =>
        c.send(
          new sdk.DescribeInstancesCommand({
            Filters: [{ Name: `tag:${MARK_MANAGED}`, Values: [MARK_MANAGED_VALUE] }],
            MaxResults: 5,
          }),
          { abortSignal },
        ),
      );
    } catch (err) {
      return notReady(err, 'DescribeInstances (managed filter, 5 results)', 'DescribeInstances');
    }
    if (this.config.imageId === undefined)
      return [
        {
          ...target,
          ready: true,
          reason: 'Reachable',
          message: 'RunInstances not checked: no aws.imageId (each Proxy names its AMI in placement.image)',
          latencyMillis: Date.now() - started,
        },
      ];
    let answered: 'DryRunOperation' | 'no error';
    try {
      answered = await this.ec2.send(
        this.config.region,
        'RunInstances',
        'check',
        signal,
        async (c, sdk, abortSignal) => {
          try {
            await c.send(new sdk.RunInstancesCommand(this.dryRunInput(this.config.imageId!)), {
              abortSignal,
            });
            return 'no error' as const;
          } catch (err) {
            // EC2's "would have succeeded" (412): the answer a check wants, a success for spans and metrics.
            if (ec2ErrorCode(err) === 'DryRunOperation') return 'DryRunOperation' as const;
            throw err;
          }
        },
      );
    } catch (err) {
      return notReady(err, 'RunInstances (DryRun, as a create would send it)', DRY_RUN_ACTION);
    }
    if (answered !== 'DryRunOperation')
      return [
        {
          ...target,
          ready: false,
          reason: 'APIError',
          message:
            'RunInstances (DryRun) answered without DryRunOperation: the endpoint ignored DryRun and may have launched an instance',
          latencyMillis: Date.now() - started,
        },
      ];
    return [{ ...target, ready: true, reason: 'Reachable', latencyMillis: Date.now() - started }];
  }

  /**
   * The dry run's RunInstances input: a create's, for the first candidate
   * (instance type, subnet), with placeholder marks (the tags a policy may
   * require at launch), DryRun, and no user data or client token.
   */
  private dryRunInput(imageId: string): ReturnType<typeof runInstancesInput> {
    const req: CreateRequest = {
      name: 'egress-proxies-check',
      uid: 'check',
      namespace: '',
      proxyName: '',
      placement: {},
      cloudInit: '',
      port: 3128,
      installation: 'check',
    };
    const [first] = candidates(req, this.config);
    const input = runInstancesInput(req, this.config, first!, imageId, 'check', '', undefined);
    delete input.ClientToken;
    delete input.UserData;
    return { ...input, DryRun: true };
  }

  close(): Promise<void> {
    this.ec2.close();
    return Promise.resolve();
  }
}

/** Not ended: an instance shutting down or terminated answers its token with itself, never as a new one. */
function isLive(inst: Ec2Instance): boolean {
  const state = inst.State?.Name;
  return state !== 'terminated' && state !== 'shutting-down';
}

function describeCandidate(c: { instanceType: string; market: string; subnetId?: string }): string {
  const what = c.market === 'spot' ? `${c.instanceType} (spot)` : c.instanceType;
  return c.subnetId === undefined ? what : `${what} in ${c.subnetId}`;
}

/** The dry run of check(), as IAM names the permission it proves. */
const DRY_RUN_ACTION = 'ec2:RunInstances (DryRun)';
