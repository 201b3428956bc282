/**
 * The `gcp` provider with the real `@google-cloud/compute` InstancesClient
 * (REST transport) against a wire-level fake Compute API on the loopback
 * (tests/helpers/gcp-fake.ts), authenticated by a fake OAuth2 token: the
 * conformance suite, the insert request field by field, classification of
 * real error bodies, failed insert operations, deletes that are not
 * resubmitted, aggregated lists (paging, server-side filter, unreachable
 * zones), check(), close(), the secret sentinels, the seed's `gcp-eu`
 * config entry, and Proxies going through the real worker and bridge.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InstancesClient, ZoneOperationsClient } from '@google-cloud/compute';
import { Compute, OAuth2Client } from 'google-auth-library';
import { KubeConfig } from '@kubernetes/client-node';
import type { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { createGcActivities } from '../../activities/gc-activities.js';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { ProviderError } from '../../providers/errors.js';
import { gcpConfigSchema, type GcpConfig } from '../../providers/gcp/config.js';
import {
  LABEL_INSTALLATION,
  LABEL_MANAGED,
  LABEL_UID,
  parseProviderId,
} from '../../providers/gcp/instance.js';
import {
  createGcpProvider,
  type GcpProvider,
  type GcpProviderOptions,
} from '../../providers/gcp/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { CreateRequest, Instance } from '../../providers/types.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { FakeCompute } from '../helpers/gcp-fake.js';
import { credentialsWriteFile, userDataParts } from '../helpers/user-data-mime.js';
import { VM_HTPASSWD_PATH } from '../../providers/shared/cloud-init-credentials.js';
import { FakeTokenSource } from '../helpers/gcp-token-source.js';
import { createProxy, deleteProxy, generatedCredentials, getProxy, waitForProxy } from '../helpers/kube.js';
import { eventually, maybeRecord } from '../helpers/temporal.js';
import { stateQuery } from '../../workflows/proxy/messages.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { capturedLogger } from '../helpers/captured-logger.js';

const ROOT = join(import.meta.dirname, '..', '..');
const ZONE = 'europe-west1-b';
const IMAGE = 'projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64';
const PLACEMENT = { zone: ZONE, machineType: 'e2-micro', image: IMAGE };
const live = () => new AbortController().signal;

/** An OAuth2 client holding the fake's token: the real auth path, minus Google's token endpoint. */
function fakeAuth(fake: FakeCompute): OAuth2Client {
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: fake.token, expiry_date: Date.now() + 3_600_000 });
  return auth;
}

function providerFor(
  fake: FakeCompute,
  logger: pino.Logger,
  extra: Partial<Omit<GcpProviderOptions, 'config'>> & { config?: Partial<GcpConfig> } = {},
): GcpProvider {
  const { config, ...rest } = extra;
  return createGcpProvider({
    name: 'gcp-test',
    config: gcpConfigSchema.parse({ project: fake.project, ...fake.connection, ...config }),
    logger,
    authClient: fakeAuth(fake),
    insertWaitMs: 5_000,
    ...rest,
  });
}

/** get until the VM is Running: it boots through STAGING and has its IP only at RUNNING. */
async function runningOf(provider: GcpProvider, id: string): Promise<Instance> {
  return eventually(
    `${id} Running`,
    async () => {
      const got = await provider.get(id, live());
      return got.state === 'Running' ? got : undefined;
    },
    { timeoutMs: 10_000, intervalMs: 25 },
  );
}

async function rejectionOf(p: Promise<unknown>): Promise<ProviderError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    return err as ProviderError;
  }
  throw new Error('expected a rejection, got a value');
}

function request(overrides: Partial<CreateRequest> = {}): CreateRequest {
  const uid = overrides.uid ?? randomUUID();
  return {
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'ns-a',
    proxyName: 'px-a',
    placement: { ...PLACEMENT },
    cloudInit: '#cloud-config\npackages: [squid]\n',
    port: 3128,
    installation: 'inst-a',
    ...overrides,
  };
}

// -- the conformance suite ---------------------------------------------------

let conformanceFake: FakeCompute;
describeProviderConformance('gcp', async () => {
  conformanceFake = await FakeCompute.start('conformance-project');
  const fake = conformanceFake;
  const { logger, lines } = capturedLogger();
  const provider = providerFor(fake, logger);
  const where = (id: string) => {
    const parsed = parseProviderId(id);
    if (!parsed) throw new Error(`not a gcp id: ${id}`);
    return parsed;
  };
  const vm = (id: string) => {
    const { zone, name } = where(id);
    const inst = fake.instance(zone, name);
    if (!inst) throw new Error(`no VM for ${id}`);
    return inst;
  };
  return {
    provider,
    logLines: () => lines,
    placement: PLACEMENT,
    malformedIds: [
      'zones/europe-west1-b/instances/',
      'zones//instances/proxy-a',
      'zones/europe-west1-b/instance/proxy-a',
      'europe-west1-b/proxy-a',
      'zones/Europe/instances/proxy-a',
      'zones/europe-west1-b/instances/proxy-a/extra',
      'zones/europe-west1-b/instances/Proxy_A',
      'projects/conformance-project/zones/europe-west1-b/instances/',
      'projects/Conformance/zones/europe-west1-b/instances/proxy-a',
      'projects/conformance-project/europe-west1-b/instances/proxy-a',
    ],
    // The hooks change the fake's state directly, as the cloud would behind the provider's back.
    hooks: {
      setUnknownState: (id) => {
        vm(id).status = 'SOME_FUTURE_STATUS';
        return Promise.resolve();
      },
      setRunningWithoutIp: (id) => {
        const inst = vm(id);
        inst.status = 'RUNNING';
        inst.natIP = undefined;
        return Promise.resolve();
      },
      createUnmarked: (name) => {
        fake.putInstance(ZONE, name, {});
        return Promise.resolve(`projects/${fake.project}/zones/${ZONE}/instances/${name}`);
      },
      createMarkedWithEmptyUid: (name) => {
        fake.putInstance(ZONE, name, { [LABEL_MANAGED]: 'true', [LABEL_UID]: '' });
        return Promise.resolve(`projects/${fake.project}/zones/${ZONE}/instances/${name}`);
      },
      rewriteMarks: (id, { uid, createdAt }) => {
        const inst = vm(id);
        inst.labels[LABEL_UID] = uid;
        inst.creationTimestamp = createdAt.toISOString();
        return Promise.resolve();
      },
      stall: (id) => {
        const { name } = where(id);
        const release = fake.stall((r) => r.method === 'GET' && r.path.endsWith(`/instances/${name}`));
        return Promise.resolve(() => {
          release();
          return Promise.resolve();
        });
      },
      startDeleteInProgress: (id) => {
        const { zone, name } = where(id);
        fake.beginDelete(zone, name, 60_000);
        return Promise.resolve();
      },
    },
    cleanup: async () => {
      await provider.close();
      await fake.stop();
    },
  };
});

// -- the provider against the fake, call by call ------------------------------

