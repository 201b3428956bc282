/**
 * Pure pieces of the aws provider: providerIDs, the tags (marks), the
 * client token, the RunInstances input and the instance-to-contract
 * mapping. No I/O.
 */
import { createHash } from 'node:crypto';
import type { Instance as Ec2Instance, RunInstancesCommandInput, Tag } from '@aws-sdk/client-ec2';
import { credentialsDigest } from '../../credentials/proxy-credentials.js';
import { base32Lower } from '../names.js';
import { userDataWithCredentials } from '../shared/cloud-init-credentials.js';
import { cloudInitContentHash, specHash } from '../spec-hash.js';
import {
  MARK_INSTALLATION,
  MARK_MANAGED,
  MARK_MANAGED_VALUE,
  MARK_UID,
  type CreateRequest,
  type Instance,
  type InstanceState,
} from '../types.js';
import { AVAILABILITY_ZONE, REGION, type AwsConfig } from './config.js';

/** The spec hash the instance was made for: the same value the Proxy's status records. */
export const MARK_SPEC_HASH = 'crawl.example.com/spec-hash';
/** EC2 has no instance names: the contract's deterministic name is the Name tag (the console shows it). */
export const NAME_TAG = 'Name';

export const INSTANCE_ID = /^i-[0-9a-f]{8,17}$/;

/**
 * The states an instance is still there in. `terminated` is gone (EC2 lists
 * it for about an hour afterwards; the contract's NotFound), and
 * `shutting-down` is on its way there.
 */
export const LIVE_STATES = ['pending', 'running', 'shutting-down', 'stopping', 'stopped'];

/**
 * The providerID: `<region>/<instance-id>`. The region is part of it so an
 * instance stays addressable where it was made after `aws.region` changes.
 */
export function formatProviderId(region: string, instanceId: string): string {
  return `${region}/${instanceId}`;
}

export function parseProviderId(id: string): { region: string; instanceId: string } | undefined {
  const m = /^([a-z0-9-]{1,32})\/(i-[0-9a-f]{8,17})$/.exec(id);
  if (m === null || !REGION.test(m[1]!)) return undefined;
  return { region: m[1]!, instanceId: m[2]! };
}

/** The spec hash of a create request, computed as the create activity computes it (providers/spec-hash.ts). */
export function requestSpecHash(req: CreateRequest): string {
  return specHash({
    placement: req.placement,
    port: req.port,
    cloudInitSha256: cloudInitContentHash(req.cloudInit),
    credentialsSha256: req.credentials ? credentialsDigest(req.credentials) : '',
  });
}

/**
 * RunInstances' ClientToken for one attempt: EC2's own idempotency (a
 * retried RunInstances after a lost answer returns the instance the first
 * one made). From the Proxy UID, the spec hash and the generation (see the
 * provider's create: a new one once the instance of a token is
 * terminated, because EC2 keeps answering a token with its instance, or
 * with IdempotentInstanceTerminated, long after the instance ended).
 * 64 ASCII characters at most: `ep-` and 52 base32 characters.
 */
export function clientToken(uid: string, spec: string, generation: number): string {
  const digest = createHash('sha256').update(`${uid}\n${spec}\n${generation}`, 'utf8').digest();
  return `ep-${base32Lower(digest).slice(0, 52)}`;
}

/** The tags every instance is launched with (TagSpecifications: in the same call that makes it). */
export function instanceTags(req: CreateRequest, spec: string, config: AwsConfig): Tag[] {
  const extra = Object.entries(config.tags).map(([Key, Value]) => ({ Key, Value }));
  return [
    ...extra,
    { Key: NAME_TAG, Value: req.name },
    { Key: MARK_MANAGED, Value: MARK_MANAGED_VALUE },
    { Key: MARK_UID, Value: req.uid },
    { Key: MARK_INSTALLATION, Value: req.installation },
    { Key: MARK_SPEC_HASH, Value: spec },
  ];
}

export function tagValue(inst: Ec2Instance, key: string): string | undefined {
  return inst.Tags?.find((t) => t.Key === key)?.Value;
}

