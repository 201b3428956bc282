/**
 * The managed firewall rule (issue 51) with the real `@google-cloud/compute`
 * clients against the wire-level fake (tests/helpers/gcp-fake.ts, its delays
 * on: a firewall change is a global operation applied when DONE), driven
 * the way the control plane drives it: the provider-checks activity's
 * checkProviders and orphan GC's gcListInstances, over providers built as
 * the gcp factory builds them (the installation and the configured entries
 * from the composition root) and wrapped as the registry wraps them
 * (withTracing), so GC's `collectOrphans` reaches the provider through the
 * decorator.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { OAuth2Client } from 'google-auth-library';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGcActivities } from '../../activities/gc-activities.js';
import { createProviderCheckActivities } from '../../activities/provider-check-activities.js';
import type { ProviderRegistry } from '../../providers/config.js';
import { gcpConfigSchema } from '../../providers/gcp/config.js';
import { COLLECT_MIN_AGE_MS } from '../../providers/gcp/firewall-collect.js';
import { firewallRuleName, parseMark } from '../../providers/gcp/firewall-rule.js';
import { createGcpProvider } from '../../providers/gcp/provider.js';
import { withTracing } from '../../providers/tracing.js';
import type { Provider } from '../../providers/types.js';
import type { CheckedTarget } from '../../workflows/provider-checks/types.js';
import { FakeCompute, type FakeFirewall } from '../helpers/gcp-fake.js';
import { eventually } from '../helpers/temporal.js';

const INSTALLATION = 'inst-fw';
const logger = pino({ level: 'silent' });
let fake: FakeCompute;
const opened: Provider[] = [];

beforeAll(async () => {
  fake = await FakeCompute.start('fw-project');
});
afterAll(async () => {
  await Promise.all(opened.map((p) => p.close?.() ?? Promise.resolve()));
  await fake?.stop();
});
beforeEach(() => {
  fake.firewalls.clear();
});

/**
 * A gcp entry as a worker with these configured entries (gcp ones, by name;
 * default: this one alone) builds it for `installation` (default INSTALLATION;
 * null: built without one).
 */
function gcp(
  name: string,
  gcpConfig: Record<string, unknown>,
  built: { installation?: string | null; configured?: string[] } = {},
): Provider {
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: fake.token, expiry_date: Date.now() + 3_600_000 });
  const installation = built.installation === null ? undefined : (built.installation ?? INSTALLATION);
  const provider = withTracing(
    createGcpProvider({
      name,
      config: gcpConfigSchema.parse({ project: fake.project, ...fake.connection, ...gcpConfig }),
      logger,
      authClient: auth,
      installation,
      entries: (built.configured ?? [name]).map((n) => ({ name: n, type: 'gcp' })),
      // The fake's operations take 60 ms; a loaded machine can take seconds more to ask (the
      // client's first call), so a change is waited on well past the product's 8 s: never Pending here.
      firewallWaitMs: 40_000,
    }),
  );
  opened.push(provider);
  return provider;
}

function registryOf(...providers: Provider[]): ProviderRegistry {
  const byName = new Map(providers.map((p) => [p.name, p]));
  return { get: (n) => byName.get(n), names: () => [...byName.keys()], close: () => Promise.resolve() };
}

/** A kubeconfig nothing dials: neither activity used here reads the cluster. */
function noCluster(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'none', server: 'https://127.0.0.1:1' }],
    users: [{ name: 'none' }],
    contexts: [{ name: 'none', cluster: 'none', user: 'none' }],
    currentContext: 'none',
  });
  return kc;
}

/** One provider-checks round for these providers; the targets of `name`. */
async function checkTargets(name: string, providers: Provider[]) {
  const acts = createProviderCheckActivities({
    registry: registryOf(...providers),
    kubeConfig: noCluster(),
    installation: INSTALLATION,
    logger,
    metrics: new Registry(),
  });
  const { results } = await acts.checkProviders({ timeoutMs: 60_000, staleAfterMs: 120_000 });
  return results.find((r) => r.provider === name)?.targets ?? [];
}