describe('gcp provider against the fake Compute API', () => {
  let fake: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  let provider: GcpProvider;
  /** Every error provoked here, for the sentinel test at the end. */
  const errors: unknown[] = [];
  const sentinel = `cloud-init-sentinel-${randomUUID()}`;
  /** A Proxy's credentials (issue 51): their password must reach no request, log or error. */
  const credentials = { username: 'ep-0123456789abcdef', password: `pw-sentinel-${randomUUID()}` };

  beforeAll(async () => {
    fake = await FakeCompute.start('test-project');
    captured = capturedLogger();
    provider = providerFor(fake, captured.logger);
  });
  afterAll(async () => {
    await provider?.close();
    await fake?.stop();
  });
  afterEach(() => {
    fake.resetTiming();
    fake.unreachableZones.clear();
  });

  it('sends the insert request the seed sends, field by field, with the token and nothing else', async () => {
    const req = request({ cloudInit: `#cloud-config\n# ${sentinel}\nruncmd: [echo hi]\n` });
    const before = fake.requests.length;
    const id = await provider.create(req, live());
    expect(id).toBe(`projects/test-project/zones/${ZONE}/instances/${req.name}`);
    const inserts = fake.requests
      .slice(before)
      .filter((r) => r.method === 'POST' && r.path.endsWith('/instances'));
    expect(inserts).toHaveLength(1);
    const insert = inserts[0]!;
    expect(insert.path).toBe(`/compute/v1/projects/test-project/zones/${ZONE}/instances`);
    expect(insert.authorization).toBe(`Bearer ${fake.token}`);
    const body = insert.body as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(
      [
        'description',
        'disks',
        'labels',
        'machineType',
        'metadata',
        'name',
        'networkInterfaces',
        'tags',
      ].sort(),
    );
    expect(body.name).toBe(req.name);
    expect(body.description).toBe('egress proxy for Proxy ns-a/px-a');
    expect(body.machineType).toBe(`zones/${ZONE}/machineTypes/e2-micro`);
    expect(body.labels).toEqual({
      [LABEL_MANAGED]: 'true',
      [LABEL_UID]: req.uid,
      [LABEL_INSTALLATION]: 'inst-a',
    });
    expect(LABEL_MANAGED).toBe('crawl-example-com-managed');
    expect(body.tags).toEqual({ items: ['proxy-operator'] });
    const disks = body.disks as Record<string, unknown>[];
    expect(disks).toHaveLength(1);
    expect(disks[0]!.boot).toBe(true);
    expect(disks[0]!.autoDelete).toBe(true);
    const init = disks[0]!.initializeParams as Record<string, unknown>;
    // The client serialises unset map fields as {}: those carry nothing.
    const set = Object.keys(init).filter((k) => JSON.stringify(init[k]) !== '{}');
    expect(set.sort()).toEqual(['diskSizeGb', 'sourceImage']);
    expect(init.sourceImage).toBe(IMAGE);
    expect(String(init.diskSizeGb)).toBe('10');
    expect(body.networkInterfaces).toEqual([
      {
        network: 'global/networks/default',
        accessConfigs: [{ name: 'External NAT', type: 'ONE_TO_ONE_NAT' }],
      },
    ]);
    // Project-wide SSH keys blocked by default; user-data byte for byte: the only place the text goes.
    expect(body.metadata).toEqual({
      items: [
        { key: 'block-project-ssh-keys', value: 'true' },
        { key: 'user-data', value: req.cloudInit },
      ],
    });
    expect(insert.rawBody).toContain(sentinel);
    // create watched its operation; the VM boots (STAGING) and gets its IP at RUNNING.
    const got = await runningOf(provider, id);
    expect(got).toMatchObject({ id, state: 'Running', uid: req.uid, installation: 'inst-a' });
    expect(got.ip).toMatch(/^127\.0\.1\.\d+$/);
  });

  it('with credentials: user-data is the cloud-init byte for byte, then the htpasswd part; the password goes nowhere', async () => {
    const req = request({ cloudInit: `#cloud-config\n# ${sentinel}\nruncmd: [echo hi]\n`, credentials });
    const before = fake.requests.length;
    await provider.create(req, live());
    const insert = fake.requests
      .slice(before)
      .find((r) => r.method === 'POST' && r.path.endsWith('/instances'))!;
    const items = (insert.body as { metadata: { items: { key: string; value: string }[] } }).metadata.items;
    expect(items.map((i) => i.key)).toEqual(['block-project-ssh-keys', 'user-data']);
    const userData = items[1]!.value;
    const parts = userDataParts(userData);
    expect(parts.map((p) => p.headers['content-type'])).toEqual([
      'text/plain; charset="us-ascii"',
      'text/cloud-config; charset="us-ascii"',
    ]);
    expect(parts[0]!.raw).toBe(req.cloudInit);
    const htpasswd = credentialsWriteFile(userData, VM_HTPASSWD_PATH);
    expect(htpasswd).toMatchObject({ owner: 'root:proxy', permissions: '0640', defer: true });
    expect(htpasswd.content).toMatch(/^ep-0123456789abcdef:\$apr1\$[./0-9A-Za-z]{1,8}\$[./0-9A-Za-z]{22}\n$/);
    for (const r of fake.requests.slice(before)) expect(r.rawBody).not.toContain(credentials.password);
    expect(JSON.stringify((insert.body as { labels: unknown }).labels)).not.toContain('apr1');
    // The size GCE takes is the whole user-data's: a cloud-init that fits alone may not with the part.
    const near = request({ cloudInit: `#!/bin/sh\n${'x'.repeat(256 * 1024 - 20)}\n`, credentials });
    const big = await rejectionOf(provider.create(near, live()));
    errors.push(big);
    expect(big.errorClass).toBe('Permanent');
    expect(big.message).toMatch(
      /cloudInit with the proxy's credentials part is \d+ bytes; GCE metadata takes at most 262144 bytes/,
    );
  });

  it('uses the configured network, tag and disk size, and sends no user-data without cloud-init', async () => {
    const custom = providerFor(fake, captured.logger, {
      config: { network: 'projects/host-proj/global/networks/shared', networkTag: 'egress', diskSizeGb: 20 },
    });
    try {
      const req = request({ cloudInit: '' });
      const before = fake.requests.length;
      await custom.create(req, live());
      const body = fake.requests.slice(before).find((r) => r.method === 'POST')!.body as Record<
        string,
        unknown
      >;
      expect(body.metadata).toEqual({ items: [{ key: 'block-project-ssh-keys', value: 'true' }] });
      expect(body.tags).toEqual({ items: ['egress'] });
      expect((body.networkInterfaces as { network: string }[])[0]!.network).toBe(
        'projects/host-proj/global/networks/shared',
      );
      expect(
        String(
          ((body.disks as Record<string, unknown>[])[0]!.initializeParams as { diskSizeGb: unknown })
            .diskSizeGb,
        ),
      ).toBe('20');
    } finally {
      await custom.close();
    }
  });

  it.each([
    [{ zone: undefined }, 'placement.zone is required for gcp'],
    [{ machineType: undefined }, 'placement.machineType is required for gcp'],
    [{ image: undefined }, 'placement.image is required for gcp'],
    [{ zone: undefined, image: undefined }, 'placement.zone, placement.image are required for gcp'],
    [{ zone: 'Europe West' }, 'placement.zone "Europe West" is not a GCE zone name'],
    [{ machineType: 'e2 micro' }, 'placement.machineType "e2 micro" is not a GCE machine type name'],
    [{ region: 'us-east1' }, 'placement.zone "europe-west1-b" is not in placement.region "us-east1"'],
  ])(
    'create refuses placement %j before any API call (Permanent, naming the field)',
    async (change, message) => {
      const before = fake.requests.length;
      const err = await rejectionOf(
        provider.create(request({ placement: { ...PLACEMENT, ...change } }), live()),
      );
      errors.push(err);
      expect(err.errorClass).toBe('Permanent');
      expect(err.operation).toBe('create');
      expect(err.message).toContain(message);
      expect(fake.requests.length).toBe(before);
    },
  );

  it('create refuses a uid or installation that is not a GCE label value', async () => {
    const a = await rejectionOf(provider.create(request({ uid: 'UPPER-case' }), live()));
    expect(a.errorClass).toBe('Permanent');
    expect(a.message).toContain('uid is not a GCE label value');
    const b = await rejectionOf(provider.create(request({ installation: 'Has.Dots' }), live()));
    expect(b.errorClass).toBe('Permanent');
    expect(b.message).toContain('installation "Has.Dots" is not a GCE label value');
    errors.push(a, b);
  });

  it.each([
    // A 404 whose body names no resource is not "this VM is gone": cannot tell.
    [404, 'notFound', 'Transient'],
    [429, 'rateLimitExceeded', 'Transient'],
    [403, 'quotaExceeded', 'QuotaExceeded'],
    [403, 'rateLimitExceeded', 'Transient'],
    [403, 'userRateLimitExceeded', 'Transient'],
    [403, 'forbidden', 'Permanent'],
    [403, 'accessNotConfigured', 'Permanent'],
    [401, 'authError', 'Permanent'],
    [400, 'invalid', 'Permanent'],
    [400, 'resourceNotReady', 'Transient'],
    [500, 'backendError', 'Transient'],
    [503, 'backendError', 'Transient'],
  ])(
    'an answer %i %s from get is %s, with the raw status and reason logged at debug',
    async (status, reason, cls) => {
      const id = await provider.create(request(), live());
      const name = parseProviderId(id)!.name;
      fake.failNext((r) => r.method === 'GET' && r.path.endsWith(`/instances/${name}`), {
        status,
        reason,
        message: `canned ${reason} ${sentinel}`,
      });
      const err = await rejectionOf(provider.get(id, live()));
      errors.push(err);
      expect(err.errorClass).toBe(cls);
      expect(err.operation).toBe('get');
      expect(err.provider).toBe('gcp-test');
      expect(err.instance).toBe(id);
      // NotFound is a plain answer (after a look for an unfinished insert); the rest name the status.
      expect(err.message).toContain(
        cls === 'NotFound' ? 'no such VM' : `Compute API answered ${status} ${reason}`,
      );
      const debug = captured.lines
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l.msg === 'Compute API call failed' && l.instance === id);
      expect(debug.at(-1)).toMatchObject({ httpStatus: status, reasons: [reason] });
    },
  );

  it('an insert whose operation fails for capacity is QuotaExceeded from create, with the code', async () => {
    fake.timing.insertMs = 100;
    const stop = fake.failInsertOperations(() => true, ['ZONE_RESOURCE_POOL_EXHAUSTED'], 503);
    try {
      const req = request();
      const err = await rejectionOf(provider.create(req, live()));
      errors.push(err);
      expect(err.errorClass).toBe('QuotaExceeded');
      expect(err.message).toMatch(
        /insert operation operation-\S+ failed: ZONE_RESOURCE_POOL_EXHAUSTED \(HTTP 503\)/,
      );
      // The operation's own message is not copied (it is backend text).
      expect(err.message).not.toContain('The operation failed');
      // The VM never came to be: the next get is NotFound, and create may try again.
      await eventually('the failed VM is gone', () => {
        expect(fake.instance(ZONE, req.name)).toBeUndefined();
        return Promise.resolve(true);
      });
    } finally {
      stop();
    }
  });

  it('an insert whose operation fails on a missing image is Permanent from create, never NotFound', async () => {
    fake.timing.insertMs = 50;
    const stop = fake.failInsertOperations(
      (body) => JSON.stringify(body).includes('no-such-image'),
      ['RESOURCE_NOT_FOUND'],
      404,
    );
    try {
      const err = await rejectionOf(
        provider.create(
          request({ placement: { ...PLACEMENT, image: 'projects/x/global/images/no-such-image' } }),
          live(),
        ),
      );
      errors.push(err);
      expect(err.errorClass).toBe('Permanent');
      expect(err.message).toContain('RESOURCE_NOT_FOUND (HTTP 404); check placement.image');
    } finally {
      stop();
    }
  });

  it('create returns while a slow insert still runs; get reports Provisioning, then Running', async () => {
    fake.timing.insertMs = 60_000;
    const quick = providerFor(fake, captured.logger, { insertWaitMs: 200, operationWaitMs: 100 });
    try {
      const req = request();
      const id = await quick.create(req, live());
      // create gave up watching (its bound) while the operation still ran.
      const op = fake.operations.find((o) => o.targetName === req.name && o.operationType === 'insert')!;
      expect(op.doneAtMs).toBeGreaterThan(Date.now());
      expect(fake.requestsTo('POST', `/operations/${op.name}/wait`).length).toBeGreaterThan(0);
      expect((await quick.get(id, live())).state).toBe('Provisioning');
      fake.finishOperations();
      expect((await quick.get(id, live())).state).toBe('Running');
    } finally {
      await quick.close();
    }
  });

  it('get is Transient, not NotFound, while the insert of a VM it cannot see yet still runs', async () => {
    fake.timing.insertMs = 60_000;
    const quick = providerFor(fake, captured.logger, { insertWaitMs: 100, operationWaitMs: 50 });
    try {
      const req = request();
      const id = await quick.create(req, live());
      // The API has accepted the insert but does not show the VM yet.
      fake.instances.delete(`${ZONE}/${req.name}`);
      const err = await rejectionOf(quick.get(id, live()));
      errors.push(err);
      expect(err.errorClass).toBe('Transient');
      expect(err.message).toMatch(/insert operation operation-\S+ is still running/);
      const listed = fake.requestsTo('GET', `/zones/${ZONE}/operations`).at(-1)!;
      expect(listed.query.get('filter')).toBe('status != DONE');
    } finally {
      await quick.close();
    }
  });

  it('delete is submitted once while its operation runs; get shows the VM until it is gone', async () => {
    const id = await provider.create(request(), live());
    const name = parseProviderId(id)!.name;
    fake.timing.deleteMs = 1_000;
    await provider.delete(id, live());
    await provider.delete(id, live());
    await provider.delete(id, live());
    expect(fake.requestsTo('DELETE', `/instances/${name}`)).toHaveLength(1);
    // STOPPING while the delete runs: the VM still answers (Stopped), never NotFound.
    expect((await provider.get(id, live())).state).toBe('Stopped');
    await eventually('the VM is gone', async () => {
      const err = await rejectionOf(provider.get(id, live()));
      expect(err.errorClass).toBe('NotFound');
      return true;
    });
    await provider.delete(id, live());
    // Gone: one more DELETE, answered 404, which is success.
    expect(fake.requestsTo('DELETE', `/instances/${name}`)).toHaveLength(2);
  });

  it('a delete refused as resourceNotReady (a race with another delete) is Transient', async () => {
    const id = await provider.create(request(), live());
    const name = parseProviderId(id)!.name;
    fake.failNext((r) => r.method === 'DELETE' && r.path.endsWith(`/instances/${name}`), {
      status: 400,
      reason: 'resourceNotReady',
    });
    const err = await rejectionOf(provider.delete(id, live()));
    errors.push(err);
    expect(err.errorClass).toBe('Transient');
  });

  it('listByTag is one filtered aggregated list, paged, with unreachable zones left out and logged', async () => {
    const pager = providerFor(fake, captured.logger, { listPageSize: 2 });
    try {
      const mine = [];
      for (let i = 0; i < 3; i++) mine.push(await pager.create(request(), live()));
      const other = 'us-central1-a';
      const there = await pager.create(request({ placement: { ...PLACEMENT, zone: other } }), live());
      fake.putInstance(ZONE, `unmarked-${randomUUID().slice(0, 8)}`, {});
      const expected = [...fake.instances.values()].filter((i) => i.labels[LABEL_MANAGED] === 'true').length;

      const before = fake.requests.length;
      const all = await pager.listByTag(live());
      const calls = fake.requests.slice(before).filter((r) => r.path.endsWith('/aggregated/instances'));
      expect(all).toHaveLength(expected);
      expect(all.map((i) => i.id)).toEqual(expect.arrayContaining([...mine, there]));
      expect(calls).toHaveLength(Math.ceil(expected / 2));
      for (const c of calls) {
        expect(c.query.get('filter')).toBe('labels.crawl-example-com-managed = true');
        expect(c.query.get('returnPartialSuccess')).toBe('true');
        expect(c.query.get('maxResults')).toBe('2');
      }

      fake.unreachableZones.add(other);
      const partial = await pager.listByTag(live());
      expect(partial.map((i) => i.id)).not.toContain(there);
      expect(partial.map((i) => i.id)).toEqual(expect.arrayContaining(mine));
      const warned = captured.lines
        .map((l) => JSON.parse(l) as { msg?: string; unreachable?: string[] })
        .filter((l) => l.msg?.startsWith('list: zones left out'));
      expect(warned.at(-1)?.unreachable).toEqual([`zones/${other}`]);
    } finally {
      await pager.close();
    }
  });

  it('check is one aggregated-list page with maxResults=1, and maps failures to reasons', async () => {
    const before = fake.requests.length;
    const ok = await provider.check(live());
    const calls = fake.requests.slice(before);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.path).toBe('/compute/v1/projects/test-project/aggregated/instances');
    expect(calls[0]!.query.get('maxResults')).toBe('1');
    expect(calls[0]!.query.get('filter')).toBe('labels.crawl-example-com-managed = true');
    expect(ok).toEqual([
      expect.objectContaining({
        name: 'test-project',
        address: fake.endpoint,
        ready: true,
        reason: 'Reachable',
      }),
    ]);
    for (const [status, reason, want] of [
      [403, 'forbidden', 'Forbidden'],
      [403, 'accessNotConfigured', 'Forbidden'],
      [401, 'authError', 'Unauthorized'],
      [500, 'backendError', 'APIError'],
    ] as const) {
      fake.failNext((r) => r.path.endsWith('/aggregated/instances'), { status, reason });
      const [t] = await provider.check(live());
      expect(t).toMatchObject({ ready: false, reason: want });
      expect(t!.message).toContain(`answered ${status} ${reason}`);
    }
    const release = fake.stall((r) => r.path.endsWith('/aggregated/instances'));
    try {
      const [t] = await provider.check(AbortSignal.timeout(200));
      expect(t).toMatchObject({ ready: false, reason: 'Timeout' });
    } finally {
      release();
    }
  });

  it('check reuses a listByTag that just succeeded (no call), until a call fails or the list ages out', async () => {
    const reusing = providerFor(fake, captured.logger);
    // No read budget: only checkReuseMs keeps the list for check().
    const ageing = providerFor(fake, captured.logger, {
      checkReuseMs: 0,
      config: { listCallsPerVmHour: 0 },
    });
    try {
      const id = await reusing.create(request(), live());
      await reusing.listByTag(live());
      const before = fake.requests.length;
      const [t] = await reusing.check(live());
      expect(t).toMatchObject({ ready: true, reason: 'Reachable' });
      expect(t!.details?.from).toMatch(/^the aggregated list \d+ s ago$/);
      expect(fake.requests.length).toBe(before);
      // A failed Compute call ends the reuse: the next check asks.
      fake.failNext((r) => r.method === 'GET' && r.path.endsWith(parseProviderId(id)!.name), {
        status: 503,
        reason: 'backendError',
      });
      await rejectionOf(reusing.get(id, live()));
      const asked = fake.requests.length;
      expect((await reusing.check(live()))[0]).toMatchObject({ ready: true });
      expect(fake.requests.slice(asked).map((r) => r.query.get('maxResults'))).toEqual(['1']);
      // Aged out (checkReuseMs 0): every check asks.
      await ageing.listByTag(live());
      const aged = fake.requests.length;
      await ageing.check(live());
      expect(fake.requests.length).toBe(aged + 1);
    } finally {
      await reusing.close();
      await ageing.close();
    }
  });

  it('check answers Unreachable when nothing listens, and a wrong token is Unauthorized', async () => {
    const gone = await FakeCompute.start('test-project');
    const connection = gone.connection;
    await gone.stop();
    const nowhere = createGcpProvider({
      name: 'nowhere',
      config: gcpConfigSchema.parse({ project: 'test-project', ...connection }),
      logger: captured.logger,
      authClient: fakeAuth(fake),
    });
    const [t] = await nowhere.check(live());
    expect(t).toMatchObject({ name: 'test-project', ready: false, reason: 'Unreachable' });
    await nowhere.close();

    const stranger = new OAuth2Client();
    stranger.setCredentials({ access_token: 'not-the-token', expiry_date: Date.now() + 3_600_000 });
    const wrong = createGcpProvider({
      name: 'wrong',
      config: gcpConfigSchema.parse({ project: 'test-project', ...fake.connection }),
      logger: captured.logger,
      authClient: stranger,
    });
    const [u] = await wrong.check(live());
    expect(u).toMatchObject({ ready: false, reason: 'Unauthorized' });
    await wrong.close();
  });

  it('close() closes both SDK clients, and the provider builds fresh ones on the next call', async () => {
    const closing = providerFor(fake, captured.logger);
    const instancesClose = vi.spyOn(InstancesClient.prototype, 'close');
    const operationsClose = vi.spyOn(ZoneOperationsClient.prototype, 'close');
    try {
      await closing.check(live());
      await closing.close();
      expect(instancesClose).toHaveBeenCalledTimes(1);
      expect(operationsClose).toHaveBeenCalledTimes(1);
      await closing.close();
      expect(instancesClose).toHaveBeenCalledTimes(1);
      expect((await closing.check(live()))[0]!.ready).toBe(true);
      await closing.close();
      expect(instancesClose).toHaveBeenCalledTimes(2);
    } finally {
      instancesClose.mockRestore();
      operationsClose.mockRestore();
    }
  });

  // Last: it inspects everything the tests above provoked.
  it('no cloud-init text and no token in any log line or error', () => {
    expect(captured.lines.length).toBeGreaterThan(0);
    expect(errors.length).toBeGreaterThan(10);
    const secrets = [sentinel, fake.token, credentials.password, 'apr1'];
    for (const line of captured.lines) for (const s of secrets) expect(line).not.toContain(s);
    for (const err of errors) {
      const e = err as ProviderError;
      for (const text of [
        String(e),
        e.message,
        e.stack ?? '',
        JSON.stringify(e),
        JSON.stringify(e.cause ?? null),
      ]) {
        for (const s of secrets) expect(text).not.toContain(s);
      }
    }
    // The sentinel did go where it belongs: into user-data on the wire.
    expect(fake.requests.some((r) => r.rawBody.includes(sentinel))).toBe(true);
  });
});

