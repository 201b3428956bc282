/**
 * The aws provider's error table (docs/providers/aws.md, issue 59 item 4),
 * one test per row. Each error is EC2's own answer (status, XML body as
 * EC2 writes it, the real message text from docs/providers/aws.md's
 * sources) parsed by the real `@aws-sdk/client-ec2` deserializer, then
 * classified: what the provider sees is what the SDK makes of EC2's bytes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pino } from 'pino';
import { parse as parseYaml } from 'yaml';
import { DescribeInstancesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { afterAll, describe, expect, it } from 'vitest';
import { checkReason, classify, encodedAuthorizationMessage } from '../../providers/aws/classify.js';
import { clientToken, mapState, parseProviderId } from '../../providers/aws/instance.js';
import { awsConfigSchema } from '../../providers/aws/config.js';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { ProviderError, safeCause } from '../../providers/errors.js';

function ec2Error(code: string, message: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${code}</Code><Message>${message
    .replace(/&/g, '&amp;')
    .replace(
      /</g,
      '&lt;',
    )}</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>`;
}

/** A client whose one "network" answer is `status` with EC2's error body; no retries, no network. */
const clients: EC2Client[] = [];
async function answered(status: number, code: string, message: string): Promise<unknown> {
  const client = new EC2Client({
    region: 'eu-west-1',
    credentials: { accessKeyId: 'AKIAUNITTEST', secretAccessKey: 'unit' },
    maxAttempts: 1,
    requestHandler: {
      handle: () =>
        Promise.resolve({
          response: {
            statusCode: status,
            headers: { 'content-type': 'text/xml;charset=UTF-8', 'x-amzn-requestid': 'ea966190' },
            body: Readable.from([Buffer.from(ec2Error(code, message))]),
          },
        }),
    },
  });
  clients.push(client);
  try {
    await client.send(new DescribeInstancesCommand({}));
  } catch (err) {
    return err;
  }
  throw new Error('expected the SDK to throw');
}

afterAll(() => {
  for (const c of clients) c.destroy();
});

const ENCODED = 'nWk7G3yJ0wT-d4sQ2aK_9xLmPqRsTuVwXyZ0123456789abcdefABCDEF';

// [code, HTTP status, EC2's message, class, what the summary must name (or null), capacity?]
const ROWS: [string, number, string, string, RegExp | null, boolean][] = [
  ['RequestLimitExceeded', 503, 'Request limit exceeded.', 'Transient', /rate limited/, false],
  ['Unavailable', 503, 'The service is unavailable. Please try again shortly.', 'Transient', null, false],
  ['InternalError', 500, 'An internal error has occurred', 'Transient', null, false],
  [
    'InsufficientInstanceCapacity',
    500,
    'We currently do not have sufficient t4g.xlarge capacity in the Availability Zone you requested (eu-north-1a).',
    'Transient',
    /no capacity/,
    true,
  ],
  [
    'InsufficientFreeAddressesInSubnet',
    400,
    "There are not enough free addresses in subnet 'subnet-0123456789abcdef0' to satisfy the requested number of instances.",
    'Transient',
    /no capacity/,
    true,
  ],
  [
    'InstanceLimitExceeded',
    400,
    'Your quota allows for 0 more running instance(s). You requested at least 1',
    'QuotaExceeded',
    /Service Quotas/,
    false,
  ],
  [
    'VcpuLimitExceeded',
    400,
    'You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket that the specified instance type belongs to.',
    'QuotaExceeded',
    null,
    false,
  ],
  ['MaxSpotInstanceCountExceeded', 400, 'Max spot instance count exceeded', 'QuotaExceeded', null, false],
  [
    'AddressLimitExceeded',
    400,
    'The maximum number of addresses has been reached.',
    'QuotaExceeded',
    null,
    false,
  ],
  [
    'UnauthorizedOperation',
    403,
    `You are not authorized to perform this operation. Encoded authorization failure message: ${ENCODED}`,
    'Permanent',
    new RegExp(`may not call DescribeInstances.*decode-authorization-message.*${ENCODED}`),
    false,
  ],
  [
    'AuthFailure',
    401,
    'AWS was not able to validate the provided access credentials',
    'Permanent',
    /credentials were refused/,
    false,
  ],
  [
    'InvalidAMIID.NotFound',
    400,
    "The image id '[ami-0123456789abcdef0]' does not exist",
    'Permanent',
    /check placement\.image or aws\.imageId/,
    false,
  ],
  [
    'InvalidAMIID.Malformed',
    400,
    'Invalid id: "ubuntu" (expecting "ami-...")',
    'Permanent',
    /check placement\.image or aws\.imageId/,
    false,
  ],
  [
    'SsmInvalidParameter',
    400,
    'Unsupported data type. The following parameter data types are supported: aws:ec2:image',
    'Permanent',
    /check placement\.image or aws\.imageId \(the SSM parameter\)/,
    false,
  ],
  [
    'InvalidParameterValue',
    400,
    "Invalid value 'm1_small' for InstanceType.",
    'Permanent',
    /check placement\.machineType or aws\.instanceTypes/,
    false,
  ],
  [
    'InvalidSubnetID.NotFound',
    400,
    "The subnet ID 'subnet-0123456789abcdef0' does not exist",
    'Permanent',
    /check aws\.subnetIds/,
    false,
  ],
  ['RequestExpired', 400, 'Request has expired.', 'Transient', /credentials expired/, false],
  [
    'ExpiredToken',
    403,
    'The security token included in the request is expired',
    'Transient',
    /credentials expired/,
    false,
  ],
  [
    'InvalidInstanceID.NotFound',
    400,
    "The instance ID 'i-0123456789abcdef0' does not exist",
    'NotFound',
    null,
    false,
  ],
  ['InvalidInstanceID.Malformed', 400, 'Invalid id: "ma1"', 'Permanent', null, false],
  ['SomeFutureClientError', 400, 'Something new.', 'Permanent', null, false],
  ['SomeFutureServerError', 502, 'Something new.', 'Transient', null, false],
];

