/**
 * The `aws` provider end to end (issue 59): a real worker and bridge (this
 * file's control plane, the drift sweep on a 1 s Schedule), a real `api`
 * process (its prober sends real traffic through each Proxy; leases), and
 * the provider driving `@aws-sdk/client-ec2` against moto behind the relay
 * that behaves as EC2 where moto does not (tests/helpers/ec2-relay.ts):
 * ClientToken, eventual consistency, a pending phase, Spot requests and
 * their interruptions. moto's addresses are invented, so the relay shows
 * each launched instance at a loopback address where a real forward proxy
 * listens on the Proxy's port: "Ready" below is the prober's verdict
 * through that proxy, as for a Squid on a real instance. (Those proxies ask
 * for no credentials: what the user data carries is checked in
 * aws-provider.test.ts; the prober's credentials in proxy-credentials.test.ts.)
 *
 * - The sample Proxy: invisible for 10 s after RunInstances (EC2's
 *   InvalidInstanceID.NotFound), then pending: exactly one instance, Ready;
 *   deleting the Proxy terminates it.
 * - One Proxy per error class: VcpuLimitExceeded is QuotaExceeded and then
 *   Ready; an unknown AMI is Permanent naming the field; RequestLimitExceeded
 *   is Transient and then Ready.
 * - An instance terminated behind the provider's back (its Proxy's own
 *   looks an hour away) is noticed by the drift sweep; the Proxy is Ready
 *   again on a new instance.
 * - Spot: an interrupted instance (EC2's notice, then terminated with
 *   Server.SpotInstanceTermination) is replaced and its Proxy is Ready again
 *   on a new instance, counted in egress_provider_interruptions_total; a pool
 *   member given the notice is replaced drained first: the successor is
 *   Ready, the held lease keeps working through the drain and is released
 *   before EC2 would end the instance, which the pool deleted first.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EC2Client } from '@aws-sdk/client-ec2';
import {
  DescribeInstancesCommand,
  DescribeSubnetsCommand,
  TerminateInstancesCommand,
  type Instance as Ec2Instance,
} from '@aws-sdk/client-ec2';
import { Registry } from 'prom-client';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds } from '../../cli/schedules.js';
import { fromProxyUrl } from '../../cli/egress-ip.js';
import { createProxyPoolClient, poolSelector } from '../../kube/proxy-pools.js';
import { awsConfigSchema } from '../../providers/aws/config.js';
import { parseProviderId } from '../../providers/aws/instance.js';
import { createAwsProvider } from '../../providers/aws/provider.js';
import { PROVIDER_INTERRUPTIONS_TOTAL, registerProviderRequestMetrics } from '../../providers/metrics.js';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { stateQuery } from '../../workflows/proxy/messages.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { Ec2Relay } from '../helpers/ec2-relay.js';
import { createProxy, deleteProxy, getProxy, proxyCondition, waitForProxy } from '../helpers/kube.js';
import {
  MOTO_CREDENTIALS,
  MOTO_REGION,
  motoClient,
  motoImage,
  startMoto,
  type RunningMoto,
} from '../helpers/moto.js';
import { getThroughConnect, startTarget } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';

// The SDK must never look for an instance role on 169.254.169.254.
process.env.AWS_EC2_METADATA_DISABLED = 'true';

const HOUR = 3_600_000;
const ROOT = join(import.meta.dirname, '..', '..');
const TOKEN = `aws-e2e-${randomBytes(12).toString('hex')}`;
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
/** Where the relay shows the instances: one real forward proxy per address, on the Proxies' port. */
const ADDRESSES = Array.from({ length: 12 }, (_, i) => `127.59.0.${i + 1}`);
const PORT = 3128;

const isReady = (p: Proxy) => proxyCondition(p, 'Ready')?.status === 'True';