// -- errors by source: a token source's failure is never Compute's answer -------

describe('gcp provider: errors classified by their source', () => {
  let fake: FakeCompute;
  let tokens: FakeTokenSource;
  let captured: ReturnType<typeof capturedLogger>;
  let provider: GcpProvider;
  const dir = mkdtempSync(join(tmpdir(), 'ep-gcp-creds-'));
  const saved = {
    GCE_METADATA_HOST: process.env.GCE_METADATA_HOST,
    GOOGLE_APPLICATION_CREDENTIALS: process.env.GOOGLE_APPLICATION_CREDENTIALS,
    METADATA_SERVER_DETECTION: process.env.METADATA_SERVER_DETECTION,
  };
  const errors: unknown[] = [];

  beforeAll(async () => {
    fake = await FakeCompute.start('test-project');
    tokens = await FakeTokenSource.start(fake.token);
    // The library's metadata-server credential talks to our loopback server; nothing else is probed.
    process.env.GCE_METADATA_HOST = tokens.host;
    process.env.METADATA_SERVER_DETECTION = 'none';
    captured = capturedLogger();
    provider = providerFor(fake, captured.logger, { authClient: new Compute() });
  });
  afterAll(async () => {
    await provider?.close();
    await fake?.stop();
    await tokens?.stop();
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(dir, { recursive: true, force: true });
  });
  afterEach(() => {
    tokens.metadata = { token: fake.token };
    fake.missing.clear();
    fake.missingZones.clear();
    fake.denyExternalIp = false;
  });

  it('a token source answering 404 during deletion: delete and get never say gone, and the VM stays', async () => {
    const req = request();
    const id = await provider.create(req, live());
    expect(tokens.hits.filter((h) => h.includes('/service-accounts/default/token')).length).toBeGreaterThan(
      0,
    );
    // The node's metadata server has no service account now: every token request is 404.
    tokens.metadata = { status: 404, body: 'Not Found' };
    const before = fake.requests.length;
    const del = await rejectionOf(provider.delete(id, live()));
    const got = await rejectionOf(provider.get(id, live()));
    errors.push(del, got);
    for (const err of [del, got]) {
      expect(err.errorClass).toBe('Transient');
      expect(err.message).toContain(
        "could not obtain an access token for the metadata server's service account (token source answered 404)",
      );
      expect(err.message).not.toContain('no such VM');
    }
    // Nothing reached Compute: no DELETE, no operations listing; the VM is still there.
    expect(fake.requests.length).toBe(before);
    // Booting or running, never stopping: no delete reached it.
    expect(fake.instance(ZONE, req.name)?.status).toMatch(/^(STAGING|RUNNING)$/);
    // The provider health check says the same, as a credentials problem.
    const [t] = await provider.check(live());
    expect(t).toMatchObject({ ready: false, reason: 'Unauthorized' });
    expect(t!.message).toContain('credentials: could not obtain an access token');
    // The token source recovers: the same provider deletes the VM.
    tokens.metadata = { token: fake.token };
    await provider.delete(id, live());
    expect(fake.requestsTo('DELETE', `/instances/${req.name}`)).toHaveLength(1);
  });

  it('Application Default Credentials refused with invalid_grant: Permanent, naming the credential', async () => {
    const key = join(dir, 'external-account.json');
    writeFileSync(join(dir, 'subject-token'), 'subject-token-sentinel');
    writeFileSync(key, JSON.stringify(tokens.externalAccount(join(dir, 'subject-token'))));
    process.env.GOOGLE_APPLICATION_CREDENTIALS = key;
    const adc = providerFor(fake, captured.logger, { authClient: undefined });
    try {
      const id = `zones/${ZONE}/instances/${instanceNameFromUid(randomUUID())}`;
      const stsBefore = tokens.hits.filter((h) => h === 'POST /v1/token').length;
      const before = fake.requests.length;
      // One call at a time: a rejection must never wait unobserved.
      for (const call of [
        () => adc.get(id, live()),
        () => adc.delete(id, live()),
        () => adc.create(request(), live()),
      ]) {
        const err = await rejectionOf(call());
        errors.push(err);
        expect(err.errorClass).toBe('Permanent');
        expect(err.message).toContain(
          `the token endpoint refused external account credentials (key file ${key}) (invalid_grant)`,
        );
        // The token endpoint's own text is never copied.
        expect(err.message).not.toContain('sentinel');
      }
      // The real library asked our token endpoint; Compute never saw a request.
      expect(tokens.hits.filter((h) => h === 'POST /v1/token').length).toBeGreaterThan(stsBefore);
      expect(fake.requests.length).toBe(before);
      const [t] = await adc.check(live());
      expect(t).toMatchObject({ ready: false, reason: 'Unauthorized' });
      expect(t!.message).toContain('(invalid_grant)');
    } finally {
      await adc.close();
      delete process.env.GOOGLE_APPLICATION_CREDENTIALS;
    }
  });

  it('a key file that does not parse, or a private key that does not: Permanent, naming the key', async () => {
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{"type": "service_account", ');
    const badPem = join(dir, 'bad-pem.json');
    writeFileSync(
      badPem,
      JSON.stringify({
        type: 'service_account',
        project_id: 'test-project',
        private_key_id: 'k1',
        private_key: '-----BEGIN PRIVATE KEY-----\nnot-a-key-sentinel\n-----END PRIVATE KEY-----\n',
        client_email: 'proxies@test-project.iam.gserviceaccount.com',
        client_id: '1',
        // Never reached: signing fails first (and the library's JWT path ignores token_uri anyway).
        token_uri: `http://${tokens.host}/v1/token`,
      }),
    );
    for (const [file, want] of [
      [broken, `the credentials key file ${broken} does not parse as a Google credential`],
      [
        badPem,
        `the private key of service account proxies@test-project.iam.gserviceaccount.com (key file ${badPem}) does not parse`,
      ],
    ] as const) {
      process.env.GOOGLE_APPLICATION_CREDENTIALS = file;
      const adc = providerFor(fake, captured.logger, { authClient: undefined });
      try {
        const err = await rejectionOf(adc.get(`zones/${ZONE}/instances/proxy-x`, live()));
        errors.push(err);
        expect(err.errorClass).toBe('Permanent');
        expect(err.message).toContain(want);
        expect(err.message).not.toContain('sentinel');
      } finally {
        await adc.close();
        delete process.env.GOOGLE_APPLICATION_CREDENTIALS;
      }
    }
  });

  it('no credentials at all: every call is Transient naming what is missing, and nothing is left unobserved', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    const home = process.env.HOME;
    process.env.HOME = dir; // no ~/.config/gcloud here
    delete process.env.GOOGLE_APPLICATION_CREDENTIALS;
    const adc = providerFor(fake, captured.logger, { authClient: undefined });
    try {
      for (const call of [
        () => adc.get(`zones/${ZONE}/instances/proxy-x`, live()),
        () => adc.delete(`zones/${ZONE}/instances/proxy-x`, live()),
        () => adc.create(request(), live()),
        () => adc.listByTag(live()),
      ]) {
        const err = await rejectionOf(call());
        errors.push(err);
        expect(err.errorClass).toBe('Transient');
        expect(err.message).toContain(
          'no Google credentials found: Application Default Credentials are not set up',
        );
      }
      const [t] = await adc.check(live());
      expect(t).toMatchObject({ ready: false, reason: 'Unauthorized' });
      // An unobserved rejection would surface by the next macrotask turns; give it a few.
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      process.env.HOME = home;
      await adc.close();
    }
  });

  it("get and delete: a 404 for the project or the zone is Permanent, never NotFound (and never 'already gone')", async () => {
    const elsewhere = providerFor(fake, captured.logger, {
      authClient: fakeAuth(fake),
      config: { project: 'no-such-project' },
    });
    try {
      const id = `zones/${ZONE}/instances/proxy-x`;
      for (const call of [() => elsewhere.get(id, live()), () => elsewhere.delete(id, live())]) {
        const err = await rejectionOf(call());
        errors.push(err);
        expect(err.errorClass).toBe('Permanent');
        expect(err.message).toContain('Compute API answered 404 notFound for the project; check gcp.project');
      }
    } finally {
      await elsewhere.close();
    }
    fake.missingZones.add('europe-west9-z');
    const inNoZone = 'zones/europe-west9-z/instances/proxy-x';
    for (const call of [() => provider.get(inNoZone, live()), () => provider.delete(inNoZone, live())]) {
      const err = await rejectionOf(call());
      errors.push(err);
      expect(err.errorClass).toBe('Permanent');
      expect(err.message).toContain('404 notFound for the zone; check placement.zone');
    }
    // Compute's own 404 for the VM itself is still NotFound (get) and success (delete).
    const gone = `zones/${ZONE}/instances/${instanceNameFromUid(randomUUID())}`;
    expect((await rejectionOf(provider.get(gone, live()))).errorClass).toBe('NotFound');
    await provider.delete(gone, live());
  });

  it('insert: a missing image is a synchronous 404, Permanent with the field named; no operation is made', async () => {
    const image = 'projects/x/global/images/no-such-image';
    fake.missing.add(image);
    const opsBefore = fake.operations.length;
    const err = await rejectionOf(provider.create(request({ placement: { ...PLACEMENT, image } }), live()));
    errors.push(err);
    expect(err.errorClass).toBe('Permanent');
    expect(err.operation).toBe('create');
    expect(err.message).toContain('Compute API answered 404 notFound for the image; check placement.image');
    expect(fake.operations.length).toBe(opsBefore);
    fake.missing.add('projects/test-project/global/networks/default');
    const net = await rejectionOf(provider.create(request(), live()));
    expect(net.message).toContain('404 notFound for the network; check gcp.network');
  });

  it('insert refused by an organization policy (412 conditionNotMet): Permanent, naming the constraint', async () => {
    fake.denyExternalIp = true;
    const err = await rejectionOf(provider.create(request(), live()));
    errors.push(err);
    expect(err.errorClass).toBe('Permanent');
    expect(err.message).toContain(
      'Compute API answered 412 conditionNotMet: refused by organization policy constraints/compute.vmExternalIpAccess',
    );
    // The body's own text (a project number, the instance path) is not copied.
    expect(err.message).not.toContain('123456789012');
  });

  it('insert rate-limited (403 rateLimitExceeded, 429): Transient, retried with backoff', async () => {
    for (const [status, reason] of [
      [403, 'rateLimitExceeded'],
      [403, 'userRateLimitExceeded'],
      [429, 'rateLimitExceeded'],
    ] as const) {
      fake.failNext((r) => r.method === 'POST' && r.path.endsWith('/instances'), { status, reason });
      const err = await rejectionOf(provider.create(request(), live()));
      errors.push(err);
      expect(err.errorClass).toBe('Transient');
      expect(err.message).toContain(
        `Compute API answered ${status} ${reason} (rate limited; retried with backoff)`,
      );
    }
  });

  // Last: everything provoked above.
  it('no token, key text or token-endpoint text in any error or log line', () => {
    expect(errors.length).toBeGreaterThan(10);
    const secrets = [fake.token, 'sentinel', 'not-a-key', 'BEGIN PRIVATE KEY'];
    for (const line of captured.lines) for (const s of secrets) expect(line).not.toContain(s);
    for (const err of errors) {
      const e = err as ProviderError;
      for (const text of [String(e), JSON.stringify(e), JSON.stringify(e.cause ?? null)]) {
        for (const s of secrets) expect(text).not.toContain(s);
      }
    }
  });
});

