/**
 * The managed firewall rule's pure parts (providers/gcp/firewall-rule.ts):
 * the config block's validation (errors name the field), the rule's name,
 * the mark, the desired rule, and what the check does about a rule it
 * reads. The rule against the fake Compute API is in
 * tests/integration/gcp-firewall.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parseProvidersConfig, ProvidersConfigError } from '../../providers/config.js';
import { gcpConfigSchema, type GcpConfig } from '../../providers/gcp/config.js';
import {
  canonicalCidr,
  desiredRule,
  firewallRuleName,
  formatMark,
  judge,
  parseMark,
  ruleNetwork,
  specHash,
  specOf,
  type ComputeFirewall,
  type FirewallConfig,
} from '../../providers/gcp/firewall-rule.js';

function issuesOf(gcp: string): string[] {
  try {
    parseProvidersConfig(`providers:\n  - name: g\n    type: gcp\n    gcp:\n${gcp}`, 'test.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ProvidersConfigError);
    return (err as ProvidersConfigError).issues;
  }
  throw new Error('expected the config to be refused');
}

const config = (firewall: Partial<FirewallConfig> = {}, more: Partial<GcpConfig> = {}) => {
  const parsed = gcpConfigSchema.parse({
    project: 'my-project',
    firewall: { sourceRanges: ['203.0.113.0/24'], ...firewall },
    ...more,
  });
  return { ...parsed, firewall: parsed.firewall! };
};

/** The rule as GCE echoes what the provider sent. */
function echoed(body: ComputeFirewall): ComputeFirewall {
  return {
    ...body,
    network: `https://www.googleapis.com/compute/v1/${body.network ?? ''}`,
    logConfig: { enable: false },
    creationTimestamp: '2024-01-01T00:00:00.000-00:00',
  };
}

describe('gcp firewall: config', () => {
  it('absent by default; ports default to 3128 and hand edits are not overwritten', () => {
    expect(gcpConfigSchema.parse({ project: 'my-project' }).firewall).toBeUndefined();
    expect(config().firewall).toEqual({
      sourceRanges: ['203.0.113.0/24'],
      ports: [3128],
      overwriteManualEdits: false,
    });
  });

  it('refuses bad values, each naming its field', () => {
    const fw = (block: string) => issuesOf(`      project: my-project\n      firewall:\n${block}`);
    expect(fw('        sourceRanges: [10.0.0.0/8, 10.0.0.1/8]\n')).toEqual([
      'providers[0].gcp.firewall.sourceRanges[1]: must be a CIDR range with no host bits set, such as 203.0.113.0/24 or 2001:db8::/48',
    ]);
    expect(fw('        sourceRanges: [1.2.3.4]\n')[0]).toMatch(
      /^providers\[0\]\.gcp\.firewall\.sourceRanges\[0\]: must be a CIDR/,
    );
    expect(fw('        sourceRanges: [0.0.0.0/0]\n')).toEqual([
      'providers[0].gcp.firewall.sourceRanges[0]: must not be /0: that opens the proxies to the whole internet',
    ]);
    expect(fw('        sourceRanges: []\n')).toEqual([
      'providers[0].gcp.firewall.sourceRanges: must list at least one CIDR range (who may reach the proxies)',
    ]);
    expect(fw('        sourceRanges: [2001:db8::/48, "2001:DB8:0::/48"]\n')).toEqual([
      'providers[0].gcp.firewall.sourceRanges: must not repeat a range',
    ]);
    expect(fw('        ports: [3128]\n')).toEqual([
      'providers[0].gcp.firewall.sourceRanges: Invalid input: expected array, received undefined',
    ]);
    expect(fw('        sourceRanges: [10.0.0.0/8]\n        ports: [0, 70000]\n')).toEqual([
      'providers[0].gcp.firewall.ports[0]: must be a port number (1-65535)',
      'providers[0].gcp.firewall.ports[1]: must be a port number (1-65535)',
    ]);
    expect(fw('        sourceRanges: [10.0.0.0/8]\n        overwriteManualEdits: yes\n')).toEqual([
      'providers[0].gcp.firewall.overwriteManualEdits: must be true or false',
    ]);
    expect(fw('        sourceRanges: [10.0.0.0/8]\n        sourceTags: [a]\n')).toEqual([
      'providers[0].gcp.firewall.sourceTags: unknown field',
    ]);
  });

  it('the network must be one a rule can name', () => {
    expect(
      issuesOf(
        '      project: my-project\n      network: projects/h/regions/r/networks/x\n      firewall:\n        sourceRanges: [10.0.0.0/8]\n',
      ),
    ).toEqual([
      'providers[0].gcp.network: must be a network name or [projects/<host>/]global/networks/<name> when firewall is set (the rule is made on it)',
    ]);
    // The same network without a firewall is left as it was.
    expect(
      gcpConfigSchema.parse({ project: 'my-project', network: 'projects/h/regions/r/networks/x' }),
    ).toBeTruthy();
  });

  it('CIDRs in canonical form; IPv6 compressed and lowercase, host bits refused', () => {
    expect(canonicalCidr('203.0.113.0/24')).toBe('203.0.113.0/24');
    expect(canonicalCidr('2001:DB8:0:0::/48')).toBe('2001:db8::/48');
    expect(canonicalCidr('::ffff:10.0.0.0/120')).toBe('::ffff:a00:0/120');
    expect(canonicalCidr('2001:db8::1/64')).toBeUndefined();
    expect(canonicalCidr('10.0.0.0/33')).toBeUndefined();
    expect(canonicalCidr('10.0.0.0/08')).toBeUndefined();
    expect(canonicalCidr('example.com/8')).toBeUndefined();
  });
});