/** One provider-checks round for these providers; the firewall target of `name`. */
async function checkRule(name: string, providers: Provider[]) {
  const targets = await checkTargets(name, providers);
  const rule = targets.find((t) => t.name.startsWith('firewall/'));
  if (rule === undefined) throw new Error(`no firewall target for ${name}: ${JSON.stringify(targets)}`);
  return rule;
}

const RANGES = ['203.0.113.0/24'];
const ruleOf = (entry: string, installation = INSTALLATION) => firewallRuleName(installation, entry);
const count = (requests: string[], re: RegExp) => requests.filter((r) => re.test(r)).length;

describe('gcp firewall rule: the provider check', () => {
  it('creates the rule once, as configured; the next check reads it and writes nothing', async () => {
    const p = gcp('gcp-fw', { networkTag: 'px-tag', firewall: { sourceRanges: RANGES } });
    const name = ruleOf('gcp-fw');
    let from = fake.requests.length;
    const first = await checkRule('gcp-fw', [p]);
    expect(first).toMatchObject({ name: `firewall/${name}`, ready: true, reason: 'Created' });
    expect(first.details).toMatchObject({
      rule: name,
      project: fake.project,
      sourceRanges: RANGES.join(','),
    });
    // The insert waited on its operation, so the rule is there when the check answers.
    expect(fake.firewalls.get(name)).toMatchObject({
      network: `https://www.googleapis.com/compute/v1/projects/${fake.project}/global/networks/default`,
      direction: 'INGRESS',
      sourceRanges: RANGES,
      targetTags: ['px-tag'],
      allowed: [{ IPProtocol: 'tcp', ports: ['3128'] }],
    });
    expect(String(fake.firewalls.get(name)?.description)).toContain(
      `installation=${INSTALLATION}; provider=gcp-fw;`,
    );
    expect(count(fake.firewallRequests(from), /^POST global\/firewalls$/)).toBe(1);

    from = fake.requests.length;
    const second = await checkRule('gcp-fw', [p]);
    expect(second).toMatchObject({ ready: true, reason: 'InSync' });
    expect(fake.firewallRequests(from)).toEqual([`GET global/firewalls/${name}`]);
  });

  it('corrects a changed sourceRanges with one update, then is in sync', async () => {
    await checkRule('gcp-fw', [gcp('gcp-fw', { firewall: { sourceRanges: RANGES } })]);
    const name = ruleOf('gcp-fw');
    // The worker restarted with a new config.
    const changed = gcp('gcp-fw', { firewall: { sourceRanges: ['198.51.100.0/24', '203.0.113.0/24'] } });
    const from = fake.requests.length;
    const fixed = await checkRule('gcp-fw', [changed]);
    expect(fixed).toMatchObject({ ready: true, reason: 'Updated', details: { differs: 'sourceRanges' } });
    expect(fake.firewalls.get(name)?.sourceRanges).toEqual(['198.51.100.0/24', '203.0.113.0/24']);
    const requests = fake.firewallRequests(from);
    expect(count(requests, /^PUT /)).toBe(1);
    expect(count(requests, /^POST global\/firewalls$/)).toBe(0);
    expect(await checkRule('gcp-fw', [changed])).toMatchObject({ ready: true, reason: 'InSync' });
  });

  it('reports a rule edited by hand and leaves it; overwrites it (extra fields cleared) only when configured', async () => {
    await checkRule('gcp-fw', [gcp('gcp-fw', { firewall: { sourceRanges: RANGES } })]);
    const name = ruleOf('gcp-fw');
    fake.firewalls.edit(name, { sourceRanges: ['0.0.0.0/0'], sourceTags: ['web'] });
    const from = fake.requests.length;
    const reported = await checkRule('gcp-fw', [gcp('gcp-fw', { firewall: { sourceRanges: RANGES } })]);
    expect(reported).toMatchObject({ ready: false, reason: 'EditedByHand' });
    expect(reported.message).toContain('sourceRanges, sourceTags');
    expect(fake.firewalls.get(name)).toMatchObject({ sourceRanges: ['0.0.0.0/0'], sourceTags: ['web'] });
    expect(count(fake.firewallRequests(from), /^(PUT|POST|DELETE) global\/firewalls/)).toBe(0);

    const overwrite = gcp('gcp-fw', { firewall: { sourceRanges: RANGES, overwriteManualEdits: true } });
    expect(await checkRule('gcp-fw', [overwrite])).toMatchObject({ ready: true, reason: 'Overwritten' });
    expect(fake.firewalls.get(name)?.sourceRanges).toEqual(RANGES);
    expect(fake.firewalls.get(name)?.sourceTags).toBeUndefined();
  });

  it('a changed network: the rule is deleted, then made again on the new network by the next check', async () => {
    await checkRule('gcp-fw', [gcp('gcp-fw', { firewall: { sourceRanges: RANGES } })]);
    const moved = gcp('gcp-fw', { network: 'proxies-vpc', firewall: { sourceRanges: RANGES } });
    expect(await checkRule('gcp-fw', [moved])).toMatchObject({ ready: false, reason: 'Recreating' });
    expect(fake.firewalls.has(ruleOf('gcp-fw'))).toBe(false);
    expect(await checkRule('gcp-fw', [moved])).toMatchObject({ ready: true, reason: 'Created' });
    expect(String(fake.firewalls.get(ruleOf('gcp-fw'))?.network)).toMatch(/\/global\/networks\/proxies-vpc$/);
  });

  it('no firewall rights: Forbidden naming the permissions; the kept listing still answers the project target', async () => {
    const p = gcp('gcp-fw', { firewall: { sourceRanges: RANGES } });
    await p.listByTag(new AbortController().signal);
    fake.failNext((r) => r.path.includes('/global/firewalls/'), { status: 403, reason: 'forbidden' });
    const [project, rule] = (await checkTargets('gcp-fw', [p])) as [CheckedTarget, CheckedTarget];
    expect(rule).toMatchObject({ ready: false, reason: 'Forbidden' });
    expect(rule.message).toContain('compute.firewalls.get');
    expect(project).toMatchObject({ ready: true, reason: 'Reachable' });
    // A firewall refusal says nothing of the instance API: the next check still reuses the listing.
    const from = fake.requests.length;
    const [again] = await checkTargets('gcp-fw', [p]);
    expect(again?.details?.from).toMatch(/^the aggregated list/);
    expect(
      fake.requestsTo('GET', '/aggregated/instances').filter((r) => fake.requests.indexOf(r) >= from),
    ).toEqual([]);
  });

  it('an entry without a firewall block makes no firewall call and has no firewall target', async () => {
    const acts = createProviderCheckActivities({
      registry: registryOf(gcp('gcp-plain', {})),
      kubeConfig: noCluster(),
      installation: INSTALLATION,
      logger,
      metrics: new Registry(),
    });
    const from = fake.requests.length;
    const { results } = await acts.checkProviders({ timeoutMs: 15_000, staleAfterMs: 60_000 });
    expect(results[0]!.targets.map((t) => t.name)).toEqual([fake.project]);
    expect(fake.firewallRequests(from)).toEqual([]);
  });
});