// -- the seed's config entry, loaded as it is, run against the fake ------------

/** The seed's sample providers config (tests/fixtures/seed-providers-config.yaml, copied verbatim). */
function seedGcpEntry(): string {
  const text = readFileSync(join(ROOT, 'tests/fixtures/seed-providers-config.yaml'), 'utf8');
  const doc = parseYaml(text) as { providers: { name: string }[] };
  const entry = doc.providers.find((p) => p.name === 'gcp-eu');
  if (!entry) throw new Error('the seed file has no gcp-eu entry');
  return stringifyYaml({ providers: [entry] });
}

// -- the insert settings of the provider config (issue 26, item 3) -----------

describe('gcp insert settings: subnetwork, disk type, Spot, SSH keys, internal-only, service account', () => {
  let fake: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  const errors: unknown[] = [];
  beforeAll(async () => {
    fake = await FakeCompute.start('settings-project');
    captured = capturedLogger();
  });
  afterAll(async () => {
    await fake?.stop();
  });

  /** Creates one VM with these config fields and returns the insert body as the fake received it, and the id. */
  async function insertWith(
    config: Partial<GcpConfig>,
    req: CreateRequest = request(),
  ): Promise<{ body: Record<string, unknown>; id: string; provider: GcpProvider }> {
    const provider = providerFor(fake, captured.logger, {
      config: gcpConfigSchema.parse({ project: fake.project, ...config }),
    });
    const before = fake.insertBodies().length;
    const id = await provider.create(req, live());
    const bodies = fake.insertBodies().slice(before);
    expect(bodies).toHaveLength(1);
    return { body: bodies[0]!, id, provider };
  }
  const nicOf = (body: Record<string, unknown>) => (body.networkInterfaces as Record<string, unknown>[])[0]!;
  const initOf = (body: Record<string, unknown>) =>
    (body.disks as { initializeParams: Record<string, unknown> }[])[0]!.initializeParams;

  it('defaults: block-project-ssh-keys "true", an external IP, no scheduling, no service account, no disk type', async () => {
    const { body, provider } = await insertWith({});
    try {
      expect((body.metadata as { items: { key: string; value: string }[] }).items[0]).toEqual({
        key: 'block-project-ssh-keys',
        value: 'true',
      });
      expect(nicOf(body)).toEqual({
        network: 'global/networks/default',
        accessConfigs: [{ name: 'External NAT', type: 'ONE_TO_ONE_NAT' }],
      });
      expect(body.scheduling).toBeUndefined();
      expect(body.serviceAccounts).toBeUndefined();
      expect(initOf(body).diskType).toBeUndefined();
    } finally {
      await provider.close();
    }
  });

  it('blockProjectSshKeys: false sends no block-project-ssh-keys item', async () => {
    const { body, provider } = await insertWith({ blockProjectSshKeys: false });
    try {
      const items = (body.metadata as { items: { key: string }[] }).items;
      expect(items.map((i) => i.key)).toEqual(['user-data']);
    } finally {
      await provider.close();
    }
  });

  it.each([
    ['regions/europe-west1/subnetworks/proxies'],
    ['projects/host-project/regions/europe-west1/subnetworks/shared'],
    ['https://www.googleapis.com/compute/v1/projects/host-project/regions/europe-west1/subnetworks/shared'],
  ])('subnetwork %s goes on the NIC as given, without the network; the VM runs', async (subnetwork) => {
    const { body, id, provider } = await insertWith({ subnetwork });
    try {
      expect(nicOf(body)).toEqual({
        subnetwork,
        accessConfigs: [{ name: 'External NAT', type: 'ONE_TO_ONE_NAT' }],
      });
      expect(await runningOf(provider, id)).toMatchObject({ state: 'Running' });
    } finally {
      await provider.close();
    }
  });

  it('a subnetwork that does not exist is a synchronous 404, Permanent naming gcp.subnetwork', async () => {
    fake.missing.add('projects/host-project/regions/europe-west1/subnetworks/gone');
    const provider = providerFor(fake, captured.logger, {
      config: { subnetwork: 'projects/host-project/regions/europe-west1/subnetworks/gone' },
    });
    try {
      const err = await rejectionOf(provider.create(request(), live()));
      errors.push(err);
      expect(err.errorClass).toBe('Permanent');
      expect(err.message).toContain('for the subnetwork; check gcp.subnetwork');
    } finally {
      await provider.close();
    }
  });

  it("a zone outside the subnetwork's region is refused before any API call, naming both", async () => {
    const provider = providerFor(fake, captured.logger, {
      config: { subnetwork: 'regions/us-central1/subnetworks/proxies' },
    });
    try {
      const before = fake.requests.length;
      const err = await rejectionOf(provider.create(request(), live()));
      errors.push(err);
      expect(err.errorClass).toBe('Permanent');
      expect(err.message).toContain(
        'placement.zone "europe-west1-b" is not in region "us-central1" of gcp.subnetwork',
      );
      expect(fake.requests.length).toBe(before);
    } finally {
      await provider.close();
    }
  });

  it('diskType is sent as the zonal disk type path; a missing one is Permanent naming gcp.diskType', async () => {
    const { body, provider } = await insertWith({ diskType: 'pd-balanced' });
    await provider.close();
    expect(initOf(body).diskType).toBe(`zones/${ZONE}/diskTypes/pd-balanced`);
    fake.missing.add(`projects/${fake.project}/zones/${ZONE}/diskTypes/pd-nope`);
    const bad = providerFor(fake, captured.logger, { config: { diskType: 'pd-nope' } });
    try {
      const err = await rejectionOf(bad.create(request(), live()));
      errors.push(err);
      expect(err.errorClass).toBe('Permanent');
      expect(err.message).toContain('for the disk type; check gcp.diskType');
    } finally {
      await bad.close();
    }
  });

  it.each([
    [undefined, 'DELETE'],
    ['DELETE', 'DELETE'],
    ['STOP', 'STOP'],
  ] as const)(
    'provisioningModel SPOT (instanceTerminationAction %s) sends the scheduling GCE requires of Spot',
    async (action, sent) => {
      const { body, id, provider } = await insertWith({
        provisioningModel: 'SPOT',
        ...(action ? { instanceTerminationAction: action } : {}),
      });
      try {
        expect(body.scheduling).toEqual({
          provisioningModel: 'SPOT',
          instanceTerminationAction: sent,
          automaticRestart: false,
          onHostMaintenance: 'TERMINATE',
        });
        // The fake refuses a Spot VM that may restart or migrate, as GCE does: this one ran.
        expect(await runningOf(provider, id)).toMatchObject({ state: 'Running' });
      } finally {
        await provider.close();
      }
    },
  );

  it('internalOnly: no access config, so an org policy against external IPs passes; the address is the internal IP', async () => {
    fake.denyExternalIp = true;
    try {
      const { body, id, provider } = await insertWith({ internalOnly: true });
      try {
        expect(nicOf(body)).toEqual({ network: 'global/networks/default' });
        const got = await runningOf(provider, id);
        const { name } = parseProviderId(id)!;
        expect(got.state).toBe('Running');
        expect(got.ip).toBe(fake.instance(ZONE, name)!.networkIP);
        expect(got.ip).toMatch(/^127\.0\.2\.\d+$/);
        // The same project with an external IP is refused: the policy was in force.
        const external = providerFor(fake, captured.logger);
        try {
          const err = await rejectionOf(external.create(request(), live()));
          errors.push(err);
          expect(err.message).toContain('constraints/compute.vmExternalIpAccess');
        } finally {
          await external.close();
        }
      } finally {
        await provider.close();
      }
    } finally {
      fake.denyExternalIp = false;
    }
  });

  it('serviceAccount puts that identity on the VM, with its scopes (none by default)', async () => {
    const email = 'proxy-vm@settings-project.iam.gserviceaccount.com';
    const { body, provider } = await insertWith({
      serviceAccount: { email, scopes: ['https://www.googleapis.com/auth/logging.write'] },
    });
    await provider.close();
    expect(body.serviceAccounts).toEqual([
      { email, scopes: ['https://www.googleapis.com/auth/logging.write'] },
    ]);
    const defaults = await insertWith({ serviceAccount: { email } as never });
    await defaults.provider.close();
    expect(defaults.body.serviceAccounts).toEqual([
      { email, scopes: ['https://www.googleapis.com/auth/cloud-platform'] },
    ]);
  });

  it('no cloud-init text in any error or log line of these tests', () => {
    const text = [...errors.map((e) => String((e as Error).message)), ...captured.lines].join('\n');
    expect(text).not.toContain('packages: [squid]');
    expect(text).not.toContain(fake.token);
  });
});

