/**
 * The `aws` provider's config block (issue 59), validated once into a typed
 * object. Pure: no I/O, no credentials, no environment read.
 *
 *   aws:
 *     region: eu-west-1                 # required: one entry per account and region
 *     imageId: ami-0123456789abcdef0    # the AMI (or resolve:ssm:<parameter>), unless every Proxy names one in placement.image
 *     instanceTypes: [t3.micro, t3a.micro]   # tried in order on a capacity refusal (placement.machineType: only that one)
 *     subnetIds: [subnet-0a1b..., subnet-0c2d...]   # tried in order on a capacity refusal; unset: the default VPC
 *     securityGroupIds: [sg-0123...]    # unset: the VPC's default group
 *     securityGroup:                    # a managed group (security-group.ts): the proxy ports from these ranges
 *       sourceRanges: [203.0.113.0/24]
 *     internalOnly: false               # true: no public IPv4; the address is the private IP
 *     ipv6: false                       # true: one IPv6 address (subnetIds with an IPv6 range), the Proxy's address
 *     tags: { team: crawl }             # extra tags on every instance (cost allocation)
 *     profile: crawl-eu                 # a named profile of the shared config; unset: the SDK's default chain
 *     market: spot                      # on-demand (default) or spot (interrupted instances are replaced)
 *     spotFallbackToOnDemand: false     # spot only: after every candidate refused for capacity, try them on-demand
 *     sdkMaxAttempts: 2                 # the SDK's own attempts per call (see below)
 *     endpoint: http://127.0.0.1:5000   # tests only: an EC2 endpoint instead of ec2.<region>.amazonaws.com
 *
 * Like the gcp provider's fields these are facts of the account and its
 * network, the same for every Proxy of one entry; placement (which feeds
 * the spec hash) only picks among them: `placement.machineType` replaces
 * the `instanceTypes` list, `placement.image` the `imageId`, and
 * `placement.zone` is sent only without `subnetIds` (a subnet is in one
 * zone already, and EC2 refuses a zone that contradicts it).
 */
import { z } from 'zod';
import { MARK_INSTALLATION, MARK_MANAGED, MARK_UID } from '../types.js';
import { securityGroupConfigSchema } from './security-group.js';

/** Commercial, GovCloud and China regions (`eu-west-1`, `us-gov-west-1`, `cn-north-1`). */
export const REGION = /^[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}$/;
/** Availability zones: the region plus a letter (`eu-west-1a`), or a Local Zone (`us-west-2-lax-1a`). */
export const AVAILABILITY_ZONE = /^[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}(?:-[a-z]{3}-\d[a-z])?[a-z]?$/;
export const AMI_ID = /^ami-[0-9a-f]{8,17}$/;
/**
 * An SSM parameter EC2 resolves to an AMI at launch
 * (`resolve:ssm:/aws/service/debian/release/12/latest/amd64`, optionally
 * `:<version>` or `:<label>`): the public image paths Debian, Ubuntu and
 * Amazon publish, so an entry follows the latest image without an AMI id
 * per region.
 */
export const SSM_IMAGE = /^resolve:ssm:\/?[A-Za-z0-9_.\-/]{1,1011}(?::[A-Za-z0-9_.-]{1,100})?$/;
/** What an image may be: an AMI id or an SSM parameter. */
export function validImage(image: string): boolean {
  return AMI_ID.test(image) || SSM_IMAGE.test(image);
}
const IMAGE_MESSAGE =
  'must be an AMI id (ami- and 8 or 17 hex digits) or an SSM parameter (resolve:ssm:/aws/service/...)';
export const SUBNET_ID = /^subnet-[0-9a-f]{8,17}$/;
export const SECURITY_GROUP_ID = /^sg-[0-9a-f]{8,17}$/;
/** `t3.micro`, `m7i-flex.large`, `u-6tb1.metal`: a family, a dot, a size. */
export const INSTANCE_TYPE = /^[a-z][a-z0-9-]{0,31}\.[a-z0-9]{1,31}$/;
/** The shared config's profile names as the CLI accepts them. */
const PROFILE = /^[A-Za-z0-9_.@+=,-]{1,128}$/;

/** Tags we write ourselves: the user's `tags` must not set them. */
export const RESERVED_TAG_PREFIXES = ['aws:', 'crawl.example.com/'];
export const RESERVED_TAG_KEYS = ['Name', MARK_MANAGED, MARK_UID, MARK_INSTALLATION];

export const DEFAULT_INSTANCE_TYPES = ['t3.micro'];
export const DEFAULT_SDK_MAX_ATTEMPTS = 2;

function unique(list: readonly string[]): boolean {
  return new Set(list).size === list.length;
}

