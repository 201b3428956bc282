/**
 * The `aws` provider (issue 59) against moto's EC2 server on the loopback,
 * beyond aws-provider.test.ts:
 *
 * - check() sends a RunInstances with DryRun, built as a create would send
 *   it (the entry's AMI, first instance type and subnet, its security
 *   groups, the marks as tags; no user data, no client token of ours): moto's
 *   DryRunOperation (412) is ready; an UnauthorizedOperation (403, injected
 *   by the relay as EC2 writes it) is not ready, naming the permission and
 *   the code, the encoded authorization message kept whole and encoded;
 *   without `aws.imageId` the dry run is skipped and the ready target says
 *   so; no dry run launches anything.
 * - Orphan GC, through its Temporal Schedule on a real worker: an EC2
 *   instance marked with this installation and the UID of no Proxy is
 *   terminated on its second sighting, while the instance of a live Proxy
 *   and one of another installation are left alone.
 *
 * Static fake keys, the loopback endpoint, no instance metadata
 * (AWS_EC2_METADATA_DISABLED): nothing can reach AWS.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { EC2Client } from '@aws-sdk/client-ec2';
import {
  DescribeInstancesCommand,
  DescribeSecurityGroupsCommand,
  DescribeSubnetsCommand,
  type Instance as Ec2Instance,
} from '@aws-sdk/client-ec2';
import type { pino } from 'pino';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds } from '../../cli/schedules.js';
import { awsConfigSchema, type AwsConfig } from '../../providers/aws/config.js';
import { parseProviderId } from '../../providers/aws/instance.js';
import { createAwsProvider, type AwsProvider } from '../../providers/aws/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { MARK_MANAGED, MARK_UID, type CreateRequest } from '../../providers/types.js';
import type { SweepReport } from '../../workflows/gc/types.js';
import { capturedLogger } from '../helpers/captured-logger.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { Ec2Relay } from '../helpers/ec2-relay.js';
import { createProxy, waitForProxy } from '../helpers/kube.js';
import {
  MOTO_CREDENTIALS,
  MOTO_REGION,
  motoClient,
  motoImage,
  startMoto,
  type RunningMoto,
} from '../helpers/moto.js';
import { eventually } from '../helpers/temporal.js';

// The SDK must never look for an instance role on 169.254.169.254.
process.env.AWS_EC2_METADATA_DISABLED = 'true';

const live = () => new AbortController().signal;

/** Every instance moto holds, in any state. */
async function allInstances(ec2: EC2Client): Promise<Ec2Instance[]> {
  const out = await ec2.send(new DescribeInstancesCommand({}));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}

function providerOn(
  endpoint: string,
  config: Partial<AwsConfig>,
  logger: pino.Logger,
  name = 'aws-checks',
): AwsProvider {
  return createAwsProvider({
    name,
    config: awsConfigSchema.parse({ region: MOTO_REGION, endpoint, ...config }),
    logger,
    credentials: MOTO_CREDENTIALS,
    callTimeoutMs: 10_000,
  });
}

/** One moto for the file, stopped by its last afterAll. */
let motoStarted: Promise<RunningMoto> | undefined;
const sharedMoto = (): Promise<RunningMoto> => (motoStarted ??= startMoto());

// -- check(): the DryRun RunInstances ------------------------------------------