// -- the project in the providerID (issue 26, item 5) -----------------------

describe('gcp: the project is part of the providerID', () => {
  let fake: FakeCompute;
  let projectB: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  beforeAll(async () => {
    fake = await FakeCompute.start('project-alpha');
    projectB = fake.addProject('project-bravo');
    captured = capturedLogger();
  });
  afterAll(async () => {
    await fake?.stop();
  });
  const inProject = (project: string) => providerFor(fake, captured.logger, { config: { project } });

  it('a VM made in project A is read and deleted in A after gcp.project is switched to B; nothing is made in B', async () => {
    const a = inProject('project-alpha');
    const req = request();
    const id = await a.create(req, live());
    await runningOf(a, id);
    await a.close();
    expect(id).toBe(`projects/project-alpha/zones/${ZONE}/instances/${req.name}`);
    fake.timing.deleteMs = 60_000;
    const b = inProject('project-bravo');
    try {
      const before = fake.requests.length;
      // Still Running where it is: the control plane has no reason to create it again.
      expect(await b.get(id, live())).toMatchObject({ id, state: 'Running', uid: req.uid });
      await b.delete(id, live());
      const paths = fake.requests.slice(before).map((r) => `${r.method} ${r.path}`);
      expect(paths.length).toBeGreaterThan(0);
      for (const p of paths) expect(p).toContain('/projects/project-alpha/');
      expect(fake.instance(ZONE, req.name)?.status).toBe('STOPPING');
      // B's list now covers A too, where a Proxy still references a VM (GC and the sweep see it there).
      expect((await b.listByTag(live())).map((i) => i.id)).toEqual([id]);
      fake.finishOperations();
      expect((await rejectionOf(b.get(id, live()))).errorClass).toBe('NotFound');
      expect(fake.instance(ZONE, req.name)).toBeUndefined();
      // Nothing was ever inserted in, or asked of, project B.
      expect(fake.insertBodies('project-bravo')).toEqual([]);
      expect(projectB.instances.size).toBe(0);
      expect(
        fake.requests.filter((r) => r.path.includes('/projects/project-bravo/') && r.method !== 'GET'),
      ).toEqual([]);
    } finally {
      fake.resetTiming();
      await b.close();
    }
  });

  it('listByTag lists every project a providerID named: an orphan left there is listed for GC; one that cannot be listed is left out', async () => {
    const a = inProject('project-alpha');
    const req = request();
    const id = await a.create(req, live());
    await a.close();
    // A VM of ours in A that no Proxy references any more (its Proxy deleted while B was configured).
    const orphan = fake.putInstance(ZONE, `orphan-${randomUUID().slice(0, 8)}`, {
      [LABEL_MANAGED]: 'true',
      [LABEL_UID]: randomUUID(),
      [LABEL_INSTALLATION]: 'inst-a',
    });
    const b = inProject('project-bravo');
    try {
      // Nothing names A yet: only B is listed.
      const before = fake.requests.length;
      expect(await b.listByTag(live())).toEqual([]);
      expect(fake.requests.slice(before).map((r) => r.path)).toEqual([
        '/compute/v1/projects/project-bravo/aggregated/instances',
      ]);
      // A Proxy's get names A (as the sweep's first "gone" for it would make happen); the
      // list kept from before (B only) no longer answers the sweep.
      await b.get(id, live());
      const listed = (await b.listByTag(live(), { reuse: { withinMs: 0 } })).map((i) => i.id);
      expect(listed).toEqual(
        expect.arrayContaining([id, `projects/project-alpha/zones/${ZONE}/instances/${orphan.name}`]),
      );
      // A project named by an ID that cannot be listed (gone, or no access): left out, B still listed, a warning.
      await rejectionOf(b.get(`projects/project-gone/zones/${ZONE}/instances/proxy-x`, live()));
      projectB.putInstance(ZONE, `mine-${randomUUID().slice(0, 8)}`, {
        [LABEL_MANAGED]: 'true',
        [LABEL_UID]: randomUUID(),
      });
      const again = await b.listByTag(live());
      expect(again.filter((i) => i.id.startsWith('projects/project-bravo/'))).toHaveLength(1);
      expect(again.map((i) => i.id)).toEqual(expect.arrayContaining(listed));
      expect(
        captured.lines.some(
          (l) => l.includes('"project":"project-gone"') && l.includes('could not be listed'),
        ),
      ).toBe(true);
    } finally {
      await b.close();
      fake.instances.delete(`${ZONE}/${orphan.name}`);
    }
  });

  it('an old providerID (no project) means the configured project, for get and delete', async () => {
    const a = inProject('project-alpha');
    try {
      const req = request();
      await a.create(req, live());
      const old = `zones/${ZONE}/instances/${req.name}`;
      expect(await runningOf(a, old)).toMatchObject({ state: 'Running', uid: req.uid });
      await a.delete(old, live());
      fake.finishOperations();
      expect((await rejectionOf(a.get(old, live()))).errorClass).toBe('NotFound');
    } finally {
      await a.close();
    }
  });

  it('a providerID naming a project the credentials cannot reach is Permanent from get and delete, never gone', async () => {
    const a = inProject('project-alpha');
    try {
      const id = `projects/project-charlie/zones/${ZONE}/instances/proxy-x`;
      for (const call of [() => a.get(id, live()), () => a.delete(id, live())]) {
        const err = await rejectionOf(call());
        expect(err.errorClass).toBe('Permanent');
        expect(err.message).toContain('404 notFound for the project');
        expect(err.message).toContain(
          'the providerID names project project-charlie, the configured gcp.project is project-alpha',
        );
      }
    } finally {
      await a.close();
    }
  });
});

// -- the delete poll's cost (issue 26, item 7) ------------------------------

// -- the fake behaves like GCE: TLS, time, validation, GCE's own changes ------

