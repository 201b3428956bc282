/**
 * The gcp provider's pure parts: config validation, providerIDs, label
 * names, the state table, the instance mapping, and the classification
 * tables. The provider against the real client is in
 * tests/integration/gcp-provider.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parseProvidersConfig, ProvidersConfigError } from '../../providers/config.js';
import { adcError, CredentialsError, tokenError } from '../../providers/gcp/auth.js';
import {
  checkReason,
  classify,
  classifyOperationError,
  httpStatus,
  invalidFieldCheck,
  isInstanceNotFound,
  notFoundResource,
  QUOTA_OPERATION_CODES,
} from '../../providers/gcp/classify.js';
import { gcpConfigSchema, networkPath, subnetworkRegion } from '../../providers/gcp/config.js';
import { candidateZones } from '../../providers/gcp/placement.js';
import {
  formatProviderId,
  LABEL_INSTALLATION,
  LABEL_MANAGED,
  LABEL_UID,
  labelKey,
  MANAGED_FILTER,
  mapState,
  parseProviderId,
  toInstance,
} from '../../providers/gcp/instance.js';

function issuesOf(block: string): string[] {
  try {
    parseProvidersConfig(`providers:\n  - name: g\n    type: gcp\n${block}`, 'test.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ProvidersConfigError);
    return (err as ProvidersConfigError).issues;
  }
  throw new Error('expected the config to be rejected');
}

/** A gaxios-shaped API error: the status, and the JSON body as the message. */
function apiError(status: number, ...reasons: string[]): Error {
  return apiErrorSaying(status, 'm', ...reasons);
}

/** The same, with the body's message (what Compute writes, e.g. "The resource '...' was not found"). */
function apiErrorSaying(status: number, message: string, ...reasons: string[]): Error {
  const err = new Error(
    JSON.stringify({
      error: {
        code: status,
        message,
        errors: reasons.map((reason) => ({ reason, domain: 'global', message })),
      },
    }),
  );
  err.name = 'GaxiosError';
  Object.assign(err, { status, code: status });
  return err;
}

