import type { Instance as Ec2Instance } from '@aws-sdk/client-ec2';
import { describe, expect, it } from 'vitest';
import { awsConfigSchema } from '../../providers/aws/config.js';
import {
  candidates,
  instanceAddress,
  interruptionEndsAt,
  runInstancesInput,
  toInstance,
  wasInterrupted,
} from '../../providers/aws/instance.js';
import type { CreateRequest } from '../../providers/types.js';

const request = (over: Partial<CreateRequest> = {}): CreateRequest => ({
  name: 'proxy-abc',
  uid: 'uid-1',
  namespace: 'ns',
  proxyName: 'px',
  installation: 'inst',
  port: 3128,
  placement: {},
  ...over,
});
const config = (over: Record<string, unknown> = {}) =>
  awsConfigSchema.parse({
    region: 'eu-west-1',
    imageId: 'ami-0123456789abcdef0',
    instanceTypes: ['t3.micro', 't3a.micro'],
    subnetIds: ['subnet-0a1b2c3d4e5f60718', 'subnet-0f1e2d3c4b5a69788'],
    ...over,
  });

describe('aws: the market of each candidate', () => {
  it('on-demand by default: each subnet for the first type, then the next type', () => {
    expect(candidates(request(), config())).toEqual([
      { instanceType: 't3.micro', market: 'on-demand', subnetId: 'subnet-0a1b2c3d4e5f60718' },
      { instanceType: 't3.micro', market: 'on-demand', subnetId: 'subnet-0f1e2d3c4b5a69788' },
      { instanceType: 't3a.micro', market: 'on-demand', subnetId: 'subnet-0a1b2c3d4e5f60718' },
      { instanceType: 't3a.micro', market: 'on-demand', subnetId: 'subnet-0f1e2d3c4b5a69788' },
    ]);
  });

  it('spot: every candidate on Spot; with the fallback, then every candidate on-demand', () => {
    const spot = candidates(request({ placement: { machineType: 'm7i.large' } }), config({ market: 'spot' }));
    expect(spot.map((c) => c.market)).toEqual(['spot', 'spot']);
    const fallback = candidates(request(), config({ market: 'spot', spotFallbackToOnDemand: true }));
    expect(fallback.map((c) => `${c.market} ${c.instanceType}`)).toEqual([
      'spot t3.micro',
      'spot t3.micro',
      'spot t3a.micro',
      'spot t3a.micro',
      'on-demand t3.micro',
      'on-demand t3.micro',
      'on-demand t3a.micro',
      'on-demand t3a.micro',
    ]);
    // The fallback means nothing on an on-demand entry: refused rather than ignored.
    expect(() => config({ spotFallbackToOnDemand: true })).toThrow(/is only valid with market: spot/);
  });

  it('a Spot candidate asks for a one-time instance terminated on interruption; on-demand asks for no market', () => {
    const [spot] = candidates(request(), config({ market: 'spot' }));
    const input = runInstancesInput(
      request(),
      config(),
      spot!,
      'ami-0123456789abcdef0',
      'h',
      'ep-t',
      undefined,
    );
    expect(input.InstanceMarketOptions).toEqual({
      MarketType: 'spot',
      SpotOptions: { SpotInstanceType: 'one-time', InstanceInterruptionBehavior: 'terminate' },
    });
    const [onDemand] = candidates(request(), config());
    expect(
      runInstancesInput(request(), config(), onDemand!, 'ami-0123456789abcdef0', 'h', 'ep-t', undefined)
        .InstanceMarketOptions,
    ).toBeUndefined();
  });

  it('market is on-demand or spot, named when wrong', () => {
    expect(() => config({ market: 'reserved' })).toThrow(/must be on-demand or spot/);
  });
});

const PUBLIC = { internalOnly: false, ipv6: false };

