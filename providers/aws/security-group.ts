/**
 * The managed security group of an entry with `aws.securityGroup` (issue
 * 59): the proxy ports open from `sourceRanges` only, nothing else in.
 *
 *   aws:
 *     securityGroup:
 *       sourceRanges: [203.0.113.0/24]   # required: who may reach the proxies
 *       ports: [3128]                    # default
 *       vpcId: vpc-0123...               # default: the region's default VPC
 *
 * One group per entry and installation, found by its tags (the managed
 * mark, the installation, the entry), named
 * `egress-proxies-<installation>-<entry>`. The provider check reads it (one
 * DescribeSecurityGroups), creates it when missing and corrects its ingress
 * when it differs from the config (a hand edit or a config change: EC2
 * rules carry no author, so both are undone), and reports it as its own
 * ProviderHealth target, `security-group/<name>`. A create launches into
 * it (made first when no check has run yet). Orphan GC deletes the group
 * of an entry no longer configured (`collect`), once no instance uses it.
 * Egress is left as EC2 makes it (all out): the proxies' own policy
 * governs where traffic goes.
 */
import type { IpPermission, SecurityGroup } from '@aws-sdk/client-ec2';
import { z } from 'zod';
import { CallEnded } from '../shared/bounded-call.js';
import { canonicalCidr } from '../shared/cidr.js';
import { portsField, sourceRangesField } from '../shared/ingress-fields.js';
import type { Operations } from '../shared/operation.js';
import { MARK_INSTALLATION, MARK_MANAGED, MARK_MANAGED_VALUE, type TargetStatus } from '../types.js';
import { checkReason, classify, ec2ErrorCode } from './classify.js';
import type { Ec2Clients } from './client.js';

/** The entry a group belongs to (with the installation mark: whose it is). */
export const MARK_ENTRY = 'crawl.example.com/provider-entry';
/** When the group was made (EC2 records no creation time for a group): GC spares a young one. */
export const MARK_CREATED = 'crawl.example.com/created-at';
export const VPC_ID = /^vpc-[0-9a-f]{8,17}$/;
/** GC's default minimum age, for groups as for instances. */
export const COLLECT_MIN_AGE_MS = 10 * 60_000;

export const securityGroupConfigSchema = z.strictObject({
  sourceRanges: sourceRangesField().max(
    50,
    'must list at most 50 ranges (EC2 allows 60 rules per group by default)',
  ),
  ports: portsField().max(5, 'must list at most 5 ports').default([3128]),
  vpcId: z.string().regex(VPC_ID, 'must be a VPC id (vpc- and 8 or 17 hex digits)').optional(),
});

export type SecurityGroupConfig = z.output<typeof securityGroupConfigSchema>;

export function securityGroupName(installation: string, entry: string): string {
  return `egress-proxies-${installation}-${entry}`.slice(0, 255);
}

/** One ingress rule as compared: `tcp <port> <canonical cidr>`. */
type Rule = string;

function desiredRules(config: SecurityGroupConfig): Set<Rule> {
  const out = new Set<Rule>();
  for (const port of config.ports)
    for (const range of config.sourceRanges) out.add(`tcp ${port} ${canonicalCidr(range) ?? range}`);
  return out;
}

/**
 * The group's ingress as rules. A permission that is not one tcp port
 * (a range, another protocol, a group reference, a prefix list) is kept
 * whole under a key of its own: it is never wanted, so it is revoked as it is.
 */
function currentRules(group: SecurityGroup): Map<Rule, IpPermission> {
  const out = new Map<Rule, IpPermission>();
  for (const p of group.IpPermissions ?? []) {
    const single = p.IpProtocol === 'tcp' && p.FromPort !== undefined && p.FromPort === p.ToPort;
    const sources = [
      ...(p.IpRanges ?? []).map((r) => ({
        cidr: r.CidrIp ?? '',
        perm: { ...p, IpRanges: [r], Ipv6Ranges: [], UserIdGroupPairs: [], PrefixListIds: [] },
      })),
      ...(p.Ipv6Ranges ?? []).map((r) => ({
        cidr: r.CidrIpv6 ?? '',
        perm: { ...p, IpRanges: [], Ipv6Ranges: [r], UserIdGroupPairs: [], PrefixListIds: [] },
      })),
    ];
    for (const s of sources) {
      const key = single
        ? `tcp ${p.FromPort} ${canonicalCidr(s.cidr) ?? s.cidr}`
        : `other ${JSON.stringify(s.perm)}`;
      out.set(key, s.perm);
    }
    if ((p.UserIdGroupPairs ?? []).length > 0 || (p.PrefixListIds ?? []).length > 0)
      out.set(`other ${JSON.stringify(p)}`, { ...p, IpRanges: [], Ipv6Ranges: [] });
  }
  return out;
}