describe('aws end to end (worker, bridge, api, moto behind the emulating relay)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-aws-e2e-'));
  let moto: RunningMoto;
  let relay: Ec2Relay;
  let ec2: EC2Client;
  let cp: ControlPlane;
  let api: CliProcess;
  let apiUrl = '';
  let target: Awaited<ReturnType<typeof startTarget>>;
  const proxies: ForwardProxy[] = [];
  const metrics = new Registry();
  let nextAddress = 0;
  let prefix = '';

  const sample = () =>
    parseYaml(readFileSync(join(ROOT, 'infra/samples/proxy-aws.yaml'), 'utf8')) as {
      metadata: { name: string };
      spec: Record<string, unknown> & { provider: string };
    };
  const healthCheck = () => ({
    probeURL: `http://127.0.0.1:${target.port}/`,
    intervalSeconds: 1,
    timeoutSeconds: 2,
    expectedStatusCodes: [200],
  });
  /** The sample's spec, probed through its proxy. */
  const probed = (over: Record<string, unknown> = {}) => ({
    ...sample().spec,
    healthCheck: healthCheck(),
    ...over,
  });
  const named = async (name: string): Promise<Ec2Instance[]> => {
    const out = await ec2.send(
      new DescribeInstancesCommand({ Filters: [{ Name: 'tag:Name', Values: [name] }] }),
    );
    return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
  };
  const waitReady = (name: string, what: string, test: (p: Proxy) => boolean = () => true) =>
    waitForProxy(cp.api, cp.namespace, name, what, (p) => isReady(p) && test(p), { timeoutMs: 90_000 });
  const interruptions = async (): Promise<number> => {
    const metric = await metrics.getSingleMetric(PROVIDER_INTERRUPTIONS_TOTAL)?.get();
    return metric?.values.find((v) => v.labels.provider === 'aws-spot')?.value ?? 0;
  };
  const terminate = async (instanceId: string) => {
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
  };
  const lease = (body: Record<string, unknown>) =>
    eventually(
      `a lease of ${JSON.stringify(body)}`,
      async () => {
        const res = await fetch(`${apiUrl}/v1/leases`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ ttlSeconds: 300, ...body }),
        });
        if (res.status === 409 || res.status === 503) return undefined;
        const answer = (await res.json()) as {
          leaseID: string;
          proxy: { id: string; ip: string; port: number };
          proxyURL?: string;
        };
        expect(res.status, JSON.stringify(answer)).toBe(201);
        return answer;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  const throughLease = (l: { proxyURL?: string; proxy: { ip: string; port: number } }) => {
    const via = l.proxyURL ? fromProxyUrl(l.proxyURL) : { host: l.proxy.ip, port: l.proxy.port };
    return getThroughConnect(
      via.host,
      via.port,
      target.port,
      5_000,
      '127.0.0.1',
      'proxyAuthorization' in via ? via.proxyAuthorization : undefined,
    );
  };

  beforeAll(async () => {
    target = await startTarget('reached through the aws proxy');
    for (const host of [...ADDRESSES, '::1']) proxies.push(await startForwardProxy({ host, port: PORT }));
    moto = await startMoto();
    relay = (await Ec2Relay.start(moto.endpoint)).emulate({ clientToken: true });
    ec2 = motoClient(moto.endpoint);
    const imageId = await motoImage(ec2);
    // Per-proxy polls an hour away: what notices a change behind the provider's back is the sweep.
    cp = await startControlPlane({
      prefix: 'aws-e2e',
      driftSweepOn: true,
      timing: { driftPollMs: HOUR, safetyPollMs: HOUR },
    });
    const requestMetrics = registerProviderRequestMetrics(metrics);
    const subnets = await ec2.send(new DescribeSubnetsCommand({}));
    const subnetId = subnets.Subnets!.find((s) => s.DefaultForAz)!.SubnetId!;
    for (const [name, extra] of [
      ['aws-eu', {}],
      ['aws-spot', { market: 'spot' }],
      // IPv6 only: no public IPv4, the Proxy's address is its IPv6 one.
      ['aws-v6', { ipv6: true, internalOnly: true, subnetIds: [subnetId] }],
    ] as const)
      cp.registry.add(
        createAwsProvider({
          name,
          config: awsConfigSchema.parse({ region: MOTO_REGION, endpoint: relay.endpoint, imageId, ...extra }),
          logger: cp.logger,
          credentials: MOTO_CREDENTIALS,
          callTimeoutMs: 10_000,
          onInterruption: () => requestMetrics.interrupted(name),
        }),
      );
    prefix = `aws-e2e-${cp.taskQueue}`;
    const outcome = await ensureSchedules(cp.client, {
      taskQueue: cp.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs: 0 },
      providerChecks: { intervalMs: 0 },
      driftSweep: { intervalMs: 1_000, listTimeoutMs: 5_000 },
    });
    expect(outcome.driftSweep).toBe('created');
    writeFileSync(
      join(dir, 'tenants.yaml'),
      ['tenants:', '  - name: crawler', `    tokenSha256: ${sha256(TOKEN)}`, ''].join('\n'),
    );
    api = startCli([
      'api',
      '--discovery-addr',
      '127.0.0.1:0',
      ...testServerArgs(),
      '--watch-namespaces',
      cp.namespace,
      '--tenants-file',
      join(dir, 'tenants.yaml'),
    ]);
    apiUrl = await leaseApiUrl(api, 150_000);
  }, 240_000);

  afterAll(async () => {
    await cp?.client.schedule
      .getHandle(scheduleIds(prefix).driftSweep)
      .delete()
      .catch(() => undefined);
    await api?.stop();
    await cp?.close();
    ec2?.destroy();
    await relay?.close();
    await moto?.stop();
    for (const p of proxies) await p.close();
    await target?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The relay's emulation for one test; every launch gets the next loopback address. */
  const emulate = (extra: { invisibleMs?: number; pendingMs?: number } = {}) =>
    relay.emulate({
      clientToken: true,
      spot: true,
      addresses: () => ADDRESSES[nextAddress++ % ADDRESSES.length],
      ipv6Addresses: () => '::1',
      ...extra,
    });

  it('the sample Proxy: invisible for 10 s, then pending, it gets exactly one instance and is Ready; deleting it terminates it', async () => {
    emulate({ invisibleMs: 10_000, pendingMs: 11_500 });
    const px = sample();
    expect(px.spec.provider).toBe('aws-eu');
    const created = await createProxy(cp.api, cp.namespace, px.metadata.name, probed() as never);
    const name = instanceNameFromUid(created.metadata.uid!);
    const ready = await waitReady(px.metadata.name, 'Ready');
    const all = await named(name);
    expect(all).toHaveLength(1);
    expect(ready.status?.providerID).toBe(`${MOTO_REGION}/${all[0]!.InstanceId}`);
    expect(ADDRESSES).toContain(ready.status?.ip);
    // The address the provider reported carries traffic.
    expect(await getThroughConnect(ready.status!.ip!, PORT, target.port)).toBe(
      'reached through the aws proxy',
    );
    // It was looked at while EC2 did not show it yet, and while it was pending.
    const looks = relay.seen.filter(
      (r) => r.action === 'DescribeInstances' && r.body.includes(all[0]!.InstanceId!),
    );
    expect(looks.length).toBeGreaterThan(1);

    await deleteProxy(cp.api, cp.namespace, px.metadata.name);
    await eventually(
      'the Proxy is gone',
      async () => {
        await expect(getProxy(cp.api, cp.namespace, px.metadata.name)).rejects.toThrow();
        return true;
      },
      { timeoutMs: 30_000 },
    );
    const [after] = await named(name);
    expect(after?.State?.Name).toBe('terminated');
  });

  it('ipv6: a Proxy on an IPv6-only entry is Ready at its IPv6 address', async () => {
    emulate();
    await createProxy(
      cp.api,
      cp.namespace,
      'aws-v6',
      probed({ provider: 'aws-v6', attributes: { family: 'v6' } }) as never,
    );
    const ready = await waitReady('aws-v6', 'Ready over IPv6');
    expect(ready.status?.ip).toBe('::1');
    expect(await getThroughConnect('::1', PORT, target.port)).toBe('reached through the aws proxy');
    const held = await lease({ selector: { family: 'v6' } });
    expect(held.proxy.ip).toBe('::1');
    await fetch(`${apiUrl}/v1/leases/${held.leaseID}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    await deleteProxy(cp.api, cp.namespace, 'aws-v6');
  });

  it('VcpuLimitExceeded shows as QuotaExceeded naming the code, then the Proxy is Ready', async () => {
    emulate();
    relay.failNext(
      (r) => r.action === 'RunInstances',
      {
        status: 400,
        code: 'VcpuLimitExceeded',
        message: 'You have requested more vCPU capacity than your current vCPU limit of 32 allows.',
      },
      1_000,
    );
    try {
      await createProxy(cp.api, cp.namespace, 'aws-quota', probed() as never);
      const quota = await waitForProxy(
        cp.api,
        cp.namespace,
        'aws-quota',
        'QuotaExceeded',
        (p) => proxyCondition(p, 'QuotaExceeded')?.status === 'True',
      );
      expect(proxyCondition(quota, 'QuotaExceeded')?.message).toContain('VcpuLimitExceeded');
      expect(quota.status?.phase).not.toBe('Failed');
    } finally {
      relay.stopFailing();
    }
    const recovered = await waitReady('aws-quota', 'Ready after the limit is raised');
    expect(proxyCondition(recovered, 'QuotaExceeded')?.status).toBe('False');
  });

  it('an AMI EC2 does not know fails the Proxy, naming the field', async () => {
    emulate();
    await createProxy(
      cp.api,
      cp.namespace,
      'aws-bad-ami',
      probed({ placement: { image: 'ami-0123456789abcdef0' } }) as never,
    );
    const failed = await waitForProxy(
      cp.api,
      cp.namespace,
      'aws-bad-ami',
      'Failed',
      (p) => p.status?.phase === 'Failed',
    );
    expect(proxyCondition(failed, 'Provisioned')).toMatchObject({
      status: 'False',
      reason: 'PermanentError',
    });
    expect(proxyCondition(failed, 'Provisioned')?.message).toContain(
      'RunInstances: EC2 answered 400 InvalidAMIID.NotFound; check placement.image or aws.imageId',
    );
  });

  it('throttled RunInstances (RequestLimitExceeded) is Transient: the Proxy is Ready on one instance', async () => {
    emulate();
    const runsBefore = relay.seen.filter((r) => r.action === 'RunInstances').length;
    // Two creates' worth at sdkMaxAttempts 2 and more: each retried by Temporal with backoff.
    relay.failNext(
      (r) => r.action === 'RunInstances',
      { status: 503, code: 'RequestLimitExceeded', message: 'Request limit exceeded.' },
      6,
    );
    const created = await createProxy(cp.api, cp.namespace, 'aws-throttled', probed() as never);
    const ready = await waitReady('aws-throttled', 'Ready after throttling');
    expect(ready.status?.phase).toBe('Ready');
    expect(await named(instanceNameFromUid(created.metadata.uid!))).toHaveLength(1);
    // The six refused (the SDK's retries among them) and the one that launched it.
    const runs = relay.seen.filter((r) => r.action === 'RunInstances').length - runsBefore;
    expect(runs).toBeGreaterThanOrEqual(7);
  });

  it("an instance terminated behind the provider's back is replaced through the drift sweep: the Proxy is Ready again", async () => {
    emulate();
    const created = await createProxy(cp.api, cp.namespace, 'aws-drift', probed() as never);
    const first = await waitReady('aws-drift', 'Ready');
    const handle = cp.client.workflow.getHandle(
      proxyWorkflowId({ namespace: cp.namespace, name: 'aws-drift', uid: created.metadata.uid! }),
    );
    // Idle in its steady wait (its own next look an hour away).
    await eventually('the workflow settled', async () => {
      const v = await handle.query(stateQuery);
      return v.instanceState === 'Running' && v.nextPollAt ? v : undefined;
    });
    const settledAt = ((await handle.fetchHistory()).events ?? []).length;
    await terminate(parseProviderId(first.status!.providerID!)!.instanceId);
    const again = await waitReady(
      'aws-drift',
      'Ready again on a new instance',
      (p) => p.status?.providerID !== first.status?.providerID,
    );
    expect(again.status?.ip).not.toBe(first.status?.ip);
    // What woke it was the sweep's signal, before any timer of its own fired.
    const after = ((await handle.fetchHistory()).events ?? []).slice(settledAt);
    const drift = after.findIndex(
      (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'driftDetected',
    );
    expect(drift).toBeGreaterThanOrEqual(0);
    expect(after.slice(0, drift).filter((e) => e.timerFiredEventAttributes)).toEqual([]);
    await deleteProxy(cp.api, cp.namespace, 'aws-drift');
  });

  it('a Spot instance EC2 interrupts is replaced: its Proxy is Ready again on a new instance, and the interruption is counted', async () => {
    emulate();
    const created = await createProxy(
      cp.api,
      cp.namespace,
      'aws-spot-1',
      probed({ provider: 'aws-spot' }) as never,
    );
    const name = instanceNameFromUid(created.metadata.uid!);
    const first = await waitReady('aws-spot-1', 'Ready on a Spot instance');
    const [instance] = await named(name);
    expect(instance?.InstanceLifecycle).toBe('spot');
    const countedBefore = await interruptions();

    // The notice arrives late (115 s old): the instance ends 5 s from now.
    const ended = relay.interrupt(instance!.InstanceId!, { noticeAgoMs: 115_000, terminate });
    await ended;
    const again = await waitReady(
      'aws-spot-1',
      'Ready again on a new instance',
      (p) => p.status?.providerID !== first.status?.providerID,
    );
    expect(again.status?.ip).not.toBe(first.status?.ip);
    expect(await getThroughConnect(again.status!.ip!, PORT, target.port)).toBe(
      'reached through the aws proxy',
    );
    const all = await named(name);
    expect(all.map((i) => i.State?.Name).sort()).toEqual(['running', 'terminated']);
    // Its replacement is Spot too; the old one shows why it ended.
    expect(all.find((i) => i.State?.Name === 'running')?.InstanceLifecycle).toBe('spot');
    expect(await interruptions()).toBe(countedBefore + 1);
    await deleteProxy(cp.api, cp.namespace, 'aws-spot-1');
  });

  it('a pool member given the Spot notice is replaced drained first: the held lease works through the drain and is released before the end', async () => {
    emulate();
    const pools = createProxyPoolClient(cp.kc);
    await pools.create(cp.namespace, 'spot', {
      replicas: 1,
      template: { spec: probed({ provider: 'aws-spot' }) },
      strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 },
    } as never);
    const members = () =>
      cp.api.list(cp.namespace, { labelSelector: poolSelector('spot') }).then((l) => l.items);
    const first = await eventually(
      'pool spot: its member Ready',
      async () => (await members()).find(isReady),
      {
        timeoutMs: 90_000,
      },
    );
    const [instance] = await named(instanceNameFromUid(first.metadata.uid!));
    const held = await lease({ pool: 'spot' });
    expect(held.proxy.id).toBe(`${cp.namespace}/${first.metadata.name}`);
    expect(await throughLease(held)).toBe('reached through the aws proxy');
    const countedBefore = await interruptions();

    // A notice 60 s old: 60 s left, as the drift sweep first sees it.
    let interrupted = false;
    const ended = relay
      .interrupt(instance!.InstanceId!, { noticeAgoMs: 60_000, terminate })
      .then(() => (interrupted = true));
    const noticed = await waitForProxy(
      cp.api,
      cp.namespace,
      first.metadata.name,
      'the notice recorded as the end of its instance',
      (p) => Boolean(p.status?.expiresAt),
      { timeoutMs: 30_000 },
    );
    expect(Date.parse(noticed.status!.expiresAt!)).toBeGreaterThan(Date.now());
    // Successor first, then the held member drains.
    const successor = await eventually(
      'a new member Ready',
      async () => (await members()).find((m) => m.metadata.name !== first.metadata.name && isReady(m)),
      { timeoutMs: 90_000 },
    );
    await waitForProxy(
      cp.api,
      cp.namespace,
      first.metadata.name,
      'Draining',
      (p) => proxyCondition(p, 'Draining')?.status === 'True',
      { timeoutMs: 60_000 },
    );
    // The held lease still works while its proxy drains, and is released before EC2 ends the instance.
    expect(await throughLease(held)).toBe('reached through the aws proxy');
    expect(interrupted).toBe(false);
    const released = await fetch(`${apiUrl}/v1/leases/${held.leaseID}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(released.status).toBe(204);
    await eventually(
      'the drained member gone',
      async () => ((await members()).some((m) => m.metadata.name === first.metadata.name) ? undefined : true),
      { timeoutMs: 30_000 },
    );
    // The pool ended the instance, before EC2 would have.
    expect(interrupted).toBe(false);
    const [old] = await named(instanceNameFromUid(first.metadata.uid!));
    expect(old?.State?.Name).toBe('terminated');
    expect(await interruptions()).toBe(countedBefore + 1);
    const next = await lease({ pool: 'spot' });
    expect(next.proxy.id).toBe(`${cp.namespace}/${successor.metadata.name}`);
    // The pool writes its status at its next look after the removal.
    await eventually(
      'the pool says it rotated the member as Expiring',
      async () => {
        const rotation = (await pools.get(cp.namespace, 'spot'))?.status?.rotation;
        return rotation?.lastRotated === first.metadata.name ? rotation : undefined;
      },
      { timeoutMs: 30_000 },
    ).then((rotation) => expect(rotation.lastRotationReason).toBe('Expiring'));
    await pools.delete(cp.namespace, 'spot');
    // EC2's end, still due: the relay's close drops it.
    void ended.catch(() => undefined);
  });
});
