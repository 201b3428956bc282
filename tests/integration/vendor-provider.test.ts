/**
 * The `vendor` provider (issue 58): the conformance suite on the real
 * apiserver (claims are ConfigMaps, the account a Secret) with the fake
 * vendor's super-proxy, then end to end: a real worker and bridge, a real
 * `api` (prober, leases with a tenant) and `gateway`, the fake vendor
 * (sessions on their own loopback exit addresses) and an IP echo.
 *
 * - A pool of 5 vendor Proxies goes Ready with 5 distinct exit addresses;
 *   a lease keeps its exit address for 10 requests.
 * - The gateway's `geo-fr` lands on the Proxy whose session carries fr.
 * - A pool (no rotation spec) replaces a session before its lifetime ends
 *   (status.expiresAt): a new member first, then the old one drained; a
 *   held lease keeps working (same exit) while its Proxy drains; the new
 *   member has a new exit address.
 * - A session past its lifetime is replaced in place by a new session (new
 *   username, new exit address).
 * - The account password is a sentinel found in no log, history, metric,
 *   Event or status.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, EventsV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromProxyUrl } from '../../cli/egress-ip.js';
import { createKubeClaimStore, kubeSecretReader } from '../../kube/claims.js';
import { createProxyPoolClient, poolSelector } from '../../kube/proxy-pools.js';
import { startIpEcho, type IpEchoServer } from '../../local-servers/ip-echo.js';
import { vendorConfigSchema } from '../../providers/vendor/config.js';
import { createVendorProvider } from '../../providers/vendor/provider.js';
import type { VendorTemplates } from '../../providers/vendor/template.js';
import { CUSTOM_RULES } from '../../providers/vendor/presets.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { poolWorkflowId } from '../../workflows/pool/ids.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { startFakeVendor, type FakeVendor } from '../helpers/fake-vendor.js';
import {
  createNamespace,
  createProxy,
  deleteProxy,
  getProxy,
  kubeConfig,
  proxyCondition,
  waitForProxy,
} from '../helpers/kube.js';
import { getThroughProxy, TcpRelay } from '../helpers/net.js';
import { claimHooks } from '../helpers/claims.js';
import { kubeConfigVia } from './gc-helpers.js';
import { eventually, maybeRecord } from '../helpers/temporal.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { curlThrough, startGatewayCli } from './gateway-helpers.js';

const SENTINEL = `sentinel-vendor-${randomBytes(9).toString('hex')}`;
const ACCOUNT = { username: 'acct42', password: SENTINEL };
const USERNAME_TEMPLATE = 'user-{user}[-country-{country}]-session-{session}-lifetime-{seconds}';
const TEMPLATES: VendorTemplates = {
  username: USERNAME_TEMPLATE,
  password: '{password}',
  session: CUSTOM_RULES.session,
  chars: CUSTOM_RULES.chars,
};
/** The lifetime of the sessions a pool rotates before their end. */
const SESSION_SECONDS = 60;
const TOKEN = `crawler-${randomBytes(12).toString('hex')}`;
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const live = () => new AbortController().signal;

/** A vendor entry's YAML block (custom templates; the fake's endpoint; claims and account in `namespace`). */
function vendorEntry(name: string, port: number, namespace: string, lifetimeSeconds: number): string {
  return [
    `  - name: ${name}`,
    '    type: vendor',
    '    vendor:',
    `      endpoint: { host: 127.0.0.1, port: ${port} }`,
    `      credentialsSecretRef: { namespace: ${namespace}, name: vendor-account }`,
    `      usernameTemplate: "${USERNAME_TEMPLATE}"`,
    '      passwordTemplate: "{password}"',
    `      sessionLifetimeSeconds: ${lifetimeSeconds}`,
    `      claimsNamespace: ${namespace}`,
    '',
  ].join('\n');
}

async function putAccount(core: CoreV1Api, namespace: string): Promise<void> {
  await core.createNamespacedSecret({
    namespace,
    body: { metadata: { name: 'vendor-account' }, stringData: ACCOUNT },
  });
}