describe('gcp against a fake that behaves like GCE', () => {
  let fake: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  let provider: GcpProvider;
  beforeAll(async () => {
    fake = await FakeCompute.start('gce-project');
    captured = capturedLogger();
    provider = providerFor(fake, captured.logger);
  });
  afterAll(async () => {
    await provider?.close();
    await fake?.stop();
  });
  afterEach(() => {
    fake.resetTiming();
    fake.unreachableZones.clear();
  });
  const nameOf = (id: string) => parseProviderId(id)!.name;

  it('TLS: verified against gcp.endpointCaFile; without it the certificate is refused and nothing is served', async () => {
    const before = fake.requests.length;
    const untrusting = providerFor(fake, captured.logger, {
      config: { endpointCaFile: undefined },
    });
    try {
      const [t] = await untrusting.check(live());
      expect(t).toMatchObject({ ready: false, reason: 'Unreachable' });
      const err = await rejectionOf(untrusting.listByTag(live()));
      expect(err.errorClass).toBe('Transient');
      expect(err.message).toMatch(
        /Compute API unreachable \((?:SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)\)/,
      );
      expect(fake.requests.length).toBe(before);
    } finally {
      await untrusting.close();
    }
    const missingCa = providerFor(fake, captured.logger, {
      config: { endpointCaFile: join(tmpdir(), `no-such-ca-${randomUUID()}.pem`) },
    });
    try {
      const err = await rejectionOf(missingCa.listByTag(live()));
      expect(err.errorClass).toBe('Transient');
      expect(err.message).toMatch(/gcp\.endpointCaFile \S+no-such-ca-\S+ cannot be read \(ENOENT\)/);
    } finally {
      await missingCa.close();
    }
    // With the CA: served.
    expect((await provider.check(live()))[0]).toMatchObject({ ready: true });
  });

  it('a new VM: get 404s for a moment (Transient, its insert runs), boots through STAGING, and has its IP only at RUNNING', async () => {
    Object.assign(fake.timing, { insertMs: 400, visibleAfterMs: 150, runningLagMs: 100 });
    // create returns at once (it does not watch the insert), as after a worker restart.
    const quick = providerFor(fake, captured.logger, { insertWaitMs: 0 });
    try {
      const id = await quick.create(request(), live());
      const first = await rejectionOf(quick.get(id, live()));
      expect(first.errorClass).toBe('Transient');
      expect(first.message).toMatch(/insert operation operation-\S+ is still running/);
      const seen: string[] = [];
      const running = await eventually(
        'Running',
        async () => {
          const got = await quick.get(id, live()).catch(() => undefined);
          if (got === undefined) return undefined;
          const vm = fake.instance(ZONE, nameOf(id))!;
          seen.push(vm.status);
          // No IP before RUNNING, and never Running without one.
          if (vm.status !== 'RUNNING') expect(got).toMatchObject({ state: 'Provisioning', ip: undefined });
          return got.state === 'Running' ? got : undefined;
        },
        { timeoutMs: 10_000, intervalMs: 20 },
      );
      expect(seen).toContain('STAGING');
      expect(running.ip).toBe(fake.instance(ZONE, nameOf(id))!.natIP);
    } finally {
      await quick.close();
    }
  });

  it("GCE's own changes read as the control plane needs: preempted, host error, stop/start (new IP), repair", async () => {
    const spot = (action: 'DELETE' | 'STOP') =>
      providerFor(fake, captured.logger, {
        config: { provisioningModel: 'SPOT', instanceTerminationAction: action },
      });
    const [spotDelete, spotStop] = [spot('DELETE'), spot('STOP')];
    try {
      // A preempted Spot VM (DELETE): Stopped while GCE deletes it, then NotFound.
      const a = await spotDelete.create(request(), live());
      await runningOf(spotDelete, a);
      fake.preempt(ZONE, nameOf(a));
      expect((await spotDelete.get(a, live())).state).toBe('Stopped');
      await eventually('the preempted VM gone', async () => {
        const err = await rejectionOf(spotDelete.get(a, live()));
        return err.errorClass === 'NotFound' ? true : undefined;
      });
      // STOP: TERMINATED, kept.
      const b = await spotStop.create(request(), live());
      await runningOf(spotStop, b);
      fake.preempt(ZONE, nameOf(b));
      await eventually('the preempted VM terminated', async () =>
        (await spotStop.get(b, live())).state === 'Terminated' ? true : undefined,
      );
      // A standard VM cannot be preempted.
      const c = await provider.create(request(), live());
      const ipBefore = (await runningOf(provider, c)).ip;
      expect(() => fake.preempt(ZONE, nameOf(c))).toThrow(/not a Spot VM/);
      // Stopped and started by GCE: Stopped, then Running with a new ephemeral IP.
      fake.stopStart(ZONE, nameOf(c));
      expect((await provider.get(c, live())).state).toBe('Stopped');
      const restarted = await runningOf(provider, c);
      expect(restarted.ip).toBeTruthy();
      expect(restarted.ip).not.toBe(ipBefore);
      // Repaired: Provisioning meanwhile, then Running with the same IP.
      fake.repair(ZONE, nameOf(c), 150);
      expect((await provider.get(c, live())).state).toBe('Provisioning');
      expect((await runningOf(provider, c)).ip).toBe(restarted.ip);
      // A host error GCE does not restart from: Terminated.
      fake.hostError(ZONE, nameOf(c));
      expect((await provider.get(c, live())).state).toBe('Terminated');
    } finally {
      await spotDelete.close();
      await spotStop.close();
    }
  });

  it('insert is validated at once: an unknown machine type or a malformed image is Permanent naming the field; oversized cloud-init never leaves', async () => {
    const before = fake.insertBodies().length;
    const opsBefore = fake.operations.length;
    const badType = await rejectionOf(
      provider.create(request({ placement: { ...PLACEMENT, machineType: 'e2-enormous' } }), live()),
    );
    expect(badType.errorClass).toBe('Permanent');
    expect(badType.message).toContain('Compute API answered 400 invalid; check placement.machineType');
    const badImage = await rejectionOf(
      provider.create(request({ placement: { ...PLACEMENT, image: 'ubuntu-2404' } }), live()),
    );
    expect(badImage.errorClass).toBe('Permanent');
    expect(badImage.message).toContain('check placement.image');
    // Both reached the API and were refused there: no operation, no VM.
    expect(fake.insertBodies().length).toBe(before + 2);
    expect(fake.operations.length).toBe(opsBefore);
    const big = await rejectionOf(
      provider.create(request({ cloudInit: 'x'.repeat(256 * 1024 + 1) }), live()),
    );
    expect(big.errorClass).toBe('Permanent');
    expect(big.message).toContain('cloudInit is 262145 bytes; GCE metadata takes at most 262144 bytes');
    expect(fake.insertBodies().length).toBe(before + 2);
  });

  it('rate limits per project: past N calls in a second, Transient naming the rate limit; the next second serves again', async () => {
    const id = await provider.create(request(), live());
    fake.rateLimitPerSecond = 3;
    const results = await Promise.allSettled([1, 2, 3, 4, 5].map(() => provider.get(id, live())));
    const refused = results.filter((r) => r.status === 'rejected').map((r) => r.reason as ProviderError);
    expect(refused.length).toBeGreaterThanOrEqual(2);
    for (const err of refused) {
      expect(err.errorClass).toBe('Transient');
      expect(err.message).toContain(
        'Compute API answered 403 rateLimitExceeded (rate limited; retried with backoff)',
      );
    }
    await eventually(
      'served again',
      async () => ((await provider.get(id, live())).id === id ? true : undefined),
      {
        intervalMs: 400,
      },
    );
  });

  it('aggregated list: empty pages with a next token and an unreachable zone still list every reachable VM', async () => {
    const pager = providerFor(fake, captured.logger, { listPageSize: 2 });
    try {
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push(await pager.create(request(), live()));
      const elsewhere = await pager.create(
        request({ placement: { ...PLACEMENT, zone: 'us-central1-a' } }),
        live(),
      );
      fake.emptyPages = 2;
      fake.unreachableZones.add('asia-east1-a');
      fake.zones.add('asia-east1-a');
      const before = fake.requests.length;
      const listed = (await pager.listByTag(live())).map((i) => i.id);
      expect(listed).toEqual(expect.arrayContaining([...ids, elsewhere]));
      const pages = fake.requests.slice(before).filter((r) => r.path.endsWith('/aggregated/instances'));
      // Two empty pages first, then the real ones.
      expect(pages.length).toBeGreaterThanOrEqual(2 + Math.ceil(listed.length / 2));
      expect(
        captured.lines.some((l) => l.includes('zones left out (unreachable)') && l.includes('asia-east1-a')),
      ).toBe(true);
    } finally {
      fake.zones.delete('asia-east1-a');
      await pager.close();
    }
  });
});

// -- zones: a stocked-out zone falls back within the region --------------------

describe('gcp zones: a stocked-out zone falls back to the next one of the region', () => {
  let fake: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  let provider: GcpProvider;
  const stops: (() => void)[] = [];
  beforeAll(async () => {
    fake = await FakeCompute.start('zones-project');
    captured = capturedLogger();
    provider = providerFor(fake, captured.logger, {
      // us-central1-a is in another region: never tried for a europe-west1 Proxy.
      config: { zones: ['us-central1-a', 'europe-west1-c', 'europe-west1-d'] },
    });
  });
  afterAll(async () => {
    await provider?.close();
    await fake?.stop();
  });
  afterEach(() => {
    for (const stop of stops.splice(0)) stop();
  });
  const stockOut = (...zones: string[]) =>
    stops.push(
      fake.failInsertOperations((_b, z) => zones.includes(z), ['ZONE_RESOURCE_POOL_EXHAUSTED'], 503),
    );
  const insertZones = (name: string, from: number) =>
    fake.requests
      .slice(from)
      .filter((r) => r.method === 'POST' && (r.body as { name?: string } | undefined)?.name === name)
      .map((r) => r.path.split('/')[6]);

  it('placement.zone stocked out: the VM is made in the next zone of the region, which the providerID names', async () => {
    stockOut(ZONE);
    const req = request();
    const before = fake.requests.length;
    const id = await provider.create(req, live());
    expect(id).toBe(`projects/zones-project/zones/europe-west1-c/instances/${req.name}`);
    expect(insertZones(req.name, before)).toEqual([ZONE, 'europe-west1-c']);
    expect((await runningOf(provider, id)).ip).toBeTruthy();
    expect(fake.instance(ZONE, req.name)).toBeUndefined();
    // A retried create (the first attempt's answer lost) finds it there: no second VM in the first zone.
    for (const stop of stops.splice(0)) stop();
    const again = fake.requests.length;
    expect(await provider.create(req, live())).toBe(id);
    expect(insertZones(req.name, again)).toEqual(['europe-west1-c']);
    expect([...fake.instances.values()].filter((i) => i.name === req.name)).toHaveLength(1);
  });

  it('every zone of the region stocked out: QuotaExceeded naming each zone tried, none outside the region', async () => {
    stockOut(ZONE, 'europe-west1-c', 'europe-west1-d');
    const req = request();
    const before = fake.requests.length;
    const err = await rejectionOf(provider.create(req, live()));
    expect(err.errorClass).toBe('QuotaExceeded');
    expect(err.message).toContain(
      'no capacity or quota in any zone tried (europe-west1-b, europe-west1-c, europe-west1-d); last: insert operation',
    );
    expect(err.message).toContain('ZONE_RESOURCE_POOL_EXHAUSTED');
    expect(insertZones(req.name, before)).toEqual([ZONE, 'europe-west1-c', 'europe-west1-d']);
  });

  it('a Permanent refusal in the first zone is the answer: no fallback', async () => {
    fake.missing.add('projects/x/global/images/gone');
    const req = request({ placement: { ...PLACEMENT, image: 'projects/x/global/images/gone' } });
    const before = fake.requests.length;
    const err = await rejectionOf(provider.create(req, live()));
    expect(err.errorClass).toBe('Permanent');
    expect(insertZones(req.name, before)).toEqual([ZONE]);
  });

  it('zones in the provider config are validated', () => {
    expect(() => gcpConfigSchema.parse({ project: 'zones-project', zones: ['Europe West'] })).toThrow(
      /zone name/,
    );
    expect(() => gcpConfigSchema.parse({ project: 'zones-project', zones: ['a-b-c', 'a-b-c'] })).toThrow(
      /must not repeat a zone/,
    );
  });
});