describe('EC2 error table', () => {
  for (const [code, status, message, errorClass, names, capacity] of ROWS) {
    it(`${code} (${status}) is ${errorClass}${capacity ? ', a capacity refusal' : ''}`, async () => {
      const err = await answered(status, code, message);
      const c = classify(err, 'DescribeInstances');
      expect(c.errorClass).toBe(errorClass);
      expect(c.code).toBe(code);
      expect(c.status).toBe(status);
      expect(c.capacity).toBe(capacity);
      expect(c.summary).toContain(`EC2 answered ${status} ${code}`);
      if (names !== null) expect(c.summary).toMatch(names);
      // EC2's own text is read, never kept: neither the message nor a value it quotes.
      expect(c.summary).not.toContain(message);
      for (const m of message.matchAll(/'([^']{3,})'|\(([^)]{3,})\)/g))
        expect(c.summary).not.toContain(m[1] ?? m[2]);
      // What a ProviderError keeps of it: the code, as the cause's name.
      expect(safeCause(err)).toMatchObject({ name: code });
    });
  }

  it('the SDK finding no credentials is Transient and says what is missing; its check reason is Unauthorized', () => {
    const err = Object.assign(new Error('Could not load credentials from any providers'), {
      name: 'CredentialsProviderError',
    });
    const c = classify(err, 'RunInstances');
    expect(c.errorClass).toBe('Transient');
    expect(c.summary).toMatch(/no AWS credentials/);
    expect(checkReason(err, false)).toBe('Unauthorized');
  });

  it('no answer at all (connection refused, timeout) is Transient', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    expect(classify(refused).errorClass).toBe('Transient');
    expect(classify(refused).summary).toContain('ECONNREFUSED');
    const timeout = Object.assign(new Error('timed out'), { name: 'TimeoutError' });
    expect(classify(timeout).errorClass).toBe('Transient');
    expect(checkReason(refused, false)).toBe('Unreachable');
  });

  it('check reasons: refused credentials are Unauthorized, a denied action Forbidden', async () => {
    expect(checkReason(await answered(401, 'AuthFailure', 'x'), false)).toBe('Unauthorized');
    expect(checkReason(await answered(403, 'UnauthorizedOperation', 'x'), false)).toBe('Forbidden');
    expect(checkReason(await answered(503, 'RequestLimitExceeded', 'x'), false)).toBe('APIError');
  });

  it('the encoded authorization message is read only when it is a token', () => {
    expect(
      encodedAuthorizationMessage({ message: `Encoded authorization failure message: ${ENCODED}` }),
    ).toBe(ENCODED);
    expect(
      encodedAuthorizationMessage({ message: 'You are not authorized to perform this operation.' }),
    ).toBe(undefined);
  });

  it('a ProviderError made from a classification carries no EC2 text', async () => {
    const err = await answered(
      400,
      'InvalidParameterValue',
      "Invalid value 'secret-looking-value' for UserData.",
    );
    const c = classify(err, 'RunInstances');
    expect(c.summary).toContain('check cloudInit');
    const pe = new ProviderError({
      errorClass: c.errorClass,
      operation: 'create',
      provider: 'aws-eu',
      instance: 'proxy-x',
      message: c.summary,
      cause: err,
    });
    expect(JSON.stringify(pe.toJSON()) + pe.message).not.toContain('secret-looking-value');
  });
});