describe('gcp config block', () => {
  it('takes the seed defaults when only project is given', () => {
    expect(gcpConfigSchema.parse({ project: 'my-project' })).toEqual({
      project: 'my-project',
      network: 'default',
      networkTag: 'proxy-operator',
      diskSizeGb: 10,
      provisioningModel: 'STANDARD',
      blockProjectSshKeys: true,
      internalOnly: false,
      listCallsPerVmHour: 0.75,
      listMaxAgeSeconds: 3600,
    });
  });

  it.each([
    ['    gcp: {}\n', 'providers[0].gcp.project: is required'],
    ['', 'providers[0].gcp.project: is required'],
    ['    gcp:\n      project: My_Project\n', 'providers[0].gcp.project: must be a GCP project ID'],
    ['    gcp:\n      project: my-project\n      zone: x\n', 'providers[0].gcp.zone: unknown field'],
    [
      '    gcp:\n      project: my-project\n      keyFile: /k.json\n',
      'providers[0].gcp.keyFile: unknown field',
    ],
    [
      '    gcp:\n      project: my-project\n      diskSizeGb: 5\n',
      'providers[0].gcp.diskSizeGb: must be at least 10',
    ],
    [
      '    gcp:\n      project: my-project\n      diskSizeGb: 10.5\n',
      'providers[0].gcp.diskSizeGb: must be a whole number',
    ],
    [
      '    gcp:\n      project: my-project\n      networkTag: Bad Tag\n',
      'providers[0].gcp.networkTag: must be a lowercase name',
    ],
    [
      '    gcp:\n      project: my-project\n      network: "a b"\n',
      'providers[0].gcp.network: must be a network name',
    ],
    [
      '    gcp:\n      project: my-project\n      endpoint: ftp://x\n',
      'providers[0].gcp.endpoint: must be an http:// or https:// URL',
    ],
    [
      '    gcp:\n      project: my-project\n      endpoint: http://127.0.0.1:1/compute\n',
      'providers[0].gcp.endpoint: must be a scheme, host and port only',
    ],
    [
      '    gcp:\n      project: my-project\n      subnetwork: subnets/a\n',
      'providers[0].gcp.subnetwork: must be a subnetwork: regions/<region>/subnetworks/<name>',
    ],
    [
      '    gcp:\n      project: my-project\n      subnetwork: projects/h-p/regions/eu/subnetworks/../x\n',
      'providers[0].gcp.subnetwork: must be a subnetwork',
    ],
    [
      '    gcp:\n      project: my-project\n      diskType: PD SSD\n',
      'providers[0].gcp.diskType: must be a disk type name',
    ],
    [
      '    gcp:\n      project: my-project\n      provisioningModel: PREEMPTIBLE\n',
      'providers[0].gcp.provisioningModel: must be STANDARD or SPOT',
    ],
    [
      '    gcp:\n      project: my-project\n      provisioningModel: SPOT\n      instanceTerminationAction: KEEP\n',
      'providers[0].gcp.instanceTerminationAction: must be DELETE or STOP',
    ],
    [
      '    gcp:\n      project: my-project\n      instanceTerminationAction: STOP\n',
      'providers[0].gcp.instanceTerminationAction: is only valid with provisioningModel: SPOT',
    ],
    [
      '    gcp:\n      project: my-project\n      blockProjectSshKeys: "yes"\n',
      'providers[0].gcp.blockProjectSshKeys: must be true or false',
    ],
    [
      '    gcp:\n      project: my-project\n      internalOnly: 1\n',
      'providers[0].gcp.internalOnly: must be true or false',
    ],
    [
      '    gcp:\n      project: my-project\n      serviceAccount: {}\n',
      'providers[0].gcp.serviceAccount.email: is required',
    ],
    [
      '    gcp:\n      project: my-project\n      serviceAccount:\n        email: someone@example.com\n',
      'providers[0].gcp.serviceAccount.email: must be a service account email',
    ],
    [
      '    gcp:\n      project: my-project\n      serviceAccount:\n        email: vm@my-project.iam.gserviceaccount.com\n        scopes: [cloud-platform]\n',
      'providers[0].gcp.serviceAccount.scopes[0]: must be an OAuth scope URL',
    ],
    [
      '    gcp:\n      project: my-project\n      serviceAccount:\n        email: vm@my-project.iam.gserviceaccount.com\n        role: x\n',
      'providers[0].gcp.serviceAccount.role: unknown field',
    ],
  ])('rejects %j naming the field', (block, issue) => {
    expect(issuesOf(block).join('\n')).toContain(issue);
  });

  it('zones, credentials and endpointCaFile: validated, each message naming the field', () => {
    const cfg = gcpConfigSchema.parse({
      project: 'my-project',
      zones: ['europe-west1-b', 'europe-west1-c'],
      credentials: { keyFile: '/keys/a.json', impersonate: 'px@my-project.iam.gserviceaccount.com' },
      endpoint: 'https://127.0.0.1:4443',
      endpointCaFile: '/etc/ca.pem',
    });
    expect(cfg.zones).toEqual(['europe-west1-b', 'europe-west1-c']);
    expect(cfg.credentials).toEqual({
      keyFile: '/keys/a.json',
      impersonate: 'px@my-project.iam.gserviceaccount.com',
    });
    const issue = (input: Record<string, unknown>) => {
      const r = gcpConfigSchema.safeParse({ project: 'my-project', ...input });
      expect(r.success).toBe(false);
      return r.error!.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    };
    expect(issue({ zones: [] })).toContain('zones: must list at least one zone');
    expect(issue({ zones: ['EU'] })).toContain('zones.0: must be a GCE zone name');
    expect(issue({ credentials: { keyFile: '' } })).toContain('credentials.keyFile: must be a file path');
    expect(issue({ credentials: { impersonate: 'me@gmail.com' } })).toContain(
      'credentials.impersonate: must be a service account email',
    );
    expect(issue({ credentials: { keyfile: '/a' } })).toContain('credentials');
    expect(issue({ endpoint: 'http://127.0.0.1:4000', endpointCaFile: '/ca.pem' })).toContain(
      'endpointCaFile: needs an https:// endpoint',
    );
  });

  it("fallback zones: the Proxy's zone first, then the configured ones of its region, in order", () => {
    expect(
      candidateZones('europe-west1-b', [
        'us-central1-a',
        'europe-west1-d',
        'europe-west1-b',
        'europe-west1-c',
      ]),
    ).toEqual(['europe-west1-b', 'europe-west1-d', 'europe-west1-c']);
    expect(candidateZones('europe-west1-b')).toEqual(['europe-west1-b']);
    // A region that prefixes another (europe-west1 / europe-west12) is not the same region.
    expect(candidateZones('europe-west1-b', ['europe-west12-a'])).toEqual(['europe-west1-b']);
  });

  it('accepts a shared-VPC network path and an http endpoint', () => {
    const cfg = gcpConfigSchema.parse({
      project: 'my-project',
      network: 'projects/host-proj/global/networks/shared',
      endpoint: 'http://127.0.0.1:4000',
    });
    expect(networkPath(cfg.network)).toBe('projects/host-proj/global/networks/shared');
    expect(networkPath('default')).toBe('global/networks/default');
  });

  it('accepts every subnetwork form and reads its region', () => {
    for (const [subnetwork, region] of [
      ['regions/europe-west1/subnetworks/proxies', 'europe-west1'],
      ['projects/host-project/regions/us-central1/subnetworks/shared-a', 'us-central1'],
      [
        'https://www.googleapis.com/compute/v1/projects/host-project/regions/europe-west4/subnetworks/s1',
        'europe-west4',
      ],
    ] as const) {
      expect(gcpConfigSchema.parse({ project: 'my-project', subnetwork }).subnetwork).toBe(subnetwork);
      expect(subnetworkRegion(subnetwork)).toBe(region);
    }
    const spot = gcpConfigSchema.parse({
      project: 'my-project',
      provisioningModel: 'SPOT',
      serviceAccount: { email: 'vm@my-project.iam.gserviceaccount.com' },
    });
    expect(spot.instanceTerminationAction).toBeUndefined();
    expect(spot.serviceAccount).toEqual({
      email: 'vm@my-project.iam.gserviceaccount.com',
      scopes: ['https://www.googleapis.com/auth/cloud-platform'],
    });
  });
});