export const awsConfigSchema = z
  .strictObject({
    region: z
      .string({ error: 'is required (the EC2 region the instances are made in)' })
      .regex(REGION, 'must be an AWS region such as eu-west-1'),
    imageId: z.string().refine(validImage, IMAGE_MESSAGE).optional(),
    instanceTypes: z
      .array(z.string().regex(INSTANCE_TYPE, 'must be an EC2 instance type such as t3.micro'))
      .min(1, 'must list at least one instance type')
      .max(10, 'must list at most 10 instance types')
      .refine(unique, 'must not repeat an instance type')
      .default(DEFAULT_INSTANCE_TYPES),
    subnetIds: z
      .array(z.string().regex(SUBNET_ID, 'must be a subnet id (subnet- and 8 or 17 hex digits)'))
      .min(1, 'must list at least one subnet (or leave subnetIds out for the default VPC)')
      .max(16, 'must list at most 16 subnets')
      .refine(unique, 'must not repeat a subnet')
      .optional(),
    securityGroupIds: z
      .array(z.string().regex(SECURITY_GROUP_ID, 'must be a security group id (sg- and 8 or 17 hex digits)'))
      .min(1, 'must list at least one group (or leave securityGroupIds out)')
      .max(5, 'must list at most 5 groups (EC2 allows 5 per network interface by default)')
      .refine(unique, 'must not repeat a group')
      .optional(),
    /**
     * A security group the provider check creates and corrects: the proxy
     * ports from `sourceRanges` only (security-group.ts). Instances launch
     * into it, and into `securityGroupIds` when both are set.
     */
    securityGroup: securityGroupConfigSchema.optional(),
    /** No public IPv4 address (none is asked for): the address is the private IP (crawlers inside the VPC). */
    internalOnly: z.boolean({ error: 'must be true or false' }).default(false),
    /**
     * One IPv6 address from the subnet's range, and it is the Proxy's
     * address (crawlers reach it over IPv6; with internalOnly, no public
     * IPv4 is paid for). Needs subnetIds: the network interface asks for it.
     */
    ipv6: z.boolean({ error: 'must be true or false' }).default(false),
    /** Extra tags on every instance; ours (Name, the marks) cannot be set here. */
    tags: z
      .record(
        z
          .string()
          .min(1, 'must not be empty')
          .max(128, 'must be at most 128 characters (EC2 tag keys)')
          .refine(
            (k) => !RESERVED_TAG_KEYS.includes(k) && !RESERVED_TAG_PREFIXES.some((p) => k.startsWith(p)),
            'is written by the provider (Name, aws:, crawl.example.com/) and cannot be set here',
          ),
        z.string().max(256, 'must be at most 256 characters (EC2 tag values)'),
      )
      .refine((t) => Object.keys(t).length <= 40, 'must have at most 40 tags (EC2 allows 50, we write 5)')
      .default({}),
    /**
     * `spot`: every instance is a one-time Spot instance that EC2 terminates
     * on interruption (InstanceInterruptionBehavior terminate: a stopped
     * proxy is no use to anyone). The two-minute notice becomes the
     * instance's `expiresAt`, so a pool replaces it drained first; the
     * instance EC2 then terminates is replaced like any other gone instance.
     */
    market: z.enum(['on-demand', 'spot'], { error: 'must be on-demand or spot' }).default('on-demand'),
    /** Spot only (refused on-demand): when every candidate refused for capacity, try the same candidates on-demand. */
    spotFallbackToOnDemand: z.boolean({ error: 'must be true or false' }).default(false),
    /** A named profile of the shared config and credentials files; unset: the SDK's default chain. */
    profile: z.string().regex(PROFILE, 'must be a profile name of the shared AWS config').optional(),
    /**
     * How many times the SDK itself sends one request (1 = no retry of its
     * own). Every failed activity is retried by Temporal with backoff too, so
     * the two multiply: 2 absorbs a lone network blip or throttle inside the
     * call and leaves the rest to Temporal. (The SDK retries
     * RequestLimitExceeded and every 500/502/503/504, InsufficientInstanceCapacity
     * included: with more attempts a capacity refusal costs seconds before the
     * next instance type or subnet is tried.)
     */
    sdkMaxAttempts: z
      .int('must be a whole number')
      .min(1, 'must be at least 1')
      .max(5, 'must be at most 5 (Temporal retries the activity as well)')
      .default(DEFAULT_SDK_MAX_ATTEMPTS),
    /**
     * An EC2 endpoint (`http://host:port` or `https://host[:port]`) used
     * instead of the region's; the tests point it at moto.
     */
    endpoint: z
      .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
      .refine((v) => {
        const u = new URL(v);
        return (
          (u.pathname === '/' || u.pathname === '') &&
          u.search === '' &&
          u.username === '' &&
          u.password === ''
        );
      }, 'must be a scheme, host and port only (no path, query or credentials)')
      .optional(),
  })
  .superRefine((cfg, ctx) => {
    if (cfg.ipv6 && cfg.subnetIds === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['ipv6'],
        message:
          'needs subnetIds: subnets with an IPv6 range (the network interface asks for an address of it)',
      });
    // A fallback on an on-demand entry would be silently meaningless: refuse it.
    if (cfg.spotFallbackToOnDemand && cfg.market !== 'spot')
      ctx.addIssue({
        code: 'custom',
        path: ['spotFallbackToOnDemand'],
        message: 'is only valid with market: spot',
      });
  });

export type AwsConfig = z.output<typeof awsConfigSchema>;