function permissionOf(rule: Rule): IpPermission {
  const [, port, cidr] = rule.split(' ') as [string, string, string];
  const p = Number(port);
  return cidr.includes(':')
    ? { IpProtocol: 'tcp', FromPort: p, ToPort: p, Ipv6Ranges: [{ CidrIpv6: cidr }] }
    : { IpProtocol: 'tcp', FromPort: p, ToPort: p, IpRanges: [{ CidrIp: cidr }] };
}

export interface SecurityGroupsDeps {
  ec2: Ec2Clients;
  ops: Operations;
  region: string;
  config: SecurityGroupConfig;
  /** The entry this group belongs to. */
  entry: { name: string; type: string };
  installation: string;
  /** Every configured entry: groups of the aws ones are kept by GC. */
  entries: readonly { name: string; type: string }[];
}

export class SecurityGroups {
  readonly name: string;
  /** The group's id once found or made (a create launches into it). */
  private id: string | undefined;
  private ensuring: Promise<string> | undefined;

  constructor(private readonly deps: SecurityGroupsDeps) {
    this.name = securityGroupName(deps.installation, deps.entry.name);
  }

  private filters(all = false) {
    const { installation, entry, config } = this.deps;
    return [
      { Name: `tag:${MARK_MANAGED}`, Values: [MARK_MANAGED_VALUE] },
      { Name: `tag:${MARK_INSTALLATION}`, Values: [installation] },
      ...(all ? [] : [{ Name: `tag:${MARK_ENTRY}`, Values: [entry.name] }]),
      ...(config.vpcId !== undefined && !all ? [{ Name: 'vpc-id', Values: [config.vpcId] }] : []),
    ];
  }

  private async describe(signal: AbortSignal, operation: 'check' | 'create' | 'list', all = false) {
    const { ec2, region } = this.deps;
    const out: SecurityGroup[] = [];
    let nextToken: string | undefined;
    for (let page = 0; page < 100; page++) {
      const answer = await ec2.send(
        region,
        'DescribeSecurityGroups',
        operation,
        signal,
        (c, sdk, abortSignal) =>
          c.send(
            new sdk.DescribeSecurityGroupsCommand({
              Filters: this.filters(all),
              MaxResults: 1000,
              ...(nextToken !== undefined ? { NextToken: nextToken } : {}),
            }),
            { abortSignal },
          ),
      );
      out.push(...(answer.SecurityGroups ?? []));
      nextToken = answer.NextToken || undefined;
      if (nextToken === undefined) break;
    }
    return out;
  }

  /** Forgets the group's id (EC2 says it is gone): the next launch finds or makes it again. */
  forget(): void {
    this.id = undefined;
  }

  /** The group's id for a launch: found, or made and opened, once per process. */
  groupId(signal: AbortSignal): Promise<string> {
    if (this.id !== undefined) return Promise.resolve(this.id);
    this.ensuring ??= this.ensure(signal, 'create')
      .then((r) => r.id)
      .finally(() => (this.ensuring = undefined));
    return this.ensuring;
  }

  /** Finds or makes the group and puts its ingress right; what it did. */
  private async ensure(
    signal: AbortSignal,
    operation: 'check' | 'create',
  ): Promise<{ id: string; made: boolean; added: number; removed: number }> {
    const { ec2, region, config, installation, entry } = this.deps;
    const found = (await this.describe(signal, operation)).sort((a, b) =>
      (a.GroupId ?? '').localeCompare(b.GroupId ?? ''),
    );
    let group = found[0];
    let made = false;
    if (group === undefined) {
      const created = await ec2.send(
        region,
        'CreateSecurityGroup',
        operation,
        signal,
        (c, sdk, abortSignal) =>
          c.send(
            new sdk.CreateSecurityGroupCommand({
              GroupName: this.name,
              Description: `egress-proxies: the proxy ports of provider entry ${entry.name}, from its sourceRanges`,
              ...(config.vpcId !== undefined ? { VpcId: config.vpcId } : {}),
              TagSpecifications: [
                {
                  ResourceType: 'security-group',
                  Tags: [
                    { Key: 'Name', Value: this.name },
                    { Key: MARK_MANAGED, Value: MARK_MANAGED_VALUE },
                    { Key: MARK_INSTALLATION, Value: installation },
                    { Key: MARK_ENTRY, Value: entry.name },
                    { Key: MARK_CREATED, Value: new Date().toISOString() },
                  ],
                },
              ],
            }),
            { abortSignal },
          ),
      );
      group = { GroupId: created.GroupId, IpPermissions: [] };
      made = true;
      this.deps.ops.log.info({ group: this.name, id: created.GroupId }, 'security group created');
    }
    const id = group.GroupId ?? '';
    const want = desiredRules(config);
    const have = currentRules(group);
    const missing = [...want].filter((r) => !have.has(r));
    const extra = [...have.entries()].filter(([r]) => !want.has(r)).map(([, p]) => p);
    if (extra.length > 0) {
      await ec2.send(region, 'RevokeSecurityGroupIngress', operation, signal, (c, sdk, abortSignal) =>
        c.send(new sdk.RevokeSecurityGroupIngressCommand({ GroupId: id, IpPermissions: extra }), {
          abortSignal,
        }),
      );
      this.deps.ops.log.warn(
        { group: this.name, id, removed: extra.length },
        'security group: ingress not in the config revoked',
      );
    }
    if (missing.length > 0) {
      try {
        await ec2.send(region, 'AuthorizeSecurityGroupIngress', operation, signal, (c, sdk, abortSignal) =>
          c.send(
            new sdk.AuthorizeSecurityGroupIngressCommand({
              GroupId: id,
              IpPermissions: missing.map(permissionOf),
            }),
            { abortSignal },
          ),
        );
      } catch (err) {
        // Another worker added them meanwhile: the next check compares again.
        if (ec2ErrorCode(err) !== 'InvalidPermission.Duplicate') throw err;
      }
    }
    this.id = id;
    return { id, made, added: missing.length, removed: extra.length };
  }