/** One candidate of a create: an instance type, a market, and a subnet when configured. */
export interface Candidate {
  instanceType: string;
  market: 'on-demand' | 'spot';
  subnetId?: string;
}

/**
 * The candidates a create tries in order on a capacity refusal: each
 * subnet (zone) for the first instance type, then the next type, so a
 * Proxy keeps its type while any zone has room. A Spot entry with
 * `spotFallbackToOnDemand` then tries the same list on-demand: Spot
 * capacity anywhere first, the dearer market only when there is none.
 */
export function candidates(req: CreateRequest, config: AwsConfig): Candidate[] {
  const types = req.placement.machineType !== undefined ? [req.placement.machineType] : config.instanceTypes;
  const subnets = config.subnetIds ?? [undefined];
  const markets: Candidate['market'][] =
    config.market === 'spot'
      ? config.spotFallbackToOnDemand
        ? ['spot', 'on-demand']
        : ['spot']
      : ['on-demand'];
  return markets.flatMap((market) =>
    types.flatMap((instanceType) =>
      subnets.map((subnetId) =>
        subnetId === undefined ? { instanceType, market } : { instanceType, market, subnetId },
      ),
    ),
  );
}

/**
 * EC2's notice before it interrupts a Spot instance: the Spot request's
 * status code turns to one of these two minutes before the instance is
 * stopped or terminated (the status's updateTime is when the notice was
 * given).
 */
export const INTERRUPTION_NOTICE_CODES = [
  'marked-for-termination',
  'marked-for-stop',
  'marked-for-hibernation',
];
/** How long EC2 gives between the notice and the interruption. */
export const INTERRUPTION_NOTICE_MS = 120_000;
/** The StateReason codes of an instance EC2 interrupted (terminated, stopped). */
export const INTERRUPTED_STATE_REASONS = ['Server.SpotInstanceTermination', 'Server.SpotInstanceShutdown'];

/** When an interruption noticed at `noticedAt` ends the instance (EC2: two minutes after the notice). */
export function interruptionEndsAt(noticedAt: Date | undefined, nowMs: number): Date {
  const at = noticedAt instanceof Date && !Number.isNaN(noticedAt.getTime()) ? noticedAt.getTime() : nowMs;
  return new Date(at + INTERRUPTION_NOTICE_MS);
}

/** Whether EC2 ended (or stopped) this instance by a Spot interruption. */
export function wasInterrupted(inst: Ec2Instance): boolean {
  return INTERRUPTED_STATE_REASONS.includes(inst.StateReason?.Code ?? '');
}

/** The user data: the cloud-init text, with the htpasswd part when the Proxy has credentials. */
export function vmUserData(req: Pick<CreateRequest, 'cloudInit' | 'credentials'>): string | undefined {
  return userDataWithCredentials(req.cloudInit, req.credentials);
}

/**
 * The RunInstances input for one candidate. One instance, tagged at
 * launch; IMDSv2 only, with a hop limit of 1 so nothing the proxy forwards
 * (a container, a crawler's CONNECT to 169.254.169.254 relayed by a
 * misconfigured proxy) can reach the instance's credentials; the root
 * volume goes with the instance. With a subnet the network interface is
 * spelled out, so the public IPv4 address is asked for explicitly rather
 * than left to the subnet's MapPublicIpOnLaunch.
 */