describe('gcp: the read budget of the periodic lists (drift sweep, orphan GC, checks)', () => {
  let fake: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  const REUSE = { reuse: { withinMs: 0 } };
  const lists = (from: number) =>
    fake.requests.slice(from).filter((r) => r.path.endsWith('/aggregated/instances')).length;
  /** Managed VMs straight into the backend, RUNNING with an IP (no boot timers: the clock may be frozen). */
  const putManaged = (n: number) => {
    for (let i = 0; i < n; i++)
      fake.putInstance(ZONE, `vm-${randomUUID().slice(0, 8)}`, {
        [LABEL_MANAGED]: 'true',
        [LABEL_UID]: randomUUID(),
        [LABEL_INSTALLATION]: 'inst',
      });
  };

  beforeAll(async () => {
    fake = await FakeCompute.start('budget-project');
    captured = capturedLogger();
  });
  afterAll(async () => {
    vi.useRealTimers();
    await fake?.stop();
  });
  afterEach(() => {
    vi.useRealTimers();
    fake.resetTiming();
    fake.instances.clear();
  });

  it('a periodic reader is answered from the kept list for pages / (budget × VMs) hours: 5 VMs at 0.75 every 16 min, 20 every 4 min', async () => {
    const provider = providerFor(fake, captured.logger);
    try {
      putManaged(5);
      vi.useFakeTimers({ toFake: ['Date'] });
      const t0 = Date.now();
      let from = fake.requests.length;
      const first = await provider.listByTag(live(), REUSE);
      expect(first).toHaveLength(5);
      expect(lists(from)).toBe(1);
      // 960 s: one page spent at 0.75 calls per VM-hour by 5 VMs.
      vi.setSystemTime(t0 + 950_000);
      from = fake.requests.length;
      const kept = await provider.listByTag(live(), REUSE);
      expect(kept.map((i) => i.id).sort()).toEqual(first.map((i) => i.id).sort());
      expect(lists(from)).toBe(0);
      // The health check is answered by it too.
      expect((await provider.check(live()))[0]).toMatchObject({ ready: true, reason: 'Reachable' });
      expect(lists(from)).toBe(0);
      // A caller that asks for no reuse (a lookup by UID) always lists.
      await provider.listByTag(live());
      expect(lists(from)).toBe(1);
      vi.setSystemTime(t0 + 950_000 + 970_000);
      from = fake.requests.length;
      await provider.listByTag(live(), REUSE);
      expect(lists(from)).toBe(1);

      // VMs made elsewhere are not seen while the list is kept...
      putManaged(15);
      const t1 = Date.now() + 10_000;
      vi.setSystemTime(t1);
      expect(await provider.listByTag(live(), REUSE)).toHaveLength(5);
      // ...until a list: four times the VMs, a quarter of the time (240 s).
      expect(await provider.listByTag(live())).toHaveLength(20);
      from = fake.requests.length;
      vi.setSystemTime(t1 + 230_000);
      await provider.listByTag(live(), REUSE);
      expect(lists(from)).toBe(0);
      vi.setSystemTime(t1 + 250_000);
      await provider.listByTag(live(), REUSE);
      expect(lists(from)).toBe(1);
    } finally {
      await provider.close();
    }
  });

  it("a caller's own window (GC: 150 s) adds to the budget's; listMaxAgeSeconds bounds a tiny fleet's wait", async () => {
    const unbudgeted = providerFor(fake, captured.logger, { config: { listCallsPerVmHour: 0 } });
    const capped = providerFor(fake, captured.logger, { config: { listMaxAgeSeconds: 600 } });
    try {
      putManaged(1);
      vi.useFakeTimers({ toFake: ['Date'] });
      const t0 = Date.now();
      await unbudgeted.listByTag(live());
      await capped.listByTag(live());
      let from = fake.requests.length;
      vi.setSystemTime(t0 + 100_000);
      // Budget off: the sweep (withinMs 0) lists every time; GC (150 s) takes the recent list.
      await unbudgeted.listByTag(live(), REUSE);
      expect(lists(from)).toBe(1);
      await unbudgeted.listByTag(live(), { reuse: { withinMs: 150_000 } });
      expect(lists(from)).toBe(1);
      // 1 VM at 0.75: 80 min by the budget, capped at 600 s.
      from = fake.requests.length;
      vi.setSystemTime(t0 + 590_000);
      await capped.listByTag(live(), REUSE);
      expect(lists(from)).toBe(0);
      // Due for the sweep at 600 s; GC takes it 150 s longer (by then the sweep has listed).
      vi.setSystemTime(t0 + 700_000);
      await capped.listByTag(live(), { reuse: { withinMs: 150_000 } });
      expect(lists(from)).toBe(0);
      await capped.listByTag(live(), REUSE);
      expect(lists(from)).toBe(1);
    } finally {
      await unbudgeted.close();
      await capped.close();
    }
  });

  it("the kept list is dropped by this provider's insert or delete, by a get that sees a VM otherwise, by a failed call, and a list an insert overtook is not kept", async () => {
    const provider = providerFor(fake, captured.logger, {
      config: { provisioningModel: 'SPOT', instanceTerminationAction: 'STOP' },
    });
    const relisted = async (what: string) => {
      const from = fake.requests.length;
      await provider.listByTag(live(), REUSE);
      expect(lists(from), what).toBe(1);
      const again = fake.requests.length;
      await provider.listByTag(live(), REUSE);
      expect(lists(again), `${what}: then kept`).toBe(0);
    };
    try {
      putManaged(3);
      await relisted('the first list');
      const a = await provider.create(request(), live());
      await relisted('after an insert');
      const running = await runningOf(provider, a);
      // get saw the new VM Running, where the list (made while it booted) may not: listed again.
      await provider.listByTag(live(), REUSE);
      const listedA = (await provider.listByTag(live(), REUSE)).find((i) => i.id === a);
      expect(listedA).toMatchObject({ state: 'Running', ip: running.ip });
      // GCE preempts it: the Proxy's own get sees it first; the sweep must not be answered with "Running".
      fake.preempt(ZONE, parseProviderId(a)!.name);
      await eventually('preempted', async () =>
        (await provider.get(a, live())).state === 'Terminated' ? true : undefined,
      );
      await relisted('after a get saw it Terminated');
      const listed = (await provider.listByTag(live(), REUSE)).find((i) => i.id === a);
      expect(listed?.state).toBe('Terminated');
      // A get that agrees with the list keeps it.
      await provider.get(a, live());
      let from = fake.requests.length;
      await provider.listByTag(live(), REUSE);
      expect(lists(from)).toBe(0);
      await provider.delete(a, live());
      await relisted('after a delete');
      // A failed call.
      fake.failNext((r) => r.method === 'GET' && r.path.endsWith(parseProviderId(a)!.name), {
        status: 503,
        reason: 'backendError',
      });
      await rejectionOf(provider.get(a, live()));
      await relisted('after a failed call');
      // A list still running when an insert is answered is not kept (it may lack the new VM).
      const release = fake.stall((r) => r.path.endsWith('/aggregated/instances'));
      const slow = provider.listByTag(live());
      await eventually('the list stalled', () =>
        Promise.resolve(fake.requests.at(-1)?.path.endsWith('/aggregated/instances') ? true : undefined),
      );
      const b = provider.create(request(), live());
      await eventually('the insert answered', () =>
        Promise.resolve(fake.insertBodies().length >= 2 ? true : undefined),
      );
      await b;
      release();
      await slow;
      from = fake.requests.length;
      await provider.listByTag(live(), REUSE);
      expect(lists(from)).toBe(1);
    } finally {
      await provider.close();
    }
  });

  it("orphan GC's list activity takes the drift sweep's recent list instead of a call of its own", async () => {
    const provider = providerFor(fake, captured.logger, { config: { listCallsPerVmHour: 0 } });
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'none', server: 'https://127.0.0.1:1' }],
      users: [{ name: 'none' }],
      contexts: [{ name: 'none', cluster: 'none', user: 'none' }],
      currentContext: 'none',
    });
    const registry = { get: () => provider, names: () => ['gcp-test'], close: () => Promise.resolve() };
    const gc = createGcActivities({
      registry,
      kubeConfig: kc,
      installation: 'inst',
      logger: captured.logger,
    });
    try {
      putManaged(2);
      // The sweep's list (budget off: every sweep lists).
      await provider.listByTag(live(), REUSE);
      const from = fake.requests.length;
      const listed = await gc.gcListInstances({ provider: 'gcp-test', timeoutMs: 5_000 });
      expect(listed).toHaveLength(2);
      expect(listed[0]!.installation).toBe('inst');
      expect(listed[0]!.uid).toMatch(/^[0-9a-f-]{36}$/);
      expect(lists(from)).toBe(0);
    } finally {
      await provider.close();
    }
  });

  it('the budget settings are validated', () => {
    expect(gcpConfigSchema.parse({ project: 'my-project' })).toMatchObject({
      listCallsPerVmHour: 0.75,
      listMaxAgeSeconds: 3600,
    });
    expect(() => gcpConfigSchema.parse({ project: 'my-project', listCallsPerVmHour: -1 })).toThrow(
      /listCallsPerVmHour[\s\S]*must be 0 \(off\) or more/,
    );
    expect(() => gcpConfigSchema.parse({ project: 'my-project', listMaxAgeSeconds: 10 })).toThrow(
      /listMaxAgeSeconds[\s\S]*at least 60/,
    );
  });
});

describe('gcp: a delete poll follows its own operation', () => {
  let fake: FakeCompute;
  let captured: ReturnType<typeof capturedLogger>;
  beforeAll(async () => {
    fake = await FakeCompute.start('poll-project');
    captured = capturedLogger();
  });
  afterAll(async () => {
    await fake?.stop();
  });

  it('after the submit, each delete poll is one GET of the delete operation, and never a list', async () => {
    const provider = providerFor(fake, captured.logger);
    try {
      const id = await provider.create(request(), live());
      const { name } = parseProviderId(id)!;
      fake.timing.deleteMs = 60_000;
      const start = fake.requests.length;
      await provider.delete(id, live());
      const submit = [...fake.requestCounts(start)];
      expect(submit).toEqual([
        [`DELETE /compute/v1/projects/poll-project/zones/${ZONE}/instances/${name}`, 1],
      ]);
      const op = fake.operations.find((o) => o.targetName === name && o.operationType === 'delete')!;
      for (let poll = 1; poll <= 5; poll++) {
        const before = fake.requests.length;
        await provider.delete(id, live());
        expect([...fake.requestCounts(before)]).toEqual([
          [`GET /compute/v1/projects/poll-project/zones/${ZONE}/operations/${op.name}`, 1],
        ]);
      }
      const all = fake.requestCounts(start);
      expect(all.get(`GET /compute/v1/projects/poll-project/zones/${ZONE}/operations`)).toBeUndefined();
      fake.finishOperations();
      expect((await rejectionOf(provider.get(id, live()))).errorClass).toBe('NotFound');
    } finally {
      fake.resetTiming();
      await provider.close();
    }
  });

  it('a worker that did not submit the delete finds it with one list when refused as busy, then polls by GET', async () => {
    const first = providerFor(fake, captured.logger);
    const second = providerFor(fake, captured.logger);
    try {
      const id = await first.create(request(), live());
      const { name } = parseProviderId(id)!;
      fake.timing.deleteMs = 60_000;
      await first.delete(id, live());
      const before = fake.requests.length;
      await second.delete(id, live());
      const took = fake.requests.slice(before).map((r) => `${r.method} ${r.path} ${r.status ?? ''}`);
      expect(took).toEqual([
        `DELETE /compute/v1/projects/poll-project/zones/${ZONE}/instances/${name} 400`,
        `GET /compute/v1/projects/poll-project/zones/${ZONE}/operations 200`,
      ]);
      const again = fake.requests.length;
      await second.delete(id, live());
      expect(fake.requests.slice(again).map((r) => r.path)).toEqual([
        expect.stringMatching(new RegExp(`/zones/${ZONE}/operations/operation-`)),
      ]);
      expect(fake.requestsTo('DELETE', `/instances/${name}`)).toHaveLength(2);
    } finally {
      fake.resetTiming();
      fake.finishOperations();
      await first.close();
      await second.close();
    }
  });

  it('a delete whose operation ended is submitted again (a failed delete is retried; a new VM of the name is deleted)', async () => {
    const provider = providerFor(fake, captured.logger);
    try {
      const req = request();
      const id = await provider.create(req, live());
      await provider.delete(id, live());
      fake.finishOperations();
      // The same name made again (a replacement): the old operation is DONE, so this delete is a new DELETE.
      fake.putInstance(ZONE, req.name, { [LABEL_MANAGED]: 'true', [LABEL_UID]: req.uid });
      const before = fake.requests.length;
      await provider.delete(id, live());
      expect(fake.requests.slice(before).map((r) => r.method)).toEqual(['GET', 'DELETE']);
      fake.finishOperations();
      expect(fake.instance(ZONE, req.name)).toBeUndefined();
    } finally {
      await provider.close();
    }
  });
});

