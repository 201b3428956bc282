/**
 * The `aws` provider (issue 59, first slice) against moto's EC2 server,
 * started here on the loopback (tests/helpers/moto.ts), through the real
 * `@aws-sdk/client-ec2` with real SigV4 signing and static fake keys; the
 * endpoint is always the loopback, and the instance metadata service is
 * off for the SDK (AWS_EC2_METADATA_DISABLED), so nothing can reach AWS.
 *
 * - The conformance suite, every hook (a relay in front of moto holds
 *   requests for the stall hook and shows what moto cannot: a launch time
 *   rewritten, an unknown state, running without an address, shutting-down).
 * - What RunInstances carries, read back from moto: the marks as tags at
 *   launch, IMDSv2 required with hop limit 1, the cloud-init as user data,
 *   a ClientToken.
 * - A replacement with the same spec after the instance was terminated is
 *   a new instance with a new ClientToken (EC2 would answer the old token
 *   with the dead instance).
 * - EC2's refusals of a bad AMI or subnet end Permanent naming the field.
 * - A capacity refusal (injected by the relay as EC2 writes it) moves on to
 *   the next subnet; a quota refusal is QuotaExceeded.
 * - listByTag pages through DescribeInstances and leaves terminated
 *   instances out.
 * - A registered `type: aws` entry builds from the providers config.
 * - Behind a relay that behaves as EC2 where moto does not (ClientToken,
 *   eventual consistency, pending): a create whose answer is lost after
 *   EC2 acted, retried, ends with exactly one instance; an instance
 *   invisible for 10 s after its launch is "not visible yet", never gone,
 *   a repeat create in that window launches nothing, and it goes pending
 *   then Running; a retried create whose user data changed (a new htpasswd
 *   salt) adopts the first one's instance through IdempotentParameterMismatch;
 *   a token whose instance was terminated (and has aged out of listings)
 *   moves to the next generation on IdempotentInstanceTerminated.
 *
 * Proxies end to end (a real worker, bridge and api, Ready through the
 * prober, Spot interruptions): aws-end-to-end.test.ts.
 */
