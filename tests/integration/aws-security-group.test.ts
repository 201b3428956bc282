/**
 * The aws provider's managed security group (issue 59, item 6) against
 * moto's EC2 server through the real SDK: the check creates it (the proxy
 * ports from `sourceRanges` only, marked with the installation and the
 * entry), finds it again without changing it, undoes a hand edit, follows
 * a config change; a create launches into it; orphan GC deletes the group
 * of an entry no longer configured and keeps the rest.
 */
import { randomUUID } from 'node:crypto';
import type { EC2Client } from '@aws-sdk/client-ec2';
import {
  AuthorizeSecurityGroupIngressCommand,
  CreateTagsCommand,
  DescribeInstancesCommand,
  DescribeSecurityGroupsCommand,
  type SecurityGroup,
} from '@aws-sdk/client-ec2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awsConfigSchema } from '../../providers/aws/config.js';
import { parseProviderId } from '../../providers/aws/instance.js';
import { createAwsProvider, type AwsProvider } from '../../providers/aws/provider.js';
import {
  MARK_CREATED,
  MARK_ENTRY,
  securityGroupConfigSchema,
  securityGroupName,
} from '../../providers/aws/security-group.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { MARK_INSTALLATION, MARK_MANAGED } from '../../providers/types.js';
import { capturedLogger } from '../helpers/captured-logger.js';
import { Ec2Relay } from '../helpers/ec2-relay.js';
import {
  MOTO_CREDENTIALS,
  MOTO_REGION,
  motoClient,
  motoImage,
  startMoto,
  type RunningMoto,
} from '../helpers/moto.js';

process.env.AWS_EC2_METADATA_DISABLED = 'true';

const live = () => new AbortController().signal;

/** A group's ingress as `tcp <port> <cidr>` lines, sorted. */
function ingress(g: SecurityGroup | undefined): string[] {
  return (g?.IpPermissions ?? [])
    .flatMap((p) =>
      [...(p.IpRanges ?? []).map((r) => r.CidrIp), ...(p.Ipv6Ranges ?? []).map((r) => r.CidrIpv6)].map(
        (cidr) => `${p.IpProtocol} ${p.FromPort}-${p.ToPort} ${cidr}`,
      ),
    )
    .sort();
}