describe('gcp firewall: the desired rule', () => {
  it('a name per installation and entry, stable, a valid GCE name even for the longest entry', () => {
    const a = firewallRuleName('inst-a', 'gcp-eu');
    expect(a).toMatch(/^proxies-gcp-eu-[a-z2-7]{10}$/);
    expect(firewallRuleName('inst-a', 'gcp-eu')).toBe(a);
    expect(firewallRuleName('inst-b', 'gcp-eu')).not.toBe(a);
    expect(firewallRuleName('inst-a', 'gcp-us')).not.toBe(a);
    const long = firewallRuleName('inst-a', `${'a'.repeat(39)}-${'b'.repeat(23)}`);
    expect(long.length).toBeLessThanOrEqual(63);
    expect(long).toMatch(/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/);
    expect(long).not.toContain('--');
  });

  it('targets the network tag on the network, tcp on the ports, ingress from the ranges, marked', () => {
    const d = desiredRule(
      config(
        { sourceRanges: ['198.51.100.0/24', '2001:DB8::/32'], ports: [8080, 3128] },
        { networkTag: 'px' },
      ),
      'inst-a',
      'gcp-eu',
    );
    expect(d.project).toBe('my-project');
    expect(d.body).toEqual({
      name: firewallRuleName('inst-a', 'gcp-eu'),
      network: 'projects/my-project/global/networks/default',
      direction: 'INGRESS',
      priority: 1000,
      disabled: false,
      sourceRanges: ['198.51.100.0/24', '2001:db8::/32'],
      targetTags: ['px'],
      allowed: [{ IPProtocol: 'tcp', ports: ['3128', '8080'] }],
      description: formatMark({ installation: 'inst-a', provider: 'gcp-eu', spec: d.hash }),
    });
    expect(parseMark(d.body.description)).toEqual({
      installation: 'inst-a',
      provider: 'gcp-eu',
      spec: d.hash,
    });
  });

  it('a Shared VPC network: the rule lives in the host project', () => {
    expect(ruleNetwork({ project: 'my-project', network: 'projects/host-proj/global/networks/vpc' })).toEqual(
      {
        project: 'host-proj',
        path: 'projects/host-proj/global/networks/vpc',
      },
    );
    expect(ruleNetwork({ project: 'my-project', network: 'global/networks/vpc' })?.project).toBe(
      'my-project',
    );
  });

  it('the mark survives an installation that is not a plain name, and refuses anything else', () => {
    const mark = { installation: 'team a; b=c', provider: 'gcp-eu', spec: 'abcdefghijklmnop' };
    expect(parseMark(formatMark(mark))).toEqual(mark);
    expect(parseMark('allow proxies')).toBeUndefined();
    expect(parseMark(undefined)).toBeUndefined();
    expect(parseMark(formatMark(mark).replace('v1', 'v2'))).toBeUndefined();
  });

  it('the hash ignores order and URL forms, and changes with any field', () => {
    const d = desiredRule(config(), 'i', 'e');
    const reordered = { ...echoed(d.body), sourceRanges: [...(d.body.sourceRanges ?? [])].reverse() };
    expect(specHash(specOf(reordered))).toBe(d.hash);
    expect(specHash(specOf({ ...echoed(d.body), sourceTags: ['x'] }))).not.toBe(d.hash);
    expect(specHash(specOf({ ...echoed(d.body), logConfig: { enable: true } }))).not.toBe(d.hash);
  });
});

