import type { Instance as Ec2Instance } from '@aws-sdk/client-ec2';
import { describe, expect, it } from 'vitest';
import { awsConfigSchema } from '../../providers/aws/config.js';
import {
  candidates,
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
    expect(toInstance(running, 'eu-west-1', false, end)).toMatchObject({ state: 'Running', expiresAt: end });
    expect(toInstance(running, 'eu-west-1', false).expiresAt).toBeUndefined();
    const ending = { ...running, State: { Name: 'shutting-down' as const, Code: 32 } };
    expect(toInstance(ending, 'eu-west-1', false, end).expiresAt).toBeUndefined();
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
