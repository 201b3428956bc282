/**
 * The gcp provider's pure parts: config validation, providerIDs, label
 * names, the state table, the instance mapping, and the classification
 * tables. The provider against the real client is in
 * tests/integration/gcp-provider.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parseProvidersConfig, ProvidersConfigError } from '../../providers/config.js';
import {
  checkReason,
  classify,
  classifyOperationError,
  QUOTA_OPERATION_CODES,
} from '../../providers/gcp/classify.js';
import { gcpConfigSchema, networkPath } from '../../providers/gcp/config.js';
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
  const err = new Error(
    JSON.stringify({
      error: { code: status, message: 'm', errors: reasons.map((reason) => ({ reason, domain: 'global' })) },
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
  ])('rejects %j naming the field', (block, issue) => {
    expect(issuesOf(block).join('\n')).toContain(issue);
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
});

describe('gcp providerIDs and labels', () => {
  it('round-trips zones/<zone>/instances/<name> and rejects anything else', () => {
    const id = formatProviderId('europe-west1-b', 'proxy-abc');
    expect(id).toBe('zones/europe-west1-b/instances/proxy-abc');
    expect(parseProviderId(id)).toEqual({ zone: 'europe-west1-b', name: 'proxy-abc' });
    for (const bad of [
      '',
      'zones/europe-west1-b/instances/',
      'projects/p/zones/europe-west1-b/instances/proxy-abc',
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
      'europe-west1-b',
    );
    expect(running).toEqual({
      id: 'zones/europe-west1-b/instances/proxy-a',
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
  it.each([
    [apiError(404, 'notFound'), 'NotFound'],
    [apiError(429, 'rateLimitExceeded'), 'QuotaExceeded'],
    [apiError(429), 'QuotaExceeded'],
    [apiError(403, 'quotaExceeded'), 'QuotaExceeded'],
    [apiError(403, 'rateLimitExceeded'), 'QuotaExceeded'],
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
    [apiError(500), true, 'Timeout'],
  ])('check reason for %s (aborted %s) is %s', (err, aborted, reason) => {
    expect(checkReason(err, aborted)).toBe(reason);
  });
});