describe('gcp providerIDs and labels', () => {
  it('round-trips projects/<project>/zones/<zone>/instances/<name>, reads the old form, rejects anything else', () => {
    const id = formatProviderId('my-project', 'europe-west1-b', 'proxy-abc');
    expect(id).toBe('projects/my-project/zones/europe-west1-b/instances/proxy-abc');
    expect(parseProviderId(id)).toEqual({ project: 'my-project', zone: 'europe-west1-b', name: 'proxy-abc' });
    // Recorded before the project was part of the ID: no project (the configured one).
    expect(parseProviderId('zones/europe-west1-b/instances/proxy-abc')).toEqual({
      zone: 'europe-west1-b',
      name: 'proxy-abc',
    });
    for (const bad of [
      '',
      'zones/europe-west1-b/instances/',
      'projects/p/zones/europe-west1-b/instances/proxy-abc',
      'projects//zones/europe-west1-b/instances/proxy-abc',
      'projects/My_Project/zones/europe-west1-b/instances/proxy-abc',
      'projects/my-project/zones/europe-west1-b/instances/proxy-abc/',
      'projects/my-project/europe-west1-b/instances/proxy-abc',
      'zones/europe-west1-b/instances/proxy-abc/',
      'zones/EU/instances/proxy-abc',
      'zones/europe-west1-b/instances/-bad',
      'zones/../instances/x',
    ]) {
      expect(parseProviderId(bad), bad).toBeUndefined();
    }
  });

  it('maps the contract marks to GCE label keys deterministically', () => {
    expect(labelKey('crawl.example.com/managed')).toBe('crawl-example-com-managed');
    expect([LABEL_MANAGED, LABEL_UID, LABEL_INSTALLATION]).toEqual([
      'crawl-example-com-managed',
      'crawl-example-com-uid',
      'crawl-example-com-installation',
    ]);
    for (const key of [LABEL_MANAGED, LABEL_UID, LABEL_INSTALLATION])
      expect(key).toMatch(/^[a-z][-_a-z0-9]{0,62}$/);
    expect(MANAGED_FILTER).toBe('labels.crawl-example-com-managed = true');
  });
});