describe("the seed's gcp-eu providers-config entry", () => {
  it('the fixture is the seed file byte for byte (where the seeds are present)', (ctx) => {
    const seed = '/work/shared/seeds/files/config/samples/providers-config.yaml';
    if (!existsSync(seed)) {
      ctx.skip('the seed documents are not on this machine');
      return;
    }
    expect(readFileSync(join(ROOT, 'tests/fixtures/seed-providers-config.yaml'), 'utf8')).toBe(
      readFileSync(seed, 'utf8'),
    );
  });

  it('loads unchanged, with the seed defaults, and builds a provider without calling anything', async () => {
    const config = parseProvidersConfig(seedGcpEntry(), 'seed providers-config.yaml');
    expect(config.providers).toEqual([
      {
        name: 'gcp-eu',
        type: 'gcp',
        config: {
          project: 'my-project',
          network: 'default',
          networkTag: 'proxy-operator',
          diskSizeGb: 10,
          // Issue 26's insert settings, at their defaults: the seed's entry asks for none of them.
          provisioningModel: 'STANDARD',
          blockProjectSshKeys: true,
          internalOnly: false,
          // The read budget of the periodic lists (issue 26, second pass), at its defaults.
          listCallsPerVmHour: 0.75,
          listMaxAgeSeconds: 3600,
        },
      },
    ]);
    const { logger, lines } = capturedLogger();
    const registry = buildProviders(config, { logger, stateRoot: '/nonexistent' });
    const p = registry.get('gcp-eu')!;
    expect(p).toMatchObject({ name: 'gcp-eu', type: 'gcp', capabilities: { cheapListByTag: true } });
    await registry.close();
    // Construction dialled nothing and resolved no credentials (contract §7).
    expect(lines.filter((l) => l.includes('gcp provider ready'))).toEqual([]);
  });

  describe('Proxies on gcp-eu through the real worker and bridge', () => {
    let cp: ControlPlane;
    let fake: FakeCompute;
    let provider: GcpProvider;

    beforeAll(async () => {
      const entry = parseProvidersConfig(seedGcpEntry(), 'seed').providers[0]!;
      if (entry.type !== 'gcp') throw new Error('gcp-eu is not a gcp entry');
      fake = await FakeCompute.start(entry.config.project);
      cp = await startControlPlane({ prefix: 'gcp-e2e' });
      provider = createGcpProvider({
        name: entry.name,
        // The seed's entry as loaded, plus the one override a test needs.
        config: { ...entry.config, ...fake.connection },
        logger: cp.logger,
        authClient: fakeAuth(fake),
        insertWaitMs: 5_000,
      });
      cp.registry.add(provider);
    });
    afterAll(async () => {
      await cp?.close();
      await fake?.stop();
    });

    const sample = () =>
      parseYaml(readFileSync(join(ROOT, 'infra/samples/proxy-gcp.yaml'), 'utf8')) as {
        metadata: { name: string };
        spec: Record<string, unknown> & { cloudInit: { inline: string } };
      };
    const condition = (p: Proxy, type: string) => p.status?.conditions?.find((c) => c.type === type);

    it('the sample Proxy gets a VM with its own IP, and deleting it deletes the VM with one DELETE', async () => {
      const px = sample();
      const created = await createProxy(cp.api, cp.namespace, px.metadata.name, px.spec as never);
      const name = instanceNameFromUid(created.metadata.uid!);
      const running = await waitForProxy(cp.api, cp.namespace, px.metadata.name, 'Running with an IP', (p) =>
        Boolean(p.status?.ip),
      );
      expect(running.status?.providerID).toBe(
        `projects/${fake.project}/zones/europe-west1-b/instances/${name}`,
      );
      expect(running.status?.ip).toBe(fake.instance('europe-west1-b', name)!.natIP);
      expect(condition(running, 'Provisioned')?.status).toBe('True');
      const insert = fake
        .requestsTo('POST', '/zones/europe-west1-b/instances')
        .find((r) => (r.body as { name?: string }).name === name)!;
      // The sample's cloud-init byte for byte, and the htpasswd of the Proxy's generated credentials.
      const items = (insert.body as { metadata: { items: { key: string; value: string }[] } }).metadata.items;
      expect(items.map((i) => i.key)).toEqual(['block-project-ssh-keys', 'user-data']);
      const userData = items[1]!.value;
      expect(userDataParts(userData)[0]!.raw).toBe(px.spec.cloudInit.inline);
      const { credentials: generated } = await generatedCredentials(cp.kc, cp.namespace, px.metadata.name);
      expect(credentialsWriteFile(userData, VM_HTPASSWD_PATH).content).toMatch(
        new RegExp(`^${generated.username}:\\$apr1\\$`),
      );
      expect(insert.rawBody).not.toContain(generated.password);
      expect((insert.body as { labels: Record<string, string> }).labels[LABEL_INSTALLATION]).toBe(
        'test-installation',
      );

      // A delete operation that takes a while: the workflow polls every 200 ms.
      fake.timing.deleteMs = 1_500;
      await deleteProxy(cp.api, cp.namespace, px.metadata.name);
      await eventually(
        'the Proxy is gone',
        async () => {
          await expect(getProxy(cp.api, cp.namespace, px.metadata.name)).rejects.toThrow();
          return true;
        },
        { timeoutMs: 30_000 },
      );
      expect(fake.instance('europe-west1-b', name)).toBeUndefined();
      // The workflow called delete every poll; one DELETE was accepted, none
      // was refused as resourceNotReady (a later one may find the VM gone: 404).
      const deletes = fake.requestsTo('DELETE', `/instances/${name}`);
      expect(deletes.filter((r) => r.status === 200)).toHaveLength(1);
      expect(deletes.filter((r) => r.status !== 200 && r.status !== 404)).toEqual([]);
      expect(fake.requestsTo('GET', '/zones/europe-west1-b/operations').length).toBeGreaterThan(1);
      fake.resetTiming();
    });

    it('an insert that fails for want of capacity shows QuotaExceeded with its code, then recovers', async () => {
      const zone = 'europe-west1-c';
      const stop = fake.failInsertOperations((_b, z) => z === zone, ['ZONE_RESOURCE_POOL_EXHAUSTED'], 503);
      const px = sample();
      await createProxy(cp.api, cp.namespace, 'gcp-quota', {
        ...px.spec,
        placement: { zone, machineType: 'e2-micro', image: IMAGE },
      } as never);
      const quota = await waitForProxy(
        cp.api,
        cp.namespace,
        'gcp-quota',
        'QuotaExceeded',
        (p) => condition(p, 'QuotaExceeded')?.status === 'True',
      );
      expect(condition(quota, 'QuotaExceeded')?.message).toContain('ZONE_RESOURCE_POOL_EXHAUSTED');
      expect(quota.status?.phase).not.toBe('Failed');
      stop();
      const recovered = await waitForProxy(
        cp.api,
        cp.namespace,
        'gcp-quota',
        'Running after quota returns',
        (p) => Boolean(p.status?.ip),
      );
      expect(condition(recovered, 'QuotaExceeded')?.status).toBe('False');
    });

    it('a stocked-out first zone: the Proxy is Ready in the second zone of gcp.zones', async () => {
      const zoned = createGcpProvider({
        name: 'gcp-eu-zones',
        config: { ...provider.config, zones: ['europe-west1-b', 'europe-west1-d'] },
        logger: cp.logger,
        authClient: fakeAuth(fake),
        insertWaitMs: 5_000,
      });
      cp.registry.add(zoned);
      const stop = fake.failInsertOperations(
        (_b, z) => z === 'europe-west1-b',
        ['ZONE_RESOURCE_POOL_EXHAUSTED'],
        503,
      );
      try {
        const px = sample();
        const created = await createProxy(cp.api, cp.namespace, 'gcp-zones', {
          ...px.spec,
          provider: 'gcp-eu-zones',
        } as never);
        const name = instanceNameFromUid(created.metadata.uid!);
        const ready = await waitForProxy(
          cp.api,
          cp.namespace,
          'gcp-zones',
          'Running in the second zone',
          (p) => Boolean(p.status?.ip),
        );
        expect(ready.status?.providerID).toBe(
          `projects/${fake.project}/zones/europe-west1-d/instances/${name}`,
        );
        expect(ready.status?.ip).toBe(fake.instance('europe-west1-d', name)!.natIP);
        expect(fake.instance('europe-west1-b', name)).toBeUndefined();
        expect(condition(ready, 'QuotaExceeded')?.status).not.toBe('True');
      } finally {
        stop();
      }
    });

    it('a token source answering 404 during deletion: the finalizer and the VM are kept, the error shown, until it recovers', async () => {
      const tokens = await FakeTokenSource.start(fake.token);
      const saved = process.env.GCE_METADATA_HOST;
      process.env.GCE_METADATA_HOST = tokens.host;
      const meta = createGcpProvider({
        name: 'gcp-meta',
        config: { ...provider.config },
        logger: cp.logger,
        // The library's metadata-server credential, on our loopback metadata server.
        authClient: new Compute(),
        insertWaitMs: 5_000,
      });
      cp.registry.add(meta);
      try {
        const px = sample();
        const created = await createProxy(cp.api, cp.namespace, 'gcp-token', {
          ...px.spec,
          provider: 'gcp-meta',
        } as never);
        const name = instanceNameFromUid(created.metadata.uid!);
        await waitForProxy(cp.api, cp.namespace, 'gcp-token', 'Running with an IP', (p) =>
          Boolean(p.status?.ip),
        );
        // The node's metadata server loses its service account: every token request is 404.
        tokens.metadata = { status: 404, body: 'Not Found' };
        const tokenCalls = () =>
          tokens.hits.filter((h) => h.endsWith('/service-accounts/default/token')).length;
        const before = tokenCalls();
        await deleteProxy(cp.api, cp.namespace, 'gcp-token');
        const handle = cp.client.workflow.getHandle(
          proxyWorkflowId({ namespace: cp.namespace, name: 'gcp-token', uid: created.metadata.uid! }),
        );
        // The workflow has tried several times, and records the token error (never "gone").
        const seen = await eventually(
          'deletion attempts failing on the token, with the error recorded',
          async () => {
            if (tokenCalls() < before + 3) return undefined;
            const v = await handle.query(stateQuery);
            return v.lastError?.message.includes('could not obtain an access token') ? v : undefined;
          },
          { timeoutMs: 60_000, intervalMs: 200 },
        );
        expect(seen.deletionRequested).toBe(true);
        expect(seen.lastError?.type).toBe('Transient');
        expect(seen.lastError?.message).toContain('(token source answered 404)');
        // The status says what holds the deletion up, not just "Deleting" (patch deletion-shows-error).
        const blocked = await waitForProxy(
          cp.api,
          cp.namespace,
          'gcp-token',
          'the blocked deletion shown',
          (p) =>
            Boolean(
              p.status?.conditions?.some((c) => c.type === 'Provisioned' && c.reason === 'DeletionBlocked'),
            ),
        );
        expect(blocked.status?.phase).toBe('Deleting');
        expect(blocked.status?.conditions?.find((c) => c.type === 'Provisioned')?.message).toContain(
          'the instance cannot be deleted yet (retried): ',
        );
        expect(blocked.status?.conditions?.find((c) => c.type === 'Provisioned')?.message).toContain(
          '(token source answered 404)',
        );
        expect(blocked.status?.message).toContain('could not obtain an access token');
        // The finalizer is kept: the Proxy is still there, Deleting; the VM runs on; no DELETE reached Compute.
        const still = await getProxy(cp.api, cp.namespace, 'gcp-token');
        expect(still.metadata?.deletionTimestamp).toBeTruthy();
        expect(still.metadata?.finalizers?.length).toBeGreaterThan(0);
        expect(fake.instance('europe-west1-b', name)?.status).toBe('RUNNING');
        expect(fake.requestsTo('DELETE', `/instances/${name}`)).toEqual([]);
        // The token source recovers: the deletion completes, VM first.
        tokens.metadata = { token: fake.token };
        await eventually(
          'the Proxy is gone',
          async () => {
            await expect(getProxy(cp.api, cp.namespace, 'gcp-token')).rejects.toThrow();
            return true;
          },
          { timeoutMs: 60_000 },
        );
        expect(fake.instance('europe-west1-b', name)).toBeUndefined();
        maybeRecord('proxy-deletion-blocked-shown', await handle.fetchHistory());
      } finally {
        if (saved === undefined) delete process.env.GCE_METADATA_HOST;
        else process.env.GCE_METADATA_HOST = saved;
        await meta.close();
        await tokens.stop();
      }
    });

    it('an insert refused at once for a missing image (404, as GCE does) sets the Proxy Failed naming the field', async () => {
      const image = 'projects/x/global/images/no-such-image';
      fake.missing.add(image);
      try {
        const px = sample();
        await createProxy(cp.api, cp.namespace, 'gcp-bad-image', {
          ...px.spec,
          placement: { zone: ZONE, machineType: 'e2-micro', image },
        } as never);
        const failed = await waitForProxy(
          cp.api,
          cp.namespace,
          'gcp-bad-image',
          'Failed',
          (p) => p.status?.phase === 'Failed',
        );
        expect(condition(failed, 'Provisioned')).toMatchObject({ status: 'False', reason: 'PermanentError' });
        expect(condition(failed, 'Provisioned')?.message).toContain(
          'Compute API answered 404 notFound for the image; check placement.image',
        );
      } finally {
        fake.missing.delete(image);
      }
    });

    it('an insert refused by an organization policy (412) sets the Proxy Failed naming the constraint', async () => {
      fake.denyExternalIp = true;
      try {
        const px = sample();
        await createProxy(cp.api, cp.namespace, 'gcp-org-policy', px.spec as never);
        const failed = await waitForProxy(
          cp.api,
          cp.namespace,
          'gcp-org-policy',
          'Failed',
          (p) => p.status?.phase === 'Failed',
        );
        expect(condition(failed, 'Provisioned')).toMatchObject({ status: 'False', reason: 'PermanentError' });
        expect(condition(failed, 'Provisioned')?.message).toContain(
          'refused by organization policy constraints/compute.vmExternalIpAccess',
        );
      } finally {
        fake.denyExternalIp = false;
      }
    });
  });
});