  /** The group as its own ProviderHealth target. */
  async check(signal: AbortSignal): Promise<TargetStatus> {
    const started = Date.now();
    const target = { name: `security-group/${this.name}`, address: this.deps.ec2.address() };
    try {
      const r = await this.ensure(signal, 'check');
      const what = r.made
        ? 'created'
        : r.added + r.removed > 0
          ? `corrected (${r.added} rule(s) added, ${r.removed} revoked)`
          : 'as configured';
      const { ports, sourceRanges } = this.deps.config;
      return {
        ...target,
        ready: true,
        reason: 'Reachable',
        message: `${r.id} ${what}: tcp ${ports.join(',')} from ${sourceRanges.join(', ')}`.slice(0, 1024),
        latencyMillis: Date.now() - started,
      };
    } catch (err) {
      const ended = err instanceof CallEnded;
      const c = ended ? undefined : classify(err, 'security group');
      return {
        ...target,
        ready: false,
        reason: checkReason(err, ended || signal.aborted),
        message: (ended ? err.message : `security group ${this.name}: ${c!.summary}`).slice(0, 1024),
        latencyMillis: Date.now() - started,
      };
    }
  }

  /**
   * Orphan GC: this installation's groups of aws entries no longer
   * configured, older than GC's minimum age, are deleted. A group an
   * instance still uses answers DependencyViolation: kept, tried again at
   * the next sweep (the instances go first, by GC of their own). Never
   * throws: the listing it rides on must not fail for it.
   */
  async collect(signal: AbortSignal): Promise<void> {
    const { ec2, ops, region, entry, entries } = this.deps;
    const configured = new Set(entries.filter((e) => e.type === entry.type).map((e) => e.name));
    configured.add(entry.name);
    let groups: SecurityGroup[];
    try {
      groups = await this.describe(signal, 'list', true);
    } catch (err) {
      ops.log.warn(
        { error: classify(err, 'DescribeSecurityGroups').summary },
        'security groups not collected; tried again next sweep',
      );
      return;
    }
    for (const g of groups) {
      const tag = (k: string) => g.Tags?.find((t) => t.Key === k)?.Value;
      const owner = tag(MARK_ENTRY);
      if (owner === undefined || configured.has(owner)) continue;
      if (g.GroupName !== securityGroupName(this.deps.installation, owner)) continue;
      const created = Date.parse(tag(MARK_CREATED) ?? '');
      if (!Number.isNaN(created) && Date.now() - created < COLLECT_MIN_AGE_MS) continue;
      try {
        await ec2.send(region, 'DeleteSecurityGroup', 'list', signal, (c, sdk, abortSignal) =>
          c.send(new sdk.DeleteSecurityGroupCommand({ GroupId: g.GroupId }), { abortSignal }),
        );
        ops.log.warn(
          { group: g.GroupName, id: g.GroupId, entry: owner },
          'security group of a provider entry no longer configured deleted',
        );
      } catch (err) {
        const code = ec2ErrorCode(err);
        if (code === 'InvalidGroup.NotFound') continue;
        ops.log.warn(
          { group: g.GroupName, id: g.GroupId, ec2Code: code },
          code === 'DependencyViolation'
            ? 'security group of an unconfigured entry still in use; tried again next sweep'
            : 'deleting a security group failed; tried again next sweep',
        );
      }
    }
  }
}
