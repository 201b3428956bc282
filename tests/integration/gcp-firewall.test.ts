/**
 * The managed firewall rule (issue 51) with the real `@google-cloud/compute`
 * clients against the wire-level fake (tests/helpers/gcp-fake.ts, its delays
 * on: a firewall change is a global operation applied when DONE), driven
 * the way the control plane drives it: the provider-checks activity's
 * checkProviders and orphan GC's gcListInstances, over providers wrapped as
 * the registry wraps them (withTracing), so the installation reaches the
 * provider through the activity's scope.
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

function gcp(name: string, gcpConfig: Record<string, unknown>): Provider {
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: fake.token, expiry_date: Date.now() + 3_600_000 });
  const provider = withTracing(
    createGcpProvider({
      name,
      config: gcpConfigSchema.parse({ project: fake.project, ...fake.connection, ...gcpConfig }),
      logger,
      authClient: auth,
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
async function checkTargets(name: string, providers: Provider[], installation = INSTALLATION) {
  const acts = createProviderCheckActivities({
    registry: registryOf(...providers),
    kubeConfig: noCluster(),
    installation,
    logger,
    metrics: new Registry(),
  });
  const { results } = await acts.checkProviders({ timeoutMs: 15_000, staleAfterMs: 60_000 });
  return results.find((r) => r.provider === name)?.targets ?? [];
}

/** One provider-checks round for these providers; the firewall target of `name`. */
async function checkRule(name: string, providers: Provider[], installation = INSTALLATION) {
  const targets = await checkTargets(name, providers, installation);
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
    fake.editFirewall(name, { sourceRanges: ['0.0.0.0/0'], sourceTags: ['web'] });
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
  it("deletes this installation's rule of an entry no longer configured, once it is old enough; nothing else", async () => {
    const old = gcp('gcp-old', { firewall: { sourceRanges: RANGES } });
    const kept = gcp('gcp-new', { firewall: { sourceRanges: RANGES } });
    await checkRule('gcp-old', [old, kept]);
    await checkRule('gcp-new', [old, kept]);
    // Another installation's rule for an entry of the same name, and a rule with a copied mark.
    await checkRule('gcp-old', [gcp('gcp-old', { firewall: { sourceRanges: RANGES } })], 'inst-other');
    const copied: FakeFirewall = { ...fake.firewalls.get(ruleOf('gcp-old'))!, name: 'allow-copied' };
    fake.firewalls.set('allow-copied', copied);
    expect(parseMark(String(copied.description))).toMatchObject({
      installation: INSTALLATION,
      provider: 'gcp-old',
    });

    // gcp-old is no longer configured: GC's listing of gcp-new collects its rule.
    const gc = createGcActivities({
      registry: registryOf(kept),
      kubeConfig: noCluster(),
      installation: INSTALLATION,
      logger,
    });
    await gc.gcListInstances({ provider: 'gcp-new', timeoutMs: 10_000 });
    // Too young: a worker with a newer config may have just made it.
    expect(fake.firewall(ruleOf('gcp-old'))).toBeDefined();

    for (const name of fake.firewalls.keys()) fake.ageFirewall(name, COLLECT_MIN_AGE_MS + 60_000);
    const from = fake.requests.length;
    await gc.gcListInstances({ provider: 'gcp-new', timeoutMs: 10_000 });
    expect(fake.firewallRequests(from)).toContain(`DELETE global/firewalls/${ruleOf('gcp-old')}`);
    await eventually('the old entry rule gone', () =>
      Promise.resolve(fake.firewall(ruleOf('gcp-old')) === undefined ? true : undefined),
    );
    expect([...fake.firewalls.keys()].sort()).toEqual(
      ['allow-copied', ruleOf('gcp-new'), ruleOf('gcp-old', 'inst-other')].sort(),
    );
  });
});