describe('gcp firewall rule: orphan GC', () => {
  const gcActivities = (...providers: Provider[]) =>
    createGcActivities({
      registry: registryOf(...providers),
      kubeConfig: noCluster(),
      installation: INSTALLATION,
      logger,
    });

  it("deletes this installation's rule of an entry no longer configured, once it is old enough, in GC's listing only", async () => {
    const fw = { firewall: { sourceRanges: RANGES } };
    const both = ['gcp-old', 'gcp-new'];
    await checkRule('gcp-old', [gcp('gcp-old', fw, { configured: both })]);
    await checkRule('gcp-new', [gcp('gcp-new', fw, { configured: both })]);
    // Another installation's rule for an entry of the same name, and a rule with a copied mark.
    await checkRule('gcp-old', [gcp('gcp-old', fw, { installation: 'inst-other' })]);
    const copied: FakeFirewall = { ...fake.firewalls.get(ruleOf('gcp-old'))!, name: 'allow-copied' };
    fake.firewalls.set('allow-copied', copied);
    expect(parseMark(String(copied.description))).toMatchObject({
      installation: INSTALLATION,
      provider: 'gcp-old',
    });

    // The worker restarted without gcp-old: GC's listing of gcp-new collects its rule.
    const kept = gcp('gcp-new', fw, { configured: ['gcp-new'] });
    const gc = gcActivities(kept);
    await gc.gcListInstances({ provider: 'gcp-new', timeoutMs: 10_000 });
    // Too young: a worker with a newer config may have just made it.
    expect(fake.firewalls.read(ruleOf('gcp-old'))).toBeDefined();

    for (const name of fake.firewalls.keys()) fake.firewalls.age(name, COLLECT_MIN_AGE_MS + 60_000);
    // The drift sweep's listing (and any other without collectOrphans) lists instances only.
    let from = fake.requests.length;
    await kept.listByTag(new AbortController().signal, { reuse: { withinMs: 0 } });
    expect(fake.firewallRequests(from)).toEqual([]);
    expect(fake.firewalls.read(ruleOf('gcp-old'))).toBeDefined();

    from = fake.requests.length;
    await gc.gcListInstances({ provider: 'gcp-new', timeoutMs: 10_000 });
    expect(fake.firewallRequests(from)).toContain(`DELETE global/firewalls/${ruleOf('gcp-old')}`);
    await eventually('the old entry rule gone', () =>
      Promise.resolve(fake.firewalls.read(ruleOf('gcp-old')) === undefined ? true : undefined),
    );
    expect([...fake.firewalls.keys()].sort()).toEqual(
      ['allow-copied', ruleOf('gcp-new'), ruleOf('gcp-old', 'inst-other')].sort(),
    );
  });

  it('an entry configured but not built here (another type, say) keeps its rule', async () => {
    const fw = { firewall: { sourceRanges: RANGES } };
    await checkRule('gcp-b', [gcp('gcp-b', fw, { configured: ['gcp-a', 'gcp-b'] })]);
    for (const name of fake.firewalls.keys()) fake.firewalls.age(name, COLLECT_MIN_AGE_MS + 60_000);
    // gcp-b is still configured (its build failed in this worker, say): only gcp-a is in the registry.
    const a = gcp('gcp-a', fw, { configured: ['gcp-a', 'gcp-b'] });
    const from = fake.requests.length;
    await gcActivities(a).gcListInstances({ provider: 'gcp-a', timeoutMs: 10_000 });
    expect(count(fake.firewallRequests(from), /^GET global\/firewalls$/)).toBe(1);
    expect(count(fake.firewallRequests(from), /^DELETE /)).toBe(0);
    expect(fake.firewalls.read(ruleOf('gcp-b'))).toBeDefined();
  });

  it('a provider built without an installation manages no rule: Unmanaged, and GC collects nothing', async () => {
    const fw = { firewall: { sourceRanges: RANGES } };
    await checkRule('gcp-gone', [gcp('gcp-gone', fw)]);
    fake.firewalls.age(ruleOf('gcp-gone'), COLLECT_MIN_AGE_MS + 60_000);
    const bare = gcp('gcp-bare', fw, { installation: null });
    let from = fake.requests.length;
    const [, rule] = await checkTargets('gcp-bare', [bare]);
    expect(rule).toMatchObject({ name: 'firewall', ready: false, reason: 'Unmanaged' });
    expect(fake.firewallRequests(from)).toEqual([]);
    from = fake.requests.length;
    await gcActivities(bare).gcListInstances({ provider: 'gcp-bare', timeoutMs: 10_000 });
    expect(fake.firewallRequests(from)).toEqual([]);
    expect(fake.firewalls.read(ruleOf('gcp-gone'))).toBeDefined();
  });
});