describe('aws check(): a DryRun RunInstances as a create would send it', () => {
  let moto: RunningMoto;
  let relay: Ec2Relay;
  let ec2: EC2Client;
  let imageId: string;
  let subnetId: string;
  let groupId: string;
  const { logger } = capturedLogger();

  beforeAll(async () => {
    moto = await sharedMoto();
    relay = await Ec2Relay.start(moto.endpoint);
    ec2 = motoClient(moto.endpoint);
    imageId = await motoImage(ec2);
    const subnets = await ec2.send(new DescribeSubnetsCommand({}));
    subnetId = subnets.Subnets!.find((s) => s.DefaultForAz)!.SubnetId!;
    const groups = await ec2.send(new DescribeSecurityGroupsCommand({}));
    groupId = groups.SecurityGroups!.find((g) => g.GroupName === 'default')!.GroupId!;
  });

  afterAll(async () => {
    ec2?.destroy();
    await relay?.close();
  });

  /** The form parameters of the RunInstances requests the relay saw from `from` on. */
  const dryRuns = (from: number) =>
    relay.seen
      .slice(from)
      .filter((r) => r.action === 'RunInstances')
      .map((r) => new URLSearchParams(r.body));

  it('allowed (DryRunOperation): ready, and the dry run carries what a create would, launching nothing', async () => {
    const provider = providerOn(
      relay.endpoint,
      {
        imageId,
        instanceTypes: ['t3.small', 't3.micro'],
        subnetIds: [subnetId],
        securityGroupIds: [groupId],
        tags: { team: 'crawl' },
      },
      logger,
    );
    try {
      const before = (await allInstances(ec2)).length;
      const from = relay.seen.length;
      const [target, ...more] = await provider.check(live());
      expect(more).toEqual([]);
      expect(target).toMatchObject({ name: MOTO_REGION, ready: true, reason: 'Reachable' });
      expect(target!.message).toBeUndefined();
      expect(relay.seen.slice(from).map((r) => r.action)).toEqual(['DescribeInstances', 'RunInstances']);
      const [run] = dryRuns(from);
      const p = Object.fromEntries(run!);
      expect(p).toMatchObject({
        DryRun: 'true',
        ImageId: imageId,
        InstanceType: 't3.small',
        MinCount: '1',
        MaxCount: '1',
        'NetworkInterface.1.SubnetId': subnetId,
        'NetworkInterface.1.SecurityGroupId.1': groupId,
        'MetadataOptions.HttpTokens': 'required',
        'TagSpecification.1.ResourceType': 'instance',
      });
      const tags = new Map<string, string>();
      for (let i = 1; run!.has(`TagSpecification.1.Tag.${i}.Key`); i++)
        tags.set(
          run!.get(`TagSpecification.1.Tag.${i}.Key`)!,
          run!.get(`TagSpecification.1.Tag.${i}.Value`)!,
        );
      // The marks a least-privilege policy requires at launch (aws:RequestTag), and the entry's tags.
      expect(tags.get(MARK_MANAGED)).toBe('true');
      expect(tags.get('team')).toBe('crawl');
      expect(run!.has('UserData')).toBe(false);
      // No token of ours (a create's is ep-...): the SDK fills in a random one, as for any RunInstances.
      expect(run!.get('ClientToken') ?? '').not.toMatch(/^ep-/);
      // A dry run launches nothing.
      expect((await allInstances(ec2)).length).toBe(before);
    } finally {
      await provider.close();
    }
  });

  it('not allowed (UnauthorizedOperation): not ready, naming ec2:RunInstances (DryRun) and the code, the encoded message kept whole', async () => {
    const provider = providerOn(relay.endpoint, { imageId }, logger);
    // EC2's encoded authorization messages run to a thousand characters and more.
    const encoded = `${randomBytes(900).toString('base64url')}-_`;
    try {
      const before = (await allInstances(ec2)).length;
      const from = relay.seen.length;
      relay.failNext((r) => r.action === 'RunInstances', {
        status: 403,
        code: 'UnauthorizedOperation',
        message: `You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/crawler is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1:123456789012:instance/* because no identity-based policy allows the ec2:RunInstances action. Encoded authorization failure message: ${encoded}`,
      });
      const [target] = await provider.check(live());
      // A missing permission is Forbidden, as for DescribeInstances (refused or missing credentials are Unauthorized).
      expect(target).toMatchObject({ name: MOTO_REGION, ready: false, reason: 'Forbidden' });
      expect(target!.message).toContain('ec2:RunInstances (DryRun)');
      expect(target!.message).toContain('EC2 answered 403 UnauthorizedOperation');
      expect(target!.message).toContain('aws sts decode-authorization-message');
      expect(target!.message!.length).toBeLessThanOrEqual(1024);
      // EC2's own text (which names the user and the resource) is not repeated; the token is kept, encoded.
      expect(target!.message).not.toContain('arn:aws:iam');
      expect(target!.details).toEqual({ encodedAuthorizationMessage: encoded });
      expect(dryRuns(from)).toHaveLength(1);
      expect((await allInstances(ec2)).length).toBe(before);
      // Allowed again: ready again (nothing is latched).
      expect((await provider.check(live()))[0]).toMatchObject({ ready: true, reason: 'Reachable' });
    } finally {
      relay.stopFailing();
      await provider.close();
    }
  });

  it('another refusal of the dry run is classified as check classifies (a bad AMI: APIError naming the setting)', async () => {
    const provider = providerOn(relay.endpoint, { imageId }, logger);
    try {
      // moto answers a dry run before it validates the AMI; EC2 validates first.
      relay.failNext((r) => r.action === 'RunInstances', {
        status: 400,
        code: 'InvalidAMIID.NotFound',
        message: `The image id '[${imageId}]' does not exist`,
      });
      const [target] = await provider.check(live());
      expect(target).toMatchObject({ ready: false, reason: 'APIError' });
      expect(target!.message).toContain(
        'RunInstances (DryRun, as a create would send it): ec2:RunInstances (DryRun): EC2 answered 400 InvalidAMIID.NotFound; check placement.image or aws.imageId',
      );
    } finally {
      relay.stopFailing();
      await provider.close();
    }
  });

  it('without aws.imageId the dry run is skipped, and the ready target says so', async () => {
    const provider = providerOn(relay.endpoint, {}, logger);
    try {
      const from = relay.seen.length;
      const [target] = await provider.check(live());
      expect(target).toMatchObject({ ready: true, reason: 'Reachable' });
      expect(target!.message).toMatch(/^RunInstances not checked: no aws\.imageId/);
      expect(relay.seen.slice(from).map((r) => r.action)).toEqual(['DescribeInstances']);
    } finally {
      await provider.close();
    }
  });

  it('a DescribeInstances that fails ends the check before the dry run', async () => {
    const provider = providerOn(relay.endpoint, { imageId }, logger);
    try {
      const from = relay.seen.length;
      relay.failNext((r) => r.action === 'DescribeInstances', {
        status: 401,
        code: 'AuthFailure',
        message: 'AWS was not able to validate the provided access credentials',
      });
      const [target] = await provider.check(live());
      expect(target).toMatchObject({ ready: false, reason: 'Unauthorized' });
      expect(target!.message).toMatch(/^DescribeInstances \(managed filter, 5 results\): .*AuthFailure/);
      expect(dryRuns(from)).toHaveLength(0);
    } finally {
      relay.stopFailing();
      await provider.close();
    }
  });
});