describe("gcp state table (the seed's rows)", () => {
  it.each([
    ['PROVISIONING', '', 'Provisioning'],
    ['STAGING', '1.2.3.4', 'Provisioning'],
    ['REPAIRING', '1.2.3.4', 'Provisioning'],
    ['RUNNING', '', 'Provisioning'],
    ['RUNNING', '1.2.3.4', 'Running'],
    ['STOPPING', '1.2.3.4', 'Stopped'],
    ['STOPPED', '', 'Stopped'],
    ['SUSPENDING', '', 'Stopped'],
    ['SUSPENDED', '', 'Stopped'],
    ['TERMINATED', '', 'Terminated'],
    ['SOMETHING_NEW', '1.2.3.4', 'Stopped'],
    [undefined, '', 'Stopped'],
  ])('%s with ip %j is %s', (status, ip, state) => {
    expect(mapState(status, ip)).toBe(state);
  });

  it('reads the IP only when Running, and the marks and creation time from the instance', () => {
    const running = toInstance(
      {
        name: 'proxy-a',
        status: 'RUNNING',
        creationTimestamp: '2026-11-30T10:11:12.345-08:00',
        labels: { [LABEL_UID]: 'u-1', [LABEL_INSTALLATION]: 'inst' },
        networkInterfaces: [{ accessConfigs: [{ natIP: '203.0.113.9' }] }],
      },
      'my-project',
      'europe-west1-b',
    );
    expect(running).toEqual({
      id: 'projects/my-project/zones/europe-west1-b/instances/proxy-a',
      state: 'Running',
      ip: '203.0.113.9',
      uid: 'u-1',
      installation: 'inst',
      createdAt: new Date('2026-11-30T18:11:12.345Z'),
    });
    const stopping = toInstance(
      {
        name: 'proxy-a',
        status: 'STOPPING',
        creationTimestamp: 'not a time',
        networkInterfaces: [{ accessConfigs: [{ natIP: '203.0.113.9' }] }],
      },
      'my-project',
      'z-a',
    );
    expect(stopping.ip).toBeUndefined();
    expect(stopping.uid).toBe('');
    expect(stopping.installation).toBe('');
    // An unparsable timestamp is left out: it counts as very old for GC.
    expect(stopping.createdAt).toBeUndefined();
  });
});