/** The exit address the IP echo sees through ip:port with these credentials. */
async function exitThrough(ip: string, port: number, authorization: string | undefined, echo: IpEchoServer) {
  const res = await getThroughProxy(ip, port, echo.port, authorization);
  expect(res.status, `through ${ip}:${port}: ${res.body.slice(0, 200)}`).toBe(200);
  return (JSON.parse(res.body) as { ip: string }).ip;
}

/** Every text in a value, and each string's base64 reading too (a history's payloads are base64 JSON). */
function everyText(value: unknown, out: string[] = []): string[] {
  if (typeof value === 'string') out.push(value, Buffer.from(value, 'base64').toString('utf8'));
  else if (value instanceof Uint8Array) out.push(Buffer.from(value).toString('utf8'));
  else if (value && typeof value === 'object') for (const v of Object.values(value)) everyText(v, out);
  return out;
}

describeProviderConformance('vendor', async () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const namespace = await createNamespace(kc, 'vendor-conformance');
  await putAccount(core, namespace);
  const fake = await startFakeVendor({ templates: TEMPLATES, account: ACCOUNT, lifetimeSeconds: 600 });
  const apiserver = new URL(kc.getCurrentCluster()!.server);
  const relay = new TcpRelay({ host: apiserver.hostname, port: Number(apiserver.port) });
  await relay.open();
  const lines: string[] = [];
  const name = 'vendor-conf';
  const provider = createVendorProvider({
    name,
    config: vendorConfigSchema.parse({
      endpoint: { host: '127.0.0.1', port: fake.port },
      credentialsSecretRef: { namespace, name: 'vendor-account' },
      usernameTemplate: USERNAME_TEMPLATE,
      passwordTemplate: '{password}',
      sessionLifetimeSeconds: 600,
      claimsNamespace: namespace,
    }),
    logger: pino({ level: 'debug' }, { write: (l: string) => void lines.push(l) }),
    claims: createKubeClaimStore(kubeConfigVia(kc, relay.port), name, namespace),
    readSecret: kubeSecretReader(kubeConfigVia(kc, relay.port)),
  });
  return {
    provider,
    logLines: () => lines,
    malformedIds: [`${name}-UPPERCASE0000000`, `${name}-abc`, `other-${'a'.repeat(16)}`],
    hooks: claimHooks(kc, namespace, name, relay),
    cleanup: async () => {
      await relay.cut();
      await fake.close();
      await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    },
  };
});

describe('vendor provider', () => {
  it("renders each session's credentials from the account, and refuses an attribute that is no country", async () => {
    const kc = kubeConfig();
    const core = kc.makeApiClient(CoreV1Api);
    const namespace = await createNamespace(kc, 'vendor-rules');
    try {
      await putAccount(core, namespace);
      const provider = createVendorProvider({
        name: 'vendor-rules',
        config: vendorConfigSchema.parse({
          endpoint: { host: '127.0.0.1', port: 9 },
          credentialsSecretRef: { namespace, name: 'vendor-account' },
          usernameTemplate: USERNAME_TEMPLATE,
          passwordTemplate: '{password}',
          sessionLifetimeSeconds: 90,
          claimsNamespace: namespace,
        }),
        logger: pino({ level: 'silent' }),
        claims: createKubeClaimStore(kc, 'vendor-rules', namespace),
        readSecret: kubeSecretReader(kc),
      });
      const uid = randomUUID();
      const req = {
        name: `proxy-${uid.slice(0, 8)}`,
        uid,
        namespace,
        proxyName: 'p',
        placement: {},
        port: 3128,
        installation: 'vendor-rules',
      };
      const id = await provider.create({ ...req, attributes: { geo: 'DE' } }, live());
      const got = await provider.get(id, live());
      expect(got).toMatchObject({ state: 'Running', ip: '127.0.0.1', port: 9, uid });
      const creds = await provider.credentialsOf!(id, live());
      expect(creds!.password).toBe(SENTINEL);
      expect(creds!.username).toMatch(/^user-acct42-country-de-session-[a-z0-9]{12}-lifetime-90$/);
      // Another Proxy, another session.
      const other = await provider.create({ ...req, name: 'proxy-other', uid: randomUUID() }, live());
      const otherCreds = await provider.credentialsOf!(other, live());
      expect(otherCreds!.username).not.toBe(creds!.username);
      expect(otherCreds!.username).not.toContain('-country-');
      const refused = await provider
        .create({ ...req, name: 'proxy-bad', uid: randomUUID(), attributes: { country: 'Germany' } }, live())
        .catch((e: unknown) => e);
      expect(String(refused)).toMatch(/Permanent/);
      expect(String(refused)).toMatch(
        /attribute country="Germany" is not a two-letter ISO 3166-1 country code/,
      );
    } finally {
      await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    }
  });
});