export function runInstancesInput(
  req: CreateRequest,
  config: AwsConfig,
  candidate: Candidate,
  imageId: string,
  spec: string,
  token: string,
  userData: string | undefined,
  /** The managed security group (aws.securityGroup), besides the configured ones. */
  managedGroupIds: readonly string[] = [],
): RunInstancesCommandInput {
  const groups = [...managedGroupIds, ...(config.securityGroupIds ?? [])];
  const input: RunInstancesCommandInput = {
    MinCount: 1,
    MaxCount: 1,
    ImageId: imageId,
    InstanceType: candidate.instanceType as RunInstancesCommandInput['InstanceType'],
    ClientToken: token,
    MetadataOptions: { HttpTokens: 'required', HttpPutResponseHopLimit: 1, HttpEndpoint: 'enabled' },
    InstanceInitiatedShutdownBehavior: 'terminate',
    TagSpecifications: [{ ResourceType: 'instance', Tags: instanceTags(req, spec, config) }],
  };
  if (candidate.market === 'spot')
    input.InstanceMarketOptions = {
      MarketType: 'spot',
      // One-time, terminated on interruption: no request left behind to relaunch a proxy nobody tracks.
      SpotOptions: { SpotInstanceType: 'one-time', InstanceInterruptionBehavior: 'terminate' },
    };
  if (userData !== undefined && userData !== '')
    input.UserData = Buffer.from(userData, 'utf8').toString('base64');
  if (candidate.subnetId !== undefined) {
    input.NetworkInterfaces = [
      {
        DeviceIndex: 0,
        SubnetId: candidate.subnetId,
        AssociatePublicIpAddress: !config.internalOnly,
        ...(config.ipv6 ? { Ipv6AddressCount: 1 } : {}),
        DeleteOnTermination: true,
        ...(groups.length > 0 ? { Groups: groups } : {}),
      },
    ];
  } else {
    if (groups.length > 0) input.SecurityGroupIds = groups;
    if (req.placement.zone !== undefined) input.Placement = { AvailabilityZone: req.placement.zone };
  }
  return input;
}

/** Whether a zone in placement is one EC2 could accept. */
export function validZone(zone: string): boolean {
  return AVAILABILITY_ZONE.test(zone);
}

/**
 * The address a Proxy uses: its IPv6 address (ipv6), else the public IPv4
 * address, or the private one of an instance made without (internalOnly).
 * Read from the instance and the entry's settings at the time: an instance
 * has no Running state until that address is there.
 */
export function instanceAddress(inst: Ec2Instance, addressing: Addressing): string {
  if (addressing.ipv6)
    return inst.Ipv6Address ?? inst.NetworkInterfaces?.[0]?.Ipv6Addresses?.[0]?.Ipv6Address ?? '';
  return (addressing.internalOnly ? inst.PrivateIpAddress : inst.PublicIpAddress) ?? '';
}

/** The entry's settings that say which of an instance's addresses is the Proxy's. */
export type Addressing = Pick<AwsConfig, 'internalOnly' | 'ipv6'>;

/**
 * | EC2 state                         | address | state        |
 * |-----------------------------------|---------|--------------|
 * | pending                           | any     | Provisioning |
 * | running                           | none    | Provisioning |
 * | running                           | set     | Running      |
 * | stopping, stopped                 | any     | Stopped      |
 * | shutting-down                     | any     | Terminated   |
 * | terminated                        | any     | (NotFound: get throws, listByTag leaves it out) |
 * | anything else                     | any     | Stopped      |
 *
 * Unknown states are Stopped: the control plane's answer is delete and
 * recreate, always safe for disposable proxies.
 */
export function mapState(state: string | undefined, ip: string): InstanceState {
  switch (state) {
    case 'pending':
      return 'Provisioning';
    case 'running':
      return ip === '' ? 'Provisioning' : 'Running';
    case 'shutting-down':
    case 'terminated':
      return 'Terminated';
    default:
      return 'Stopped';
  }
}

/**
 * UID, installation and CreatedAt are read back from the instance every
 * time; `expiresAt` is the end of an interruption EC2 has announced.
 */
export function toInstance(
  inst: Ec2Instance,
  region: string,
  addressing: Addressing,
  expiresAt?: Date,
): Instance {
  const ip = instanceAddress(inst, addressing);
  const state = mapState(inst.State?.Name, ip);
  const out: Instance = {
    id: formatProviderId(region, inst.InstanceId ?? ''),
    state,
    uid: tagValue(inst, MARK_UID) ?? '',
    installation: tagValue(inst, MARK_INSTALLATION) ?? '',
  };
  if (state === 'Running') out.ip = ip;
  // LaunchTime is the last start: a stopped and started instance looks younger to GC, the safe direction.
  const created = inst.LaunchTime instanceof Date ? inst.LaunchTime : undefined;
  if (created !== undefined && !Number.isNaN(created.getTime())) out.createdAt = created;
  if (expiresAt !== undefined && state !== 'Terminated') out.expiresAt = expiresAt;
  return out;
}