// -- orphan GC through its schedule ----------------------------------------------

describe('aws orphan GC (the schedule on a real worker, moto as EC2)', () => {
  const ROOT = join(import.meta.dirname, '..', '..');
  const installation = `aws-gc-${randomBytes(4).toString('hex')}`;
  const prefix = `aws-gc-${randomBytes(3).toString('hex')}`;
  let moto: RunningMoto;
  let ec2: EC2Client;
  let cp: ControlPlane;
  let provider: AwsProvider;
  let imageId: string;

  beforeAll(async () => {
    moto = await sharedMoto();
    ec2 = motoClient(moto.endpoint);
    imageId = await motoImage(ec2);
    cp = await startControlPlane({ prefix: 'aws-gc', installation });
    provider = providerOn(moto.endpoint, { imageId }, cp.logger, 'aws-gc');
    cp.registry.add(provider);
  });

  afterAll(async () => {
    await cp?.client.schedule
      .getHandle(scheduleIds(prefix).gc)
      .delete()
      .catch(() => undefined);
    await cp?.close();
    ec2?.destroy();
  });

  const request = (uid: string, inst: string): CreateRequest => ({
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'aws-gc',
    proxyName: `p-${uid.slice(0, 8)}`,
    placement: {},
    cloudInit: '#cloud-config\n',
    port: 3128,
    installation: inst,
  });
  const stateOf = async (id: string): Promise<string | undefined> => {
    const { instanceId } = parseProviderId(id)!;
    const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
    return out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
  };

  it('terminates an orphan of this installation on its second sighting; a live Proxy’s instance and another installation’s stay', async () => {
    // A live Proxy, its instance made by the worker through the provider.
    const sample = parseYaml(readFileSync(join(ROOT, 'infra/samples/proxy-aws.yaml'), 'utf8')) as {
      spec: Record<string, unknown>;
    };
    await createProxy(cp.api, cp.namespace, 'aws-live', { ...sample.spec, provider: 'aws-gc' } as never);
    const running = await waitForProxy(
      cp.api,
      cp.namespace,
      'aws-live',
      'an instance',
      (p) => Boolean(p.status?.providerID),
      { timeoutMs: 60_000 },
    );
    const ids = {
      live: running.status!.providerID!,
      // Tagged as the provider tags every instance: ours, this installation, a UID no Proxy has.
      orphan: await provider.create(request(randomUUID(), installation), live()),
      foreign: await provider.create(request(randomUUID(), 'another-installation'), live()),
    };
    const listed = await provider.listByTag(live());
    const orphan = listed.find((i) => i.id === ids.orphan)!;
    expect(orphan).toMatchObject({ installation, state: 'Running' });
    // GC's age comes from LaunchTime: moto stamps it at launch, so the schedule's MinAge is 1 s.
    expect(Math.abs(Date.now() - orphan.createdAt!.getTime())).toBeLessThan(5 * 60_000);
    expect(listed.find((i) => i.id === ids.foreign)?.installation).toBe('another-installation');

    expect(
      await ensureSchedules(cp.client, {
        taskQueue: cp.taskQueue,
        idPrefix: prefix,
        gc: { intervalMs: 5_000, minAgeMs: 1_000, listTimeoutMs: 10_000 },
        providerChecks: { intervalMs: 0 },
      }),
    ).toMatchObject({ gc: 'created' });
    const handle = cp.client.schedule.getHandle(scheduleIds(prefix).gc);

    await eventually(
      'GC terminated the orphan',
      async () => ((await stateOf(ids.orphan)) === 'terminated' ? true : undefined),
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    await handle.pause('test: the orphan is gone');

    // The sweep that deleted it, from the schedule's own results.
    const reports: SweepReport[] = [];
    for (const action of (await handle.describe()).info.recentActions) {
      const wf = action.action.workflow;
      reports.push(
        (await cp.client.workflow.getHandle(wf.workflowId, wf.firstExecutionRunId).result()) as SweepReport,
      );
    }
    const deleting = reports.find((r) => (r.providers['aws-gc']?.deleted.length ?? 0) > 0);
    expect(deleting, JSON.stringify(reports)).toBeDefined();
    expect(deleting!.hadPreviousSweep).toBe(true);
    const uidOf = (id: string) => listed.find((i) => i.id === id)!.uid;
    expect(deleting!.providers['aws-gc']).toMatchObject({
      deleted: [{ provider: 'aws-gc', id: ids.orphan, uid: uidOf(ids.orphan) }],
      kept: { live: 1, 'other-installation': 1, young: 0, unmarked: 0 },
      failed: [],
    });
    // Its first sighting came in an earlier sweep (two-pass confirmation).
    expect(reports.some((r) => r.providers['aws-gc']?.firstSightings.some((s) => s.id === ids.orphan))).toBe(
      true,
    );
    expect(await stateOf(ids.live)).toBe('running');
    expect(await stateOf(ids.foreign)).toBe('running');
    // The instance of the live Proxy carries its UID (what kept it).
    const liveInst = (await allInstances(ec2)).find((i) => ids.live.endsWith(`/${i.InstanceId}`))!;
    expect(liveInst.Tags?.find((t) => t.Key === MARK_UID)?.Value).toBe(running.metadata.uid);
  });
});

afterAll(async () => {
  if (motoStarted) await (await motoStarted).stop();
});