describe('vendor proxies end to end', () => {
  const logs: string[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'ep-vendor-'));
  let cp: ControlPlane;
  let fake: FakeVendor;
  let echo: IpEchoServer;
  let api: CliProcess;
  let apiUrl = '';
  let gateway: { cli: CliProcess; url: string };
  let core: CoreV1Api;
  let fakePort = 0;
  /** The api and the gateway share leases and the gateway's traffic reports through it (passive health). */
  let redis: RunningRedis;

  /** A lease, once the api (its catalog a moment behind the apiserver) has a proxy to give. */
  const lease = (body: Record<string, unknown>) =>
    eventually(
      `a lease of ${JSON.stringify(body)}`,
      async () => {
        const res = await fetch(`${apiUrl}/v1/leases`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ ttlSeconds: 120, ...body }),
        });
        const answer = (await res.json()) as {
          leaseID: string;
          proxy: { id: string; ip: string; port: number };
          proxyURL?: string;
        };
        if (res.status === 409 || res.status === 503) return undefined;
        expect(res.status, JSON.stringify(answer)).toBe(201);
        return answer;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  const release = (leaseID: string) =>
    fetch(`${apiUrl}/v1/leases/${leaseID}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
  const exitOfLease = async (l: { proxyURL?: string }) => {
    const { host, port, proxyAuthorization } = fromProxyUrl(l.proxyURL!);
    return exitThrough(host, port, proxyAuthorization, echo);
  };
  const isReady = (p: Proxy) => proxyCondition(p, 'Ready')?.status === 'True';

  beforeAll(async () => {
    fake = await startFakeVendor({ templates: TEMPLATES, account: ACCOUNT, lifetimeSeconds: 600 });
    fakePort = fake.port;
    redis = await startRedis();
    echo = await startIpEcho();
    cp = await startControlPlane({
      prefix: 'vendor',
      logger: pino({ level: 'debug' }, { write: (line: string) => void logs.push(line) }),
      // The namespace is the plane's; it is made before the providers are read.
      providersYaml: () => 'providers: []\n',
    });
    core = cp.kc.makeApiClient(CoreV1Api);
    await putAccount(core, cp.namespace);
    // Built now that the namespace exists: the entries name it.
    const { buildProviders, parseProvidersConfig } = await import('../../providers/config.js');
    const { kubeClaimStores } = await import('../../kube/claims.js');
    const built = buildProviders(
      parseProvidersConfig(
        `providers:\n${vendorEntry('vend', fakePort, cp.namespace, 600)}${vendorEntry('vend-short', fakePort, cp.namespace, 6)}${vendorEntry('vend-mid', fakePort, cp.namespace, SESSION_SECONDS)}`,
        'vendor test',
      ),
      {
        logger: cp.logger,
        stateRoot: cp.stateRoot,
        installation: 'test-installation',
        claims: kubeClaimStores(cp.kc),
        readSecret: kubeSecretReader(cp.kc),
      },
    );
    for (const n of built.names()) cp.registry.add(built.get(n)!);
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
      '--lease-store',
      redis.url,
      '--log-level',
      'debug',
    ]);
    apiUrl = await leaseApiUrl(api, 150_000);
    gateway = await startGatewayCli(cp.namespace, [
      '--tenants-file',
      join(dir, 'tenants.yaml'),
      '--lease-store',
      redis.url,
      '--log-level',
      'debug',
    ]);
  }, 240_000);

  afterAll(async () => {
    await gateway?.cli.stop();
    await api?.stop();
    await cp?.close();
    await fake?.close();
    await echo?.close();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const healthCheck = () => ({ probeURL: echo.url, intervalSeconds: 2, timeoutSeconds: 2 });

  it('a pool of 5 sessions goes Ready on 5 distinct exit addresses; a lease keeps its address for 10 requests', async () => {
    const pools = createProxyPoolClient(cp.kc);
    await pools.create(cp.namespace, 'five', {
      replicas: 5,
      template: { spec: { mode: 'Managed', provider: 'vend', healthCheck: healthCheck() } },
    });
    await eventually(
      'pool five: 5 members Ready',
      async () => {
        const members = (await cp.api.list(cp.namespace, { labelSelector: poolSelector('five') })).items;
        return members.length === 5 && members.every(isReady) ? members : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    // The api's catalog follows the apiserver a moment behind: wait until it offers all five.
    await eventually(
      'the lease API offers 5 healthy members',
      async () => {
        const res = await fetch(`${apiUrl}/v1/proxies?healthy=true&pool=five`, {
          headers: { authorization: `Bearer ${TOKEN}` },
        });
        return ((await res.json()) as { count: number }).count === 5 || undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    const leases = [];
    for (let i = 0; i < 5; i++) leases.push(await lease({ pool: 'five' }));
    expect(new Set(leases.map((l) => l.proxy.id)).size).toBe(5);
    // Every member is the vendor's super-proxy, with a session of its own.
    for (const l of leases) expect(`${l.proxy.ip}:${l.proxy.port}`).toBe(`127.0.0.1:${fakePort}`);
    const exits = await Promise.all(leases.map((l) => exitOfLease(l)));
    expect(new Set(exits).size).toBe(5);
    const sticky = [];
    for (let i = 0; i < 10; i++) sticky.push(await exitOfLease(leases[0]!));
    expect(new Set(sticky)).toEqual(new Set([exits[0]]));
    for (const l of leases) await release(l.leaseID);
  });

  it("the gateway's geo-fr lands on the session whose username carries fr", async () => {
    for (const [name, geo] of [
      ['vendor-de', 'de'],
      ['vendor-fr', 'fr'],
    ] as const)
      await createProxy(cp.api, cp.namespace, name, {
        mode: 'Managed',
        provider: 'vend',
        attributes: { geo },
        healthCheck: healthCheck(),
      });
    for (const name of ['vendor-de', 'vendor-fr'])
      await waitForProxy(cp.api, cp.namespace, name, 'Ready', isReady, { timeoutMs: 60_000 });
    const before = fake.requests().length;
    // The gateway's catalog follows the apiserver a moment behind: until it has seen vendor-fr Ready, geo-fr finds no proxy.
    await eventually(
      'the gateway routes geo-fr',
      async () =>
        (await curlThrough(gateway.url, 'geo-fr', TOKEN, `${echo.url}geo-fr`)).status === 200
          ? true
          : undefined,
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    const forwarded = fake
      .requests()
      .slice(before)
      .filter((r) => r.target.endsWith(`:${echo.port}/geo-fr`) && r.status === 200);
    expect(forwarded.length).toBeGreaterThanOrEqual(1);
    expect(forwarded.every((r) => r.country === 'fr')).toBe(true);
  });

  it('a pool replaces a session before its lifetime ends, drained: a held lease keeps its exit; the new member has a new one', async () => {
    const pools = createProxyPoolClient(cp.kc);
    // No rotation spec: the session's end (status.expiresAt) is what rotates
    // it, a drain's length before (at most half its life: 30 s in).
    await pools.create(cp.namespace, 'ending', {
      replicas: 1,
      template: { spec: { mode: 'Managed', provider: 'vend-mid', healthCheck: healthCheck() } },
      strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: SESSION_SECONDS / 2 },
    });
    const members = () =>
      cp.api.list(cp.namespace, { labelSelector: poolSelector('ending') }).then((l) => l.items);
    const first = await eventually(
      'pool ending: its member Ready',
      async () => (await members()).find(isReady),
      {
        timeoutMs: 60_000,
      },
    );
    // The session's end, from its claim: within its lifetime of the Proxy's creation.
    const endsMs = Date.parse(first.status!.expiresAt!);
    const createdMs = Date.parse(first.metadata.creationTimestamp!);
    expect(endsMs - createdMs).toBeGreaterThanOrEqual(SESSION_SECONDS * 1000 - 1000);
    expect(endsMs - createdMs).toBeLessThanOrEqual(SESSION_SECONDS * 1000 + 60_000);
    const held = await lease({ pool: 'ending' });
    expect(held.proxy.id).toBe(`${cp.namespace}/${first.metadata.name}`);
    const firstExit = await exitOfLease(held);
    // The pool makes a successor, then drains the held member while the lease is held.
    await waitForProxy(
      cp.api,
      cp.namespace,
      first.metadata.name,
      'Draining',
      (p) => proxyCondition(p, 'Draining')?.status === 'True',
      { timeoutMs: 90_000 },
    );
    for (let i = 0; i < 10; i++) expect(await exitOfLease(held)).toBe(firstExit);
    const successor = await eventually(
      'a new member Ready',
      async () => (await members()).find((m) => m.metadata.name !== first.metadata.name && isReady(m)),
      { timeoutMs: 60_000 },
    );
    // The pool writes its status at its next look after the removal.
    await eventually(
      'the pool says it rotated the member as Expiring',
      async () => {
        const rotation = (await pools.get(cp.namespace, 'ending'))?.status?.rotation;
        return rotation?.lastRotated === first.metadata.name ? rotation : undefined;
      },
      { timeoutMs: 30_000 },
    ).then((rotation) => expect(rotation.lastRotationReason).toBe('Expiring'));
    await release(held.leaseID);
    // Released: the drained member goes well before its session's end.
    await eventually(
      'the drained member gone',
      async () => ((await members()).some((m) => m.metadata.name === first.metadata.name) ? undefined : true),
      { timeoutMs: 30_000 },
    );
    const next = await lease({ pool: 'ending' });
    expect(next.proxy.id).toBe(`${cp.namespace}/${successor.metadata.name}`);
    expect(await exitOfLease(next)).not.toBe(firstExit);
    await release(next.leaseID);
    const poolUid = (await pools.get(cp.namespace, 'ending'))!.metadata.uid!;
    await pools.delete(cp.namespace, 'ending');
    // The replay guard's history of this path: a member rotated Expiring without a rotation spec.
    const poolRun = cp.client.workflow.getHandle(
      poolWorkflowId({ namespace: cp.namespace, name: 'ending', uid: poolUid }),
    );
    await poolRun.result();
    maybeRecord('pool-rotate-expiring', await poolRun.fetchHistory());
  });

  it('a session past its lifetime is replaced in place by a new session on a new exit address', async () => {
    await createProxy(cp.api, cp.namespace, 'short', {
      mode: 'Managed',
      provider: 'vend-short',
      healthCheck: healthCheck(),
    });
    const ready = await waitForProxy(cp.api, cp.namespace, 'short', 'Ready', isReady, { timeoutMs: 60_000 });
    const secretName = `short-proxy-auth`;
    const usernameNow = async () => {
      const s = await core.readNamespacedSecret({ namespace: cp.namespace, name: secretName });
      return Buffer.from(s.data!.providerUsername!, 'base64').toString('utf8');
    };
    const firstUser = await usernameNow();
    const firstExit = await exitThrough(
      ready.status!.ip!,
      ready.status!.port!,
      `Basic ${Buffer.from(`${firstUser}:${SENTINEL}`).toString('base64')}`,
      echo,
    );
    const secondUser = await eventually(
      'a new session',
      async () => {
        const u = await usernameNow();
        return u !== firstUser ? u : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    await waitForProxy(cp.api, cp.namespace, 'short', 'Ready again', isReady, { timeoutMs: 60_000 });
    const secondExit = await exitThrough(
      '127.0.0.1',
      fakePort,
      `Basic ${Buffer.from(`${secondUser}:${SENTINEL}`).toString('base64')}`,
      echo,
    );
    expect(secondExit).not.toBe(firstExit);
    // The replay guard's history of this path: looks at the session's end, replaced in place.
    const run = cp.client.workflow.getHandle(
      proxyWorkflowId({ namespace: cp.namespace, name: 'short', uid: ready.metadata.uid! }),
    );
    await deleteProxy(cp.api, cp.namespace, 'short');
    await run.result();
    maybeRecord('proxy-vendor-session-replaced', await run.fetchHistory());
  });

  it('while gateway traffic through a session succeeds, no active probe goes through it; when it stops, probing resumes', async () => {
    await createProxy(cp.api, cp.namespace, 'busy', {
      mode: 'Managed',
      provider: 'vend',
      attributes: { geo: 'it' },
      // A probe ends (answered or timed out) within 1 s, well inside the 3 s interval.
      healthCheck: { probeURL: `${echo.url}probe`, intervalSeconds: 3, timeoutSeconds: 1 },
    });
    await waitForProxy(cp.api, cp.namespace, 'busy', 'Ready', isReady, { timeoutMs: 60_000 });
    // The gateway's catalog follows the apiserver a moment behind.
    await eventually(
      'the gateway routes geo-it',
      async () =>
        (await curlThrough(gateway.url, 'geo-it', TOKEN, `${echo.url}traffic`)).status === 200
          ? true
          : undefined,
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    // The fake vendor counts requests by kind: the busy session's probes, and its traffic.
    const ofBusy = (path: string) =>
      fake.requests().filter((r) => r.country === 'it' && r.status === 200 && r.target.endsWith(path)).length;
    const passiveOk = async () => {
      const text = await (await fetch(`${apiUrl}/metrics`)).text();
      return Number(/^egress_prober_passive_results_total\{result="ok"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    let flowing = true;
    const traffic = (async () => {
      while (flowing) {
        const res = await curlThrough(gateway.url, 'geo-it', TOKEN, `${echo.url}traffic`);
        expect(res.status, res.body).toBe(200);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    try {
      // Once the prober has counted traffic as a probe, the count of probes is the baseline...
      const start = await eventually(
        'traffic counted as a probe',
        async () => ((await passiveOk()) > 0 ? passiveOk() : undefined),
        {
          timeoutMs: 30_000,
          intervalMs: 200,
        },
      );
      // A probe sent before the first one traffic answered has ended by the next.
      await eventually(
        'one more due probe answered by traffic',
        async () => (await passiveOk()) >= start + 1 || undefined,
        {
          timeoutMs: 30_000,
          intervalMs: 200,
        },
      );
      const probesBefore = ofBusy('/probe');
      // ...and three more due probes pass as traffic while none is sent.
      await eventually(
        'three more due probes answered by traffic',
        async () => (await passiveOk()) >= start + 4 || undefined,
        {
          timeoutMs: 30_000,
          intervalMs: 200,
        },
      );
      expect(ofBusy('/probe')).toBe(probesBefore);
      expect(ofBusy('/traffic')).toBeGreaterThan(3);
    } finally {
      flowing = false;
      await traffic;
    }
    const stoppedAt = ofBusy('/probe');
    await eventually(
      'probing resumed',
      () => Promise.resolve(ofBusy('/probe') >= stoppedAt + 2 || undefined),
      {
        timeoutMs: 30_000,
        intervalMs: 200,
      },
    );
  });

  it('the account password is in no log, history, metric, Event or status', async () => {
    const proxies = (await cp.api.list(cp.namespace)).items;
    expect(proxies.length).toBeGreaterThan(0);
    for (const p of proxies) expect(JSON.stringify(p)).not.toContain(SENTINEL);
    for (const p of proxies.slice(0, 4)) {
      const fresh = await getProxy(cp.api, cp.namespace, p.metadata.name);
      if (!fresh) continue;
      const history = await cp.client.workflow
        .getHandle(
          proxyWorkflowId({ namespace: cp.namespace, name: p.metadata.name, uid: fresh.metadata.uid! }),
        )
        .fetchHistory();
      expect(everyText(history).some((t) => t.includes(SENTINEL))).toBe(false);
    }
    const events = await cp.kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: cp.namespace });
    expect(JSON.stringify(events.items)).not.toContain(SENTINEL);
    expect(await (await fetch(`${apiUrl}/metrics`)).text()).not.toContain(SENTINEL);
    expect(logs.join('\n')).not.toContain(SENTINEL);
    expect(api.output()).not.toContain(SENTINEL);
    expect(gateway.cli.output()).not.toContain(SENTINEL);
  });
});