describe('aws instance pieces', () => {
  it('maps EC2 states as the contract wants', () => {
    expect(mapState('pending', '')).toBe('Provisioning');
    expect(mapState('running', '')).toBe('Provisioning');
    expect(mapState('running', '203.0.113.7')).toBe('Running');
    expect(mapState('stopping', '203.0.113.7')).toBe('Stopped');
    expect(mapState('stopped', '')).toBe('Stopped');
    expect(mapState('shutting-down', '')).toBe('Terminated');
    expect(mapState('some-future-state', '203.0.113.7')).toBe('Stopped');
  });

  it('providerIDs are <region>/<instance-id>', () => {
    expect(parseProviderId('eu-west-1/i-0123456789abcdef0')).toEqual({
      region: 'eu-west-1',
      instanceId: 'i-0123456789abcdef0',
    });
    expect(parseProviderId('us-gov-west-1/i-01234567')).toBeDefined();
    for (const bad of ['', 'eu-west-1', 'eu-west-1/', 'EU/i-01234567', 'eu-west-1/i-0123', 'x/i-01234567'])
      expect(parseProviderId(bad)).toBeUndefined();
  });

  it('client tokens fit EC2 (at most 64 ASCII characters) and differ by UID, spec and generation', () => {
    const t = clientToken('uid-a', 'v2:abc', 0);
    expect(t).toMatch(/^[\x21-\x7e]{1,64}$/);
    expect(clientToken('uid-a', 'v2:abc', 0)).toBe(t);
    expect(
      new Set([
        t,
        clientToken('uid-b', 'v2:abc', 0),
        clientToken('uid-a', 'v2:abd', 0),
        clientToken('uid-a', 'v2:abc', 1),
      ]).size,
    ).toBe(4);
  });

  it('the config is validated once, naming the field', () => {
    expect(awsConfigSchema.safeParse({}).success).toBe(false);
    const ok = awsConfigSchema.parse({ region: 'eu-west-1' });
    expect(ok).toMatchObject({
      instanceTypes: ['t3.micro'],
      internalOnly: false,
      sdkMaxAttempts: 2,
      tags: {},
    });
    const bad = awsConfigSchema.safeParse({
      region: 'eu-west-1',
      imageId: 'ubuntu',
      subnetIds: ['subnet-1'],
      tags: { Name: 'x' },
      sdkMaxAttempts: 9,
      endpoint: 'http://127.0.0.1:1/path',
    });
    expect(bad.success).toBe(false);
    const paths = bad.error!.issues.map((i) => i.path.join('.')).sort();
    expect(paths).toEqual(['endpoint', 'imageId', 'sdkMaxAttempts', 'subnetIds.0', 'tags.Name']);
  });
});

describe('the aws samples', () => {
  const ROOT = join(import.meta.dirname, '..', '..');
  const read = (name: string) => readFileSync(join(ROOT, 'infra/samples', name), 'utf8');

  it('infra/samples/providers-aws.yaml loads and builds, dialling nothing', async () => {
    const cfg = parseProvidersConfig(read('providers-aws.yaml'), 'providers-aws.yaml');
    expect(cfg.providers.map((p) => `${p.name}:${p.type}`)).toEqual(['aws-eu:aws']);
    const registry = buildProviders(cfg, { logger: pino({ level: 'silent' }), stateRoot: '/nonexistent' });
    expect(registry.get('aws-eu')?.type).toBe('aws');
    await registry.close();
  });

  it("infra/samples/proxy-aws.yaml names that entry and carries the gcp sample's cloud-init byte for byte", () => {
    type Sample = { spec: { provider: string; cloudInit: { inline: string } } };
    const aws = parseYaml(read('proxy-aws.yaml')) as Sample;
    const gcp = parseYaml(read('proxy-gcp.yaml')) as Sample;
    expect(aws.spec.provider).toBe('aws-eu');
    // The gcp sample's egress policy is checked against forwarding/egress-squid.ts (egress-squid.test.ts).
    expect(aws.spec.cloudInit.inline).toBe(gcp.spec.cloudInit.inline);
  });
});