describe('aws: Spot interruptions', () => {
  const running: Ec2Instance = {
    InstanceId: 'i-0123456789abcdef0',
    State: { Name: 'running', Code: 16 },
    PublicIpAddress: '203.0.113.9',
    SpotInstanceRequestId: 'sir-abcd1234',
  };

  it('the end is two minutes after the notice; a notice without a time counts from now', () => {
    expect(interruptionEndsAt(new Date('2026-12-06T15:00:00Z'), 0).toISOString()).toBe(
      '2026-12-06T15:02:00.000Z',
    );
    expect(interruptionEndsAt(undefined, Date.parse('2026-12-06T16:00:00Z')).toISOString()).toBe(
      '2026-12-06T16:02:00.000Z',
    );
    expect(interruptionEndsAt(new Date('not a date'), Date.parse('2026-12-06T16:00:00Z')).toISOString()).toBe(
      '2026-12-06T16:02:00.000Z',
    );
  });

  it('a Running instance carries the announced end; an ended one does not', () => {
    const end = new Date('2026-12-06T15:02:00Z');
    expect(toInstance(running, 'eu-west-1', PUBLIC, end)).toMatchObject({ state: 'Running', expiresAt: end });
    expect(toInstance(running, 'eu-west-1', PUBLIC).expiresAt).toBeUndefined();
    const ending = { ...running, State: { Name: 'shutting-down' as const, Code: 32 } };
    expect(toInstance(ending, 'eu-west-1', PUBLIC, end).expiresAt).toBeUndefined();
  });

  it("EC2's StateReason says whether the instance was interrupted", () => {
    const ended = (code: string): Ec2Instance => ({
      ...running,
      State: { Name: 'terminated', Code: 48 },
      StateReason: { Code: code, Message: code },
    });
    expect(wasInterrupted(ended('Server.SpotInstanceTermination'))).toBe(true);
    expect(wasInterrupted({ ...ended('Server.SpotInstanceShutdown'), State: { Name: 'stopped' } })).toBe(
      true,
    );
    expect(wasInterrupted(ended('Client.UserInitiatedShutdown'))).toBe(false);
    expect(wasInterrupted(running)).toBe(false);
  });
});

describe('aws: the address a Proxy uses', () => {
  const inst: Ec2Instance = {
    InstanceId: 'i-0123456789abcdef0',
    State: { Name: 'running', Code: 16 },
    PublicIpAddress: '203.0.113.9',
    PrivateIpAddress: '10.0.0.9',
  };

  it('public IPv4 by default, the private one with internalOnly, the IPv6 one with ipv6', () => {
    expect(instanceAddress(inst, { internalOnly: false, ipv6: false })).toBe('203.0.113.9');
    expect(instanceAddress(inst, { internalOnly: true, ipv6: false })).toBe('10.0.0.9');
    expect(instanceAddress({ ...inst, Ipv6Address: '2001:db8::9' }, { internalOnly: true, ipv6: true })).toBe(
      '2001:db8::9',
    );
    // An older answer carries it on the network interface only.
    expect(
      instanceAddress(
        { ...inst, NetworkInterfaces: [{ Ipv6Addresses: [{ Ipv6Address: '2001:db8::a' }] }] },
        { internalOnly: false, ipv6: true },
      ),
    ).toBe('2001:db8::a');
    // Not there yet: no address, so not Running.
    expect(instanceAddress(inst, { internalOnly: false, ipv6: true })).toBe('');
    expect(toInstance(inst, 'eu-west-1', { internalOnly: false, ipv6: true }).state).toBe('Provisioning');
  });

  it('ipv6 asks the network interface for one address, and needs subnets', () => {
    const cfg = config({ ipv6: true, internalOnly: true });
    const [candidate] = candidates(request(), cfg);
    const input = runInstancesInput(
      request(),
      cfg,
      candidate!,
      'ami-0123456789abcdef0',
      'h',
      'ep-t',
      undefined,
    );
    expect(input.NetworkInterfaces?.[0]).toMatchObject({
      Ipv6AddressCount: 1,
      AssociatePublicIpAddress: false,
    });
    expect(() => config({ ipv6: true, subnetIds: undefined })).toThrow(/needs subnetIds/);
  });
});