describe('aws: the managed security group', () => {
  let moto: RunningMoto;
  let relay: Ec2Relay;
  let ec2: EC2Client;
  let imageId: string;
  const { logger, lines } = capturedLogger();
  const installation = `sg-${randomUUID().slice(0, 8)}`;
  const providers: AwsProvider[] = [];

  const providerFor = (entry: string, securityGroup: Record<string, unknown>, entries = [entry]) => {
    const p = createAwsProvider({
      name: entry,
      config: awsConfigSchema.parse({
        region: MOTO_REGION,
        endpoint: relay.endpoint,
        imageId,
        securityGroup,
      }),
      logger,
      credentials: MOTO_CREDENTIALS,
      callTimeoutMs: 10_000,
      installation,
      entries: entries.map((name) => ({ name, type: 'aws' })),
    });
    providers.push(p);
    return p;
  };
  const groupOf = async (entry: string, inst = installation): Promise<SecurityGroup | undefined> => {
    const out = await ec2.send(
      new DescribeSecurityGroupsCommand({
        Filters: [
          { Name: `tag:${MARK_INSTALLATION}`, Values: [inst] },
          { Name: `tag:${MARK_ENTRY}`, Values: [entry] },
        ],
      }),
    );
    return out.SecurityGroups?.[0];
  };
  const groupTarget = async (p: AwsProvider) => {
    const targets = await p.check(live());
    const t = targets.find((x) => x.name.startsWith('security-group/'));
    expect(t, JSON.stringify(targets)).toBeDefined();
    return t!;
  };

  beforeAll(async () => {
    moto = await startMoto();
    relay = await Ec2Relay.start(moto.endpoint);
    ec2 = motoClient(moto.endpoint);
    imageId = await motoImage(ec2);
  });
  afterAll(async () => {
    for (const p of providers) await p.close();
    ec2?.destroy();
    await relay?.close();
    await moto?.stop();
  });

  it('the check makes the group (the proxy ports from sourceRanges only, marked), then finds it unchanged', async () => {
    const p = providerFor('aws-sg', {
      sourceRanges: ['203.0.113.0/24', '2001:db8::/48'],
      ports: [3128, 8080],
    });
    const made = await groupTarget(p);
    expect(made).toMatchObject({ ready: true, reason: 'Reachable' });
    expect(made.message).toMatch(
      /^sg-[0-9a-f]+ created: tcp 3128,8080 from 203\.0\.113\.0\/24, 2001:db8::\/48$/,
    );
    const g = await groupOf('aws-sg');
    expect(g?.GroupName).toBe(securityGroupName(installation, 'aws-sg'));
    const tags: Record<string, string | undefined> = Object.fromEntries(
      (g?.Tags ?? []).map((t) => [t.Key ?? '', t.Value]),
    );
    expect(tags).toMatchObject({
      [MARK_MANAGED]: 'true',
      [MARK_INSTALLATION]: installation,
      [MARK_ENTRY]: 'aws-sg',
    });
    expect(Number.isNaN(Date.parse(tags[MARK_CREATED] ?? ''))).toBe(false);
    expect(ingress(g)).toEqual([
      'tcp 3128-3128 2001:db8::/48',
      'tcp 3128-3128 203.0.113.0/24',
      'tcp 8080-8080 2001:db8::/48',
      'tcp 8080-8080 203.0.113.0/24',
    ]);

    const writes = () =>
      relay.seen.filter((r) => /^(Create|Authorize|Revoke|Delete)Security/.test(r.action)).length;
    const before = writes();
    const again = await groupTarget(p);
    expect(again.message).toContain(`${g!.GroupId} as configured`);
    expect(writes()).toBe(before);
  });

  it('a create launches into the group, besides the configured groups', async () => {
    const p = providerFor('aws-sg', {
      sourceRanges: ['203.0.113.0/24', '2001:db8::/48'],
      ports: [3128, 8080],
    });
    const uid = randomUUID();
    const id = await p.create(
      {
        name: instanceNameFromUid(uid),
        uid,
        namespace: 'sg',
        proxyName: 'px',
        placement: {},
        port: 3128,
        installation,
      },
      live(),
    );
    const out = await ec2.send(
      new DescribeInstancesCommand({ InstanceIds: [parseProviderId(id)!.instanceId] }),
    );
    const groups = out.Reservations?.[0]?.Instances?.[0]?.SecurityGroups?.map((s) => s.GroupId);
    expect(groups).toContain((await groupOf('aws-sg'))!.GroupId);
  });

  it('a hand edit is undone at the next check; a config change is followed', async () => {
    const g = (await groupOf('aws-sg'))!;
    await ec2.send(
      new AuthorizeSecurityGroupIngressCommand({
        GroupId: g.GroupId,
        IpPermissions: [{ IpProtocol: 'tcp', FromPort: 22, ToPort: 22, IpRanges: [{ CidrIp: '0.0.0.0/0' }] }],
      }),
    );
    expect(ingress(await groupOf('aws-sg'))).toContain('tcp 22-22 0.0.0.0/0');
    const p = providerFor('aws-sg', {
      sourceRanges: ['203.0.113.0/24', '2001:db8::/48'],
      ports: [3128, 8080],
    });
    const corrected = await groupTarget(p);
    expect(corrected.message).toContain('corrected (0 rule(s) added, 1 revoked)');
    expect(ingress(await groupOf('aws-sg'))).not.toContain('tcp 22-22 0.0.0.0/0');

    // The entry now allows one range on one port.
    const narrowed = providerFor('aws-sg', { sourceRanges: ['198.51.100.0/24'] });
    const t = await groupTarget(narrowed);
    expect(t.message).toContain('corrected (1 rule(s) added, 4 revoked)');
    expect(ingress(await groupOf('aws-sg'))).toEqual(['tcp 3128-3128 198.51.100.0/24']);
    // Still one group for the entry.
    const all = await ec2.send(
      new DescribeSecurityGroupsCommand({ Filters: [{ Name: `tag:${MARK_ENTRY}`, Values: ['aws-sg'] }] }),
    );
    expect(all.SecurityGroups).toHaveLength(1);
  });

  it('orphan GC deletes the group of an entry no longer configured, once it is old enough, and keeps the rest', async () => {
    await groupTarget(providerFor('aws-gone', { sourceRanges: ['203.0.113.0/24'] }));
    await groupTarget(providerFor('aws-young', { sourceRanges: ['203.0.113.0/24'] }));
    const gone = (await groupOf('aws-gone'))!;
    // EC2 shows a group as old as its creation tag says: this one was made an hour ago.
    await ec2.send(
      new CreateTagsCommand({
        Resources: [gone.GroupId!],
        Tags: [{ Key: MARK_CREATED, Value: new Date(Date.now() - 3_600_000).toISOString() }],
      }),
    );
    // The worker's config now has aws-sg only: aws-gone and aws-young are entries no longer configured.
    const p = providerFor('aws-sg', { sourceRanges: ['198.51.100.0/24'] });
    // The listing GC asks for; a plain listing collects nothing.
    await p.listByTag(live());
    expect(await groupOf('aws-gone')).toBeDefined();
    await p.listByTag(live(), { collectOrphans: true });
    expect(await groupOf('aws-gone')).toBeUndefined();
    // Too young to be sure (a worker with a newer config may have just made it), and the configured one.
    expect(await groupOf('aws-young')).toBeDefined();
    expect(await groupOf('aws-sg')).toBeDefined();
    expect(lines.some((l) => l.includes('no longer configured deleted'))).toBe(true);
  });

  it('the block is validated, naming the field', () => {
    const parse = (sg: Record<string, unknown>) =>
      securityGroupConfigSchema.safeParse(sg).error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    expect(parse({ sourceRanges: ['0.0.0.0/0'] })).toEqual([
      'sourceRanges.0: must not be /0: that opens the proxies to the whole internet',
    ]);
    expect(parse({ sourceRanges: ['203.0.113.1/24'] })?.[0]).toContain('no host bits set');
    expect(parse({ sourceRanges: [] })?.[0]).toContain('at least one CIDR range');
    expect(parse({ sourceRanges: ['203.0.113.0/24'], ports: [0] })?.[0]).toContain('port number');
    expect(parse({ sourceRanges: ['203.0.113.0/24'], vpcId: 'vpc-x' })?.[0]).toContain('VPC id');
  });
});