describe('gcp classification', () => {
  const gone = (path: string) => apiErrorSaying(404, `The resource '${path}' was not found`, 'notFound');

  it.each([
    [gone('projects/p-1/zones/europe-west1-b/instances/proxy-a'), 'NotFound'],
    [gone('projects/p-1'), 'Permanent'],
    [gone('projects/p-1/zones/europe-west9-z'), 'Permanent'],
    [gone('projects/debian-cloud/global/images/family/nope'), 'Permanent'],
    [gone('projects/p-1/zones/europe-west1-b/operations/operation-1'), 'Transient'],
    [apiError(404, 'notFound'), 'Transient'],
    [apiError(404), 'Transient'],
    [
      apiErrorSaying(412, 'Constraint constraints/compute.vmExternalIpAccess violated', 'conditionNotMet'),
      'Permanent',
    ],
    [apiError(412, 'conditionNotMet'), 'Permanent'],
    [apiError(429, 'rateLimitExceeded'), 'Transient'],
    [apiError(429), 'Transient'],
    [apiError(403, 'quotaExceeded'), 'QuotaExceeded'],
    [apiError(403, 'rateLimitExceeded'), 'Transient'],
    [apiError(403, 'userRateLimitExceeded'), 'Transient'],
    [apiError(403, 'forbidden'), 'Permanent'],
    [apiError(403, 'accessNotConfigured'), 'Permanent'],
    [apiError(403), 'Permanent'],
    [apiError(401, 'authError'), 'Permanent'],
    [apiError(400, 'invalid'), 'Permanent'],
    [apiError(400, 'resourceNotReady'), 'Transient'],
    [apiError(409, 'alreadyExists'), 'Transient'],
    [apiError(408), 'Transient'],
    [apiError(500, 'backendError'), 'Transient'],
    [apiError(503), 'Transient'],
    [Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }), 'Transient'],
    [new Error('Could not load the default credentials.'), 'Transient'],
    [new CredentialsError('Permanent', 'Unauthorized', 'refused'), 'Permanent'],
    [new CredentialsError('Transient', 'Unauthorized', 'not yet'), 'Transient'],
    [Object.assign(new Error('aborted'), { name: 'AbortError' }), 'Transient'],
    ['a string', 'Transient'],
    [null, 'Transient'],
  ])('%s is %s', (err, cls) => {
    expect(classify(err).errorClass).toBe(cls);
  });

  it('keeps reasons that are identifiers only, never the body text', () => {
    const c = classify(apiError(403, 'quotaExceeded', 'has spaces; drop me'));
    expect(c.reasons).toEqual(['quotaExceeded']);
    expect(c.summary).toBe('Compute API answered 403 quotaExceeded');
    const plain = new Error('not json at all');
    Object.assign(plain, { status: 500 });
    expect(classify(plain).summary).toBe('Compute API answered 500');
  });

  it('reads NotFound as gone only for the very instance; names the field for anything else', () => {
    const mine = gone('projects/p-1/zones/europe-west1-b/instances/proxy-a');
    expect(isInstanceNotFound(mine, 'p-1', 'europe-west1-b', 'proxy-a')).toBe(true);
    expect(isInstanceNotFound(mine, 'p-1', 'europe-west1-b', 'proxy-b')).toBe(false);
    expect(isInstanceNotFound(mine, 'p-2', 'europe-west1-b', 'proxy-a')).toBe(false);
    expect(
      isInstanceNotFound(gone('projects/p-1/zones/europe-west1-b'), 'p-1', 'europe-west1-b', 'proxy-a'),
    ).toBe(false);
    expect(isInstanceNotFound(apiError(404, 'notFound'), 'p-1', 'europe-west1-b', 'proxy-a')).toBe(false);
    // A full URL form is read too; anything not a resource path is not.
    expect(
      notFoundResource(
        gone('https://www.googleapis.com/compute/v1/projects/p-1/zones/europe-west1-b/instances/proxy-a'),
      ),
    ).toBe('projects/p-1/zones/europe-west1-b/instances/proxy-a');
    expect(notFoundResource(gone('projects/p 1; drop'))).toBeUndefined();
    expect(classify(gone('projects/p-1')).summary).toBe(
      'Compute API answered 404 notFound for the project; check gcp.project (and that the Compute API is enabled)',
    );
    expect(classify(gone('projects/p-1/zones/europe-west9-z')).summary).toContain(
      'for the zone; check placement.zone',
    );
    // On insert, any 404 is Permanent, with the field when the body names it.
    const image = classify(gone('projects/x/global/images/no-such-image'), 'insert');
    expect(image).toMatchObject({ errorClass: 'Permanent' });
    expect(image.summary).toBe('Compute API answered 404 notFound for the image; check placement.image');
    expect(classify(gone('projects/p-1/zones/z-a/machineTypes/e2-nano'), 'insert').summary).toContain(
      'check placement.machineType',
    );
    expect(classify(gone('projects/p-1/global/networks/nope'), 'insert').summary).toContain(
      'check gcp.network',
    );
    expect(classify(gone('projects/p-1/regions/r/subnetworks/s'), 'insert').summary).toContain('subnetwork');
    expect(classify(apiError(404, 'notFound'), 'insert')).toMatchObject({ errorClass: 'Permanent' });
    // The resource path picks the hint; it is never copied (a project ID or image name is config, not a secret, but stays out).
    expect(image.summary).not.toContain('no-such-image');
  });

  it.each([
    ["Invalid value for field 'resource.machineType': 'zones/z/machineTypes/e2-x'.", 'placement.machineType'],
    ["Invalid value for field 'resource.disks[0].initializeParams.sourceImage': 'x'.", 'placement.image'],
    ["Invalid value for field 'resource.metadata': too big", 'cloudInit (GCE metadata'],
    ["Invalid value for field 'resource.scheduling': Spot", 'gcp.provisioningModel'],
    ["Invalid value for field 'resource.networkInterfaces[0]': x", 'gcp.network and gcp.subnetwork'],
  ])('a 400 "%s" names %s', (text, want) => {
    const err = apiErrorSaying(400, text, 'invalid');
    expect(invalidFieldCheck(err)).toContain(want);
    expect(classify(err, 'insert')).toMatchObject({ errorClass: 'Permanent' });
    expect(classify(err, 'insert').summary).toContain(`; check ${want}`);
    // Only the field's name is kept, never the rest of the text.
    expect(classify(err, 'insert').summary).not.toContain("'x'");
  });

  it('a 412 names the organization-policy constraint; the rest of its text is not kept', () => {
    const c = classify(
      apiErrorSaying(
        412,
        'Constraint constraints/compute.vmExternalIpAccess violated for project 123. Add instance projects/p/zones/z/instances/n to the constraint',
        'conditionNotMet',
      ),
      'insert',
    );
    expect(c.errorClass).toBe('Permanent');
    expect(c.summary).toBe(
      'Compute API answered 412 conditionNotMet: refused by organization policy constraints/compute.vmExternalIpAccess; ask for an exception or change the provider config',
    );
    expect(c.summary).not.toContain('123');
  });

  it('credentials failures: refused or unparseable is Permanent naming the credential, the rest Transient', () => {
    const refused = tokenError(
      Object.assign(new Error('invalid_grant: sentinel'), {
        status: 400,
        response: { status: 400, data: { error: 'invalid_grant', error_description: 'sentinel' } },
      }),
      'service account sa@p-1.iam.gserviceaccount.com',
    );
    expect(refused).toMatchObject({ errorClass: 'Permanent', checkReason: 'Unauthorized' });
    expect(refused.message).toContain(
      'refused service account sa@p-1.iam.gserviceaccount.com (invalid_grant)',
    );
    expect(refused.message).not.toContain('sentinel');
    // A token source's 404 (a metadata server with no service account) is Transient, and has no HTTP status for classify.
    const meta = tokenError(
      Object.assign(new Error('A Not Found error was returned'), {
        status: 404,
        response: { status: 404, data: 'x' },
      }),
      "the metadata server's service account",
    );
    expect(meta).toMatchObject({ errorClass: 'Transient' });
    expect(meta.message).toContain('(token source answered 404)');
    expect(httpStatus(meta)).toBeUndefined();
    expect(classify(meta).errorClass).toBe('Transient');
    expect(tokenError(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }), 'c')).toMatchObject({
      errorClass: 'Transient',
      checkReason: 'Unreachable',
    });
    expect(tokenError(Object.assign(new Error('x'), { code: 'ERR_OSSL_UNSUPPORTED' }), 'c').errorClass).toBe(
      'Permanent',
    );
    // IAM refusing generateAccessToken: Permanent naming the account and the role; only for that call.
    const iam = (status: number, url: string | URL) =>
      Object.assign(new Error('PERMISSION_DENIED: unable to impersonate: sentinel'), {
        status,
        config: { url },
        response: { status, data: { error: { status: 'PERMISSION_DENIED', message: 'sentinel' } } },
      });
    const target = { target: 'px@p-1.iam.gserviceaccount.com', source: 'user credentials' };
    const url =
      'https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/px@p-1.iam.gserviceaccount.com:generateAccessToken';
    for (const u of [url, new URL(url)]) {
      const denied = tokenError(iam(403, u), 'c', target);
      expect(denied).toMatchObject({ errorClass: 'Permanent', checkReason: 'Forbidden' });
      expect(denied.message).toContain(
        'refused to let user credentials impersonate service account px@p-1.iam.gserviceaccount.com (403): grant it roles/iam.serviceAccountTokenCreator',
      );
      expect(denied.message).not.toContain('sentinel');
    }
    expect(tokenError(iam(503, url), 'c', target).errorClass).toBe('Transient');
    expect(
      tokenError(iam(403, 'http://169.254.169.254/computeMetadata/v1/token'), 'c', target).errorClass,
    ).toBe('Transient');
    expect(tokenError(iam(403, url), 'c').errorClass).toBe('Transient');
    expect(adcError(new Error('Could not load the default credentials. Browse to ...'))).toMatchObject({
      errorClass: 'Transient',
      checkReason: 'Unauthorized',
    });
    expect(adcError(new SyntaxError('Unexpected token n in JSON')).errorClass).toBe('Permanent');
    expect(
      adcError(new Error('The incoming JSON object does not contain a client_email field')).errorClass,
    ).toBe('Permanent');
    expect(adcError(Object.assign(new Error('ENOENT: no such file'), { code: 'ENOENT' })).errorClass).toBe(
      'Transient',
    );
  });

  it('classifies failed operations by code first, then by HTTP status; 404 is never NotFound', () => {
    for (const code of QUOTA_OPERATION_CODES)
      expect(classifyOperationError([code], 403)).toBe('QuotaExceeded');
    expect(classifyOperationError(['RESOURCE_NOT_FOUND'], 404)).toBe('Permanent');
    expect(classifyOperationError(['INVALID_FIELD_VALUE'], 400)).toBe('Permanent');
    expect(classifyOperationError(['SOMETHING'], 429)).toBe('QuotaExceeded');
    expect(classifyOperationError(['INTERNAL_ERROR'], 500)).toBe('Transient');
    expect(classifyOperationError([], undefined)).toBe('Transient');
  });

  it.each([
    [apiError(401), false, 'Unauthorized'],
    [apiError(403, 'accessNotConfigured'), false, 'Forbidden'],
    [apiError(500), false, 'APIError'],
    [apiError(504), false, 'Timeout'],
    [Object.assign(new Error('x'), { code: 'ECONNREFUSED' }), false, 'Unreachable'],
    [new Error('Could not load the default credentials.'), false, 'Unreachable'],
    [new CredentialsError('Transient', 'Unauthorized', 'no credentials'), false, 'Unauthorized'],
    [new CredentialsError('Transient', 'Unreachable', 'token endpoint down'), false, 'Unreachable'],
    [apiError(500), true, 'Timeout'],
  ])('check reason for %s (aborted %s) is %s', (err, aborted, reason) => {
    expect(checkReason(err, aborted)).toBe(reason);
  });
});