import { randomUUID } from 'node:crypto';
import type { EC2Client } from '@aws-sdk/client-ec2';
import {
  CreateTagsCommand,
  DescribeInstanceAttributeCommand,
  DescribeInstancesCommand,
  DescribeSubnetsCommand,
  RunInstancesCommand,
  TerminateInstancesCommand,
  type Instance as Ec2Instance,
} from '@aws-sdk/client-ec2';
import type { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { awsConfigSchema, type AwsConfig } from '../../providers/aws/config.js';
import {
  clientToken,
  MARK_SPEC_HASH,
  parseProviderId,
  requestSpecHash,
} from '../../providers/aws/instance.js';
import {
  createAwsProvider,
  type AwsProvider,
  type AwsProviderOptions,
} from '../../providers/aws/provider.js';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { ProviderError } from '../../providers/errors.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { MARK_INSTALLATION, MARK_MANAGED, MARK_UID, type CreateRequest } from '../../providers/types.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import { Ec2Relay, withoutInstances } from '../helpers/ec2-relay.js';
import {
  MOTO_CREDENTIALS,
  MOTO_REGION,
  motoClient,
  motoImage,
  startMoto,
  type RunningMoto,
} from '../helpers/moto.js';
import { eventually } from '../helpers/temporal.js';
import { capturedLogger } from '../helpers/captured-logger.js';

// The SDK must never look for an instance role on 169.254.169.254.
process.env.AWS_EC2_METADATA_DISABLED = 'true';

const live = () => new AbortController().signal;

async function describe1(ec2: EC2Client, instanceId: string): Promise<Ec2Instance> {
  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  const inst = out.Reservations?.[0]?.Instances?.[0];
  if (inst === undefined) throw new Error(`moto does not show ${instanceId}`);
  return inst;
}

function providerOn(
  endpoint: string,
  config: Partial<AwsConfig>,
  logger: pino.Logger,
  extra: Partial<AwsProviderOptions> = {},
): AwsProvider {
  return createAwsProvider({
    name: 'aws-test',
    config: awsConfigSchema.parse({ region: MOTO_REGION, endpoint, ...config }),
    logger,
    credentials: MOTO_CREDENTIALS,
    callTimeoutMs: 10_000,
    ...extra,
  });
}

function instanceIdOf(id: string): string {
  const parsed = parseProviderId(id);
  if (parsed === undefined) throw new Error(`not an aws providerID: ${id}`);
  return parsed.instanceId;
}

// -- the conformance suite ---------------------------------------------------

/**
 * One moto for the whole file (it takes seconds to start): every test's
 * instances carry their own names, UIDs and installation, so they do not
 * see each other's. Stopped by the file's last afterAll.
 */
let motoStarted: Promise<RunningMoto> | undefined;
const sharedMoto = (): Promise<RunningMoto> => (motoStarted ??= startMoto());

let conformanceRelay: Ec2Relay | undefined;
describeProviderConformance('aws (moto)', async () => {
  const moto = await sharedMoto();
  const relay = (conformanceRelay = await Ec2Relay.start(moto.endpoint));
  const ec2 = motoClient(moto.endpoint);
  const imageId = await motoImage(ec2);
  const { logger, lines } = capturedLogger();
  const provider = providerOn(relay.endpoint, { imageId }, logger);
  const rawRun = async (tags: { Key: string; Value: string }[]): Promise<string> => {
    const out = await ec2.send(
      new RunInstancesCommand({
        ImageId: imageId,
        MinCount: 1,
        MaxCount: 1,
        InstanceType: 't3.micro',
        TagSpecifications: [{ ResourceType: 'instance', Tags: tags }],
      }),
    );
    return `${MOTO_REGION}/${out.Instances![0]!.InstanceId!}`;
  };
  return {
    provider,
    logLines: () => lines,
    malformedIds: [
      'us-east-1/',
      '/i-0123456789abcdef0',
      'us-east-1/i-0123',
      'us-east-1/i-0123456789ABCDEF0',
      'us-east-1/sg-0123456789abcdef0',
      'nowhere/i-0123456789abcdef0',
      'us-east-1/i-0123456789abcdef0/x',
      'i-0123456789abcdef0',
    ],
    hooks: {
      // The UID tag in moto itself; LaunchTime is moto's to set, so the relay shows the new one.
      rewriteMarks: async (id, { uid, createdAt }) => {
        const instanceId = instanceIdOf(id);
        await ec2.send(
          new CreateTagsCommand({ Resources: [instanceId], Tags: [{ Key: MARK_UID, Value: uid }] }),
        );
        relay.rewriteAnswers(
          (r) => r.action === 'DescribeInstances' && r.body.includes(instanceId),
          (body) =>
            body.replace(
              /<launchTime>[^<]*<\/launchTime>/g,
              `<launchTime>${createdAt.toISOString()}</launchTime>`,
            ),
        );
      },
      // A state EC2 may add one day (its code is outside today's 0-80).
      setUnknownState: (id) => {
        const instanceId = instanceIdOf(id);
        relay.rewriteAnswers(
          (r) => r.action === 'DescribeInstances' && r.body.includes(instanceId),
          (body) =>
            body.replace(
              /<instanceState>\s*<code>\d+<\/code>\s*<name>[a-z-]+<\/name>\s*<\/instanceState>/g,
              '<instanceState><code>96</code><name>hibernating</name></instanceState>',
            ),
        );
        return Promise.resolve();
      },
      // Running, its public address not there yet (EC2 assigns it a moment after the state turns).
      setRunningWithoutIp: (id) => {
        const instanceId = instanceIdOf(id);
        relay.rewriteAnswers(
          (r) => r.action === 'DescribeInstances' && r.body.includes(instanceId),
          (body) => body.replace(/<ipAddress>[^<]*<\/ipAddress>/g, ''),
        );
        return Promise.resolve();
      },
      createUnmarked: (name) => rawRun([{ Key: 'Name', Value: name }]),
      createMarkedWithEmptyUid: (name) =>
        rawRun([
          { Key: 'Name', Value: name },
          { Key: MARK_MANAGED, Value: 'true' },
          { Key: MARK_UID, Value: '' },
        ]),
      // Every request naming the instance hangs in the relay until released.
      stall: (id) => {
        const instanceId = instanceIdOf(id);
        const release = relay.hold((r) => r.body.includes(instanceId));
        return Promise.resolve(() => {
          release();
          return Promise.resolve();
        });
      },
      // EC2 shows a terminating instance as shutting-down for a while; moto goes straight to
      // terminated, so the relay shows it as EC2 would (state code 32) from here on.
      startDeleteInProgress: async (id) => {
        const instanceId = instanceIdOf(id);
        await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
        relay.rewriteAnswers(
          (r) => r.action === 'DescribeInstances' && r.body.includes(instanceId),
          (body) =>
            body.replace(
              /<instanceState>\s*<code>48<\/code>\s*<name>terminated<\/name>\s*<\/instanceState>/g,
              '<instanceState><code>32</code><name>shutting-down</name></instanceState>',
            ),
        );
      },
    },
    cleanup: async () => {
      ec2.destroy();
      await provider.close();
      await relay.close();
    },
  };
});

// -- what the aws provider adds ------------------------------------------------

describe('aws provider on moto', () => {
  let moto: RunningMoto;
  let relay: Ec2Relay;
  let ec2: EC2Client;
  let imageId: string;
  let subnets: string[];
  const { logger, lines } = capturedLogger();
  const installation = `aws-test-${randomUUID().slice(0, 8)}`;
  const sentinel = `sentinel-${randomUUID()}`;

  const request = (overrides: Partial<CreateRequest> = {}): CreateRequest => {
    const uid = overrides.uid ?? randomUUID();
    return {
      name: instanceNameFromUid(uid),
      uid,
      namespace: 'aws',
      proxyName: `p-${uid.slice(0, 8)}`,
      placement: {},
      cloudInit: `#cloud-config\n# ${sentinel}\n`,
      port: 3128,
      installation,
      ...overrides,
    };
  };

  beforeAll(async () => {
    moto = await sharedMoto();
    relay = await Ec2Relay.start(moto.endpoint);
    ec2 = motoClient(moto.endpoint);
    imageId = await motoImage(ec2);
    const out = await ec2.send(new DescribeSubnetsCommand({}));
    subnets = (out.Subnets ?? [])
      .filter((s) => s.DefaultForAz)
      .sort((a, b) => (a.AvailabilityZone ?? '').localeCompare(b.AvailabilityZone ?? ''))
      .map((s) => s.SubnetId!);
    expect(subnets.length).toBeGreaterThanOrEqual(2);
  });

  afterAll(async () => {
    ec2?.destroy();
    await relay?.close();
  });

  it('launches with the marks as tags, IMDSv2 required with hop limit 1, the cloud-init as user data and a ClientToken', async () => {
    const provider = providerOn(moto.endpoint, { imageId, tags: { team: 'crawl' } }, logger);
    try {
      const req = request();
      const id = await provider.create(req, live());
      const inst = await describe1(ec2, instanceIdOf(id));
      const tags: Record<string, string | undefined> = Object.fromEntries(
        (inst.Tags ?? []).map((t) => [t.Key ?? '', t.Value]),
      );
      expect(tags).toMatchObject({
        Name: req.name,
        [MARK_MANAGED]: 'true',
        [MARK_UID]: req.uid,
        [MARK_INSTALLATION]: installation,
        [MARK_SPEC_HASH]: requestSpecHash(req),
        team: 'crawl',
      });
      expect(inst.MetadataOptions).toMatchObject({ HttpTokens: 'required', HttpPutResponseHopLimit: 1 });
      expect(inst.ClientToken).toBe(clientToken(req.uid, requestSpecHash(req), 0));
      expect(inst.ImageId).toBe(imageId);
      const attr = await ec2.send(
        new DescribeInstanceAttributeCommand({ InstanceId: inst.InstanceId!, Attribute: 'userData' }),
      );
      expect(Buffer.from(attr.UserData?.Value ?? '', 'base64').toString('utf8')).toBe(req.cloudInit);
      const got = await provider.get(id, live());
      expect(got).toMatchObject({ state: 'Running', uid: req.uid, installation, ip: inst.PublicIpAddress });
    } finally {
      await provider.close();
    }
  });

  it('a same-spec replacement after the instance was terminated is a new instance with a new ClientToken', async () => {
    const provider = providerOn(moto.endpoint, { imageId }, logger);
    try {
      const req = request();
      const first = await provider.create(req, live());
      // Terminated behind the provider's back (a user, a Spot interruption): the Proxy's workflow creates again.
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceIdOf(first)] }));
      const err = await provider.get(first, live()).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ProviderError);
      expect((err as ProviderError).errorClass).toBe('NotFound');
      const second = await provider.create(req, live());
      expect(second).not.toBe(first);
      const a = await describe1(ec2, instanceIdOf(first));
      const b = await describe1(ec2, instanceIdOf(second));
      expect(a.ClientToken).toBe(clientToken(req.uid, requestSpecHash(req), 0));
      expect(b.ClientToken).toBe(clientToken(req.uid, requestSpecHash(req), 1));
      // And a repeat now adopts the second: nothing new is launched.
      expect(await provider.create(req, live())).toBe(second);
    } finally {
      await provider.close();
    }
  });

  it('EC2 refusing the AMI or the subnet ends Permanent, naming the setting', async () => {
    const badImage = providerOn(moto.endpoint, { imageId: 'ami-0123456789abcdef0' }, logger);
    const badSubnet = providerOn(moto.endpoint, { imageId, subnetIds: ['subnet-0123456789abcdef0'] }, logger);
    try {
      const e1 = await badImage.create(request(), live()).catch((e: unknown) => e);
      expect(e1).toBeInstanceOf(ProviderError);
      expect((e1 as ProviderError).errorClass).toBe('Permanent');
      expect((e1 as ProviderError).message).toMatch(
        /InvalidAMIID\.NotFound.*check placement\.image or aws\.imageId/,
      );
      const e2 = await badSubnet.create(request(), live()).catch((e: unknown) => e);
      expect((e2 as ProviderError).errorClass).toBe('Permanent');
      expect((e2 as ProviderError).message).toMatch(/InvalidSubnetID\.NotFound.*check aws\.subnetIds/);
      for (const e of [e1, e2]) expect(JSON.stringify(e) + String(e)).not.toContain(sentinel);
    } finally {
      await badImage.close();
      await badSubnet.close();
    }
  });

  it('a capacity refusal moves on to the next subnet; a quota refusal is QuotaExceeded', async () => {
    const provider = providerOn(relay.endpoint, { imageId, subnetIds: subnets.slice(0, 2) }, logger);
    try {
      const first = subnets[0]!;
      // As EC2 writes it (500, which the SDK retries: sdkMaxAttempts 2, so twice).
      relay.failNext(
        (r) => r.action === 'RunInstances' && r.body.includes(first),
        {
          status: 500,
          code: 'InsufficientInstanceCapacity',
          message: `We currently do not have sufficient t3.micro capacity in the Availability Zone you requested (${MOTO_REGION}a).`,
        },
        2,
      );
      const id = await provider.create(request(), live());
      const inst = await describe1(ec2, instanceIdOf(id));
      expect(inst.SubnetId).toBe(subnets[1]);
      const runs = relay.seen.filter((r) => r.action === 'RunInstances');
      expect(runs.map((r) => (r.body.includes(first) ? 'first' : 'second'))).toEqual([
        'first',
        'first',
        'second',
      ]);

      relay.failNext((r) => r.action === 'RunInstances', {
        status: 400,
        code: 'VcpuLimitExceeded',
        message: 'You have requested more vCPU capacity than your current vCPU limit of 32 allows.',
      });
      const e = await provider.create(request(), live()).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(ProviderError);
      expect((e as ProviderError).errorClass).toBe('QuotaExceeded');
      expect((e as ProviderError).message).toContain('VcpuLimitExceeded');
    } finally {
      await provider.close();
    }
  });

  it("Spot: EC2's notice is the instance's end in get and listByTag, counted once; a refused notice read leaves it unknown", async () => {
    relay.emulate({ spot: true });
    let counted = 0;
    const provider = providerOn(relay.endpoint, { imageId, market: 'spot' }, logger, {
      onInterruption: () => counted++,
    });
    try {
      const id = await provider.create(request(), live());
      const instanceId = instanceIdOf(id);
      expect((await describe1(ec2, instanceId)).InstanceLifecycle).toBe('spot');
      expect((await provider.get(id, live())).expiresAt).toBeUndefined();
      expect(counted).toBe(0);

      // The notice, 30 s old when first read. EC2's end (90 s away) never comes in this test.
      const noticedAt = Date.now() - 30_000;
      void relay.interrupt(instanceId, { noticeAgoMs: 30_000, terminate: () => Promise.resolve() });
      const got = await provider.get(id, live());
      expect(got.state).toBe('Running');
      expect(Math.abs(got.expiresAt!.getTime() - (noticedAt + 120_000))).toBeLessThan(2_000);
      const listed = (await provider.listByTag(live())).find((i) => i.id === id);
      expect(listed?.expiresAt?.getTime()).toBe(got.expiresAt!.getTime());
      // The listing asked once, for the noticed requests only.
      const asked = relay.seen.filter((r) => r.action === 'DescribeSpotInstanceRequests');
      expect(asked.at(-1)?.body).toContain('Filter.1.Name=status-code');
      expect(counted).toBe(1);
      // A worker of another installation sees the notice (its listing holds every managed instance
      // of the account) but counts only its own instances' interruptions; this one's counts it.
      const counts = { other: 0, mine: 0 };
      const other = providerOn(relay.endpoint, { imageId, market: 'spot' }, logger, {
        installation: 'another-installation',
        onInterruption: () => counts.other++,
      });
      const mine = providerOn(relay.endpoint, { imageId, market: 'spot' }, logger, {
        installation,
        onInterruption: () => counts.mine++,
      });
      try {
        expect((await other.listByTag(live())).find((i) => i.id === id)?.expiresAt).toBeDefined();
        await mine.listByTag(live());
        expect(counts).toEqual({ other: 0, mine: 1 });
      } finally {
        await other.close();
        await mine.close();
      }

      // A policy without ec2:DescribeSpotInstanceRequests: the get still answers, without the end.
      relay.failNext((r) => r.action === 'DescribeSpotInstanceRequests', {
        status: 403,
        code: 'UnauthorizedOperation',
        message: 'You are not authorized to perform this operation.',
      });
      const unknown = await provider.get(id, live());
      expect(unknown.state).toBe('Running');
      expect(unknown.expiresAt).toBeUndefined();
      expect(lines.some((l) => l.includes('Spot interruption notices unknown'))).toBe(true);
      expect(counted).toBe(1);
    } finally {
      relay.emulate({});
      await provider.close();
    }
  });

  it('an SSM parameter as the image: EC2 resolves it at launch; one it cannot resolve is Permanent naming the image', async () => {
    const path = '/aws/service/debian/release/12/latest/amd64';
    relay.emulate({ ssmParameters: { [path]: imageId } });
    const provider = providerOn(relay.endpoint, { imageId: `resolve:ssm:${path}` }, logger);
    try {
      const id = await provider.create(request(), live());
      expect((await describe1(ec2, instanceIdOf(id))).ImageId).toBe(imageId);
      const sent = relay.seen.filter((r) => r.action === 'RunInstances').at(-1)!;
      expect(new URLSearchParams(sent.body).get('ImageId')).toBe(`resolve:ssm:${path}`);

      const e = await provider
        .create(request({ placement: { image: 'resolve:ssm:/aws/service/nowhere/ami-id' } }), live())
        .catch((x: unknown) => x);
      expect((e as ProviderError).errorClass).toBe('Permanent');
      expect((e as ProviderError).message).toContain('SsmInvalidParameter');
      expect((e as ProviderError).message).toContain('placement.image or aws.imageId (the SSM parameter)');
      // Neither an AMI id nor a parameter: refused before any call.
      const before = relay.seen.length;
      const bad = await provider
        .create(request({ placement: { image: 'debian-12' } }), live())
        .catch((x: unknown) => x);
      expect((bad as ProviderError).message).toContain('must be an AMI id (ami-...) or an SSM parameter');
      expect(relay.seen.length).toBe(before);
    } finally {
      relay.emulate({});
      await provider.close();
    }
  });

  it('ipv6: the network interface asks for an IPv6 address, which is the address get reports', async () => {
    relay.emulate({ ipv6Addresses: () => '2001:db8:59::10' });
    const provider = providerOn(
      relay.endpoint,
      { imageId, subnetIds: subnets.slice(0, 1), ipv6: true, internalOnly: true },
      logger,
    );
    try {
      const id = await provider.create(request(), live());
      const sent = new URLSearchParams(relay.seen.filter((r) => r.action === 'RunInstances').at(-1)!.body);
      expect(sent.get('NetworkInterface.1.Ipv6AddressCount')).toBe('1');
      expect(sent.get('NetworkInterface.1.AssociatePublicIpAddress')).toBe('false');
      const got = await provider.get(id, live());
      expect(got).toMatchObject({ state: 'Running', ip: '2001:db8:59::10' });
      expect((await provider.listByTag(live())).find((i) => i.id === id)?.ip).toBe('2001:db8:59::10');
    } finally {
      relay.emulate({});
      await provider.close();
    }
  });

  it('Spot with no capacity anywhere falls back to on-demand only when configured', async () => {
    const spotRuns = (r: { action: string; body: string }) =>
      r.action === 'RunInstances' && r.body.includes('InstanceMarketOptions.MarketType=spot');
    const noCapacity = {
      status: 500,
      code: 'InsufficientInstanceCapacity',
      message: 'There is no Spot capacity available that matches your request.',
    };
    const strict = providerOn(relay.endpoint, { imageId, market: 'spot' }, logger);
    const lenient = providerOn(
      relay.endpoint,
      { imageId, market: 'spot', spotFallbackToOnDemand: true },
      logger,
    );
    try {
      // The SDK's two attempts of the one candidate.
      relay.failNext(spotRuns, noCapacity, 2);
      const e = await strict.create(request(), live()).catch((x: unknown) => x);
      expect((e as ProviderError).errorClass).toBe('Transient');
      expect((e as ProviderError).message).toContain('t3.micro (spot)');

      relay.failNext(spotRuns, noCapacity, 2);
      const id = await lenient.create(request(), live());
      expect((await describe1(ec2, instanceIdOf(id))).InstanceLifecycle).toBeUndefined();
    } finally {
      relay.stopFailing();
      await strict.close();
      await lenient.close();
    }
  });

  it('listByTag pages through every managed instance and leaves terminated ones out', async () => {
    const provider = providerOn(relay.endpoint, { imageId }, logger, { listPageSize: 5 });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) ids.push(await provider.create(request(), live()));
      await provider.delete(ids[0]!, live());
      const before = relay.seen.length;
      const listed = (await provider.listByTag(live())).filter((i) => i.installation === installation);
      const pages = relay.seen.slice(before).filter((r) => r.action === 'DescribeInstances');
      const listedIds = listed.map((i) => i.id);
      for (const id of ids.slice(1)) expect(listedIds).toContain(id);
      expect(listedIds).not.toContain(ids[0]);
      expect(new Set(listedIds).size).toBe(listedIds.length);
      // At least 6 of ours (and the earlier tests' instances) at 5 a page: more than one page was read.
      expect(pages.length).toBeGreaterThanOrEqual(2);
      expect(pages.slice(1).every((p) => p.body.includes('NextToken='))).toBe(true);
    } finally {
      await provider.close();
    }
  });

  it('a `type: aws` entry builds from the providers config, dialling nothing', async () => {
    const cfg = parseProvidersConfig(
      `providers:\n  - name: aws-eu\n    type: aws\n    aws:\n      region: ${MOTO_REGION}\n      endpoint: ${moto.endpoint}\n      imageId: ${imageId}\n`,
      'test.yaml',
    );
    const registry = buildProviders(cfg, { logger, stateRoot: '/nonexistent' });
    try {
      const provider = registry.get('aws-eu');
      expect(provider?.type).toBe('aws');
      expect(registry.unbuilt?.('aws-eu')).toBeUndefined();
    } finally {
      await registry.close();
    }
  });

  /** The instances moto holds with this Name tag, in any state, asked of moto directly. */
  const namedInMoto = async (name: string): Promise<Ec2Instance[]> => {
    const out = await ec2.send(
      new DescribeInstancesCommand({ Filters: [{ Name: 'tag:Name', Values: [name] }] }),
    );
    return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
  };

  it('a create whose answer is lost after EC2 launched it, retried, ends with exactly one instance (ClientToken)', async () => {
    const emulating = (await Ec2Relay.start(moto.endpoint)).emulate({
      clientToken: true,
      invisibleMs: 5_000,
    });
    // No SDK retry: the provider's caller (Temporal) retries the create.
    const provider = providerOn(emulating.endpoint, { imageId, sdkMaxAttempts: 1 }, logger);
    try {
      const req = request();
      emulating.dropAnswers((r) => r.action === 'RunInstances');
      const lost = await provider.create(req, live()).catch((e: unknown) => e);
      expect(lost).toBeInstanceOf(ProviderError);
      expect((lost as ProviderError).errorClass).toBe('Transient');
      expect(await namedInMoto(req.name)).toHaveLength(1); // EC2 did launch it
      // The retry cannot see it yet (eventual consistency): only the token keeps it from launching another.
      const id = await provider.create(req, live());
      const all = await namedInMoto(req.name);
      expect(all).toHaveLength(1);
      expect(id).toBe(`${MOTO_REGION}/${all[0]!.InstanceId}`);
      const runs = emulating.seen.filter((r) => r.action === 'RunInstances');
      expect(runs).toHaveLength(2);
      expect(new Set(runs.map((r) => new URLSearchParams(r.body).get('ClientToken'))).size).toBe(1);
    } finally {
      await provider.close();
      await emulating.close();
    }
  });

  it('an instance invisible for a while after its launch is "not visible yet" (never gone), then pending, then Running', async () => {
    // (The 10 s is the end-to-end test's, below.)
    const emulating = (await Ec2Relay.start(moto.endpoint)).emulate({
      clientToken: true,
      invisibleMs: 3_000,
      pendingMs: 4_500,
    });
    const provider = providerOn(emulating.endpoint, { imageId }, logger);
    try {
      const req = request();
      const id = await provider.create(req, live());
      const early = await provider.get(id, live()).catch((e: unknown) => e);
      expect(early).toBeInstanceOf(ProviderError);
      expect((early as ProviderError).errorClass).toBe('Transient');
      expect((early as ProviderError).message).toMatch(/not visible yet/);
      // A repeat create in the window (the workflow retrying) launches nothing.
      expect(await provider.create(req, live())).toBe(id);
      const seen: string[] = [];
      const running = await eventually(
        `${id} Running`,
        async () => {
          try {
            const got = await provider.get(id, live());
            seen.push(got.state);
            return got.state === 'Running' ? got : undefined;
          } catch (err) {
            expect((err as ProviderError).errorClass).toBe('Transient');
            seen.push('not visible');
            return undefined;
          }
        },
        { timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(running.ip).toBeTruthy();
      expect(seen).toContain('not visible');
      expect(seen).toContain('Provisioning');
      expect(seen.indexOf('Provisioning')).toBeGreaterThan(seen.lastIndexOf('not visible'));
      expect(await namedInMoto(req.name)).toHaveLength(1);
    } finally {
      await provider.close();
      await emulating.close();
    }
  });

  it('a retried create whose user data changed (a new htpasswd salt) adopts the first instance through IdempotentParameterMismatch', async () => {
    const emulating = (await Ec2Relay.start(moto.endpoint)).emulate({
      clientToken: true,
      invisibleMs: 3_000,
    });
    const provider = providerOn(emulating.endpoint, { imageId, sdkMaxAttempts: 1 }, logger);
    try {
      const req = request({ credentials: { username: 'crawler', password: `pw-${sentinel}` } });
      emulating.dropAnswers((r) => r.action === 'RunInstances');
      await expect(provider.create(req, live())).rejects.toBeInstanceOf(ProviderError);
      const again = await provider.create(req, live()).catch((e: unknown) => e);
      expect((again as ProviderError).errorClass).toBe('Transient');
      expect((again as ProviderError).message).toMatch(/IdempotentParameterMismatch.*not visible yet/);
      expect(emulating.seen.filter((r) => r.action === 'RunInstances')).toHaveLength(2);
      const id = await eventually('the first instance adopted', () => provider.create(req, live()), {
        timeoutMs: 20_000,
        intervalMs: 500,
      });
      const all = await namedInMoto(req.name);
      expect(all).toHaveLength(1);
      expect(id).toBe(`${MOTO_REGION}/${all[0]!.InstanceId}`);
      for (const e of [again]) expect(JSON.stringify(e) + String(e)).not.toContain(sentinel);
    } finally {
      await provider.close();
      await emulating.close();
    }
  });

  it('a token whose instance was terminated and aged out of listings moves to the next generation (IdempotentInstanceTerminated)', async () => {
    const emulating = (await Ec2Relay.start(moto.endpoint)).emulate({ clientToken: true });
    const provider = providerOn(emulating.endpoint, { imageId }, logger);
    try {
      const req = request();
      const first = await provider.create(req, live());
      await provider.delete(first, live());
      // EC2 lists a terminated instance for about an hour; after that only the token remembers it.
      emulating.rewriteAnswers(
        (r) => r.action === 'DescribeInstances',
        (xml) => withoutInstances(xml, [instanceIdOf(first)]),
      );
      const second = await provider.create(req, live());
      expect(second).not.toBe(first);
      expect((await describe1(ec2, instanceIdOf(second))).ClientToken).toBe(
        clientToken(req.uid, requestSpecHash(req), 1),
      );
      const runs = emulating.seen.filter((r) => r.action === 'RunInstances');
      expect(runs.map((r) => new URLSearchParams(r.body).get('ClientToken'))).toEqual([
        clientToken(req.uid, requestSpecHash(req), 0),
        clientToken(req.uid, requestSpecHash(req), 0),
        clientToken(req.uid, requestSpecHash(req), 1),
      ]);
    } finally {
      await provider.close();
      await emulating.close();
    }
  });

  it('after aws.region changes, an instance in the old region is listed again once a get has found it', async () => {
    const before = providerOn(moto.endpoint, { imageId }, logger);
    const moved = providerOn(moto.endpoint, { region: 'us-west-2' }, logger);
    try {
      const id = await before.create(request(), live());
      expect(id.startsWith(`${MOTO_REGION}/`)).toBe(true);
      expect((await moved.listByTag(live())).map((i) => i.id)).not.toContain(id);
      expect((await moved.get(id, live())).state).toBe('Running');
      const listed = await moved.listByTag(live());
      expect(listed.map((i) => i.id)).toContain(id);
      expect(listed.unlisted ?? []).toEqual([]);
    } finally {
      await before.close();
      await moved.close();
    }
  });

  it('with no credentials anywhere, each call fails Transient saying so and check says Unauthorized', async () => {
    // The SDK's default chain with nothing to find: no keys, no profile files, no web identity,
    // no container endpoint, no instance metadata (AWS_EC2_METADATA_DISABLED).
    for (const name of [
      'AWS_ACCESS_KEY_ID',
      'AWS_SECRET_ACCESS_KEY',
      'AWS_SESSION_TOKEN',
      'AWS_PROFILE',
      'AWS_WEB_IDENTITY_TOKEN_FILE',
      'AWS_ROLE_ARN',
      'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI',
      'AWS_CONTAINER_CREDENTIALS_FULL_URI',
    ])
      vi.stubEnv(name, undefined);
    vi.stubEnv('AWS_SHARED_CREDENTIALS_FILE', '/nonexistent/egress-proxies/credentials');
    vi.stubEnv('AWS_CONFIG_FILE', '/nonexistent/egress-proxies/config');
    vi.stubEnv('AWS_EC2_METADATA_DISABLED', 'true');
    const provider = createAwsProvider({
      name: 'aws-nocreds',
      // Through the relay: it counts what reaches "EC2" (nothing may, unsigned).
      config: awsConfigSchema.parse({ region: MOTO_REGION, endpoint: relay.endpoint, imageId }),
      logger,
      callTimeoutMs: 10_000,
    });
    const before = relay.seen.length;
    try {
      const started = Date.now();
      const err = await provider.create(request(), live()).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ProviderError);
      expect((err as ProviderError).errorClass).toBe('Transient');
      expect((err as ProviderError).message).toMatch(/no AWS credentials/);
      const listErr = await provider.listByTag(live()).catch((e: unknown) => e);
      expect((listErr as ProviderError).errorClass).toBe('Transient');
      const [target] = await provider.check(live());
      expect(target).toMatchObject({ name: MOTO_REGION, ready: false, reason: 'Unauthorized' });
      expect(target!.message).toMatch(/no AWS credentials/);
      // Found out at once, without waiting on anything (no metadata service was asked).
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(relay.seen.length).toBe(before);
    } finally {
      vi.unstubAllEnvs();
      await provider.close();
    }
  });

  it('no cloud-init text in any log line', () => {
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(line).not.toContain(sentinel);
  });
});

// The file's moto, and the conformance relay should its factory have failed half way.
afterAll(async () => {
  await conformanceRelay?.close().catch(() => undefined);
  if (motoStarted) await (await motoStarted).stop();
});