describe('gcp firewall: what the check does about the rule it reads', () => {
  const who = { installation: 'inst-a', entry: 'gcp-eu', overwrite: false };
  const wanted = desiredRule(config(), 'inst-a', 'gcp-eu');

  it('as it was written: in sync', () => {
    expect(judge(echoed(wanted.body), wanted, who)).toEqual({ kind: 'in-sync' });
  });

  it('written for another config (sourceRanges): corrected', () => {
    const before = desiredRule(config({ sourceRanges: ['192.0.2.0/24'] }), 'inst-a', 'gcp-eu');
    expect(judge(echoed(before.body), wanted, who)).toEqual({
      kind: 'correct',
      why: 'config',
      differs: ['sourceRanges'],
      recreate: false,
    });
  });

  it('written on another network: made again (GCE cannot move a rule)', () => {
    const before = desiredRule(config({}, { network: 'old' }), 'inst-a', 'gcp-eu');
    expect(judge(echoed(before.body), wanted, who)).toMatchObject({ kind: 'correct', recreate: true });
  });

  it('edited by hand: reported with the fields, or overwritten when configured', () => {
    const edited = { ...echoed(wanted.body), sourceRanges: ['0.0.0.0/0'] };
    expect(judge(edited, wanted, who)).toEqual({ kind: 'edited', differs: ['sourceRanges'] });
    expect(judge(edited, wanted, { ...who, overwrite: true })).toMatchObject({
      kind: 'correct',
      why: 'overwrite',
    });
    // A changed config does not excuse a hand edit.
    const later = desiredRule(config({ ports: [8080] }), 'inst-a', 'gcp-eu');
    expect(judge(edited, later, who)).toEqual({ kind: 'edited', differs: ['sourceRanges', 'allowed'] });
    // The mark itself removed: an edit too.
    expect(judge({ ...echoed(wanted.body), description: 'mine', disabled: true }, wanted, who)).toEqual({
      kind: 'edited',
      differs: ['disabled'],
    });
  });

  it('fields as configured but the mark stale or gone: only the mark is rewritten', () => {
    expect(judge({ ...echoed(wanted.body), description: 'mine' }, wanted, who)).toMatchObject({
      kind: 'correct',
      why: 'mark',
    });
  });

  it("another installation's or entry's mark: never touched, even with overwriteManualEdits", () => {
    const theirs = desiredRule(config(), 'inst-b', 'gcp-eu');
    expect(judge(echoed(theirs.body), wanted, { ...who, overwrite: true })).toMatchObject({
      kind: 'foreign',
      owner: { installation: 'inst-b', provider: 'gcp-eu' },
    });
  });
});
