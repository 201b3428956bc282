/** The vendor and list entries through the providers config's own load path: every refusal names its field. */
import { describe, expect, it } from 'vitest';
import { parseProvidersConfig, ProvidersConfigError } from '../../providers/config.js';

const SECRET = 'hunter2-sentinel-5c1';

function issuesOf(yaml: string): string[] {
  try {
    parseProvidersConfig(yaml, 'test');
  } catch (error) {
    expect(error).toBeInstanceOf(ProvidersConfigError);
    return (error as ProvidersConfigError).issues;
  }
  throw new Error('accepted');
}

const vendor = (block: string) => `providers:\n  - name: v\n    type: vendor\n    vendor:\n${block}`;
const REF = '      credentialsSecretRef: { namespace: egress-proxies, name: acct }\n';

describe('vendor entries at load', () => {
  it('accepts a preset with its account', () => {
    const parsed = parseProvidersConfig(vendor(`      preset: oxylabs\n${REF}      country: de\n`), 'test');
    expect(parsed.providers[0]).toMatchObject({
      name: 'v',
      type: 'vendor',
      config: {
        endpoint: { host: 'pr.oxylabs.io', port: 7777 },
        country: 'de',
        claimsNamespace: 'egress-proxies',
      },
    });
  });

  it('refuses a missing account Secret, or one without a name', () => {
    expect(issuesOf(vendor('      preset: oxylabs\n'))).toEqual([
      expect.stringMatching(/^providers\[0\]\.vendor\.credentialsSecretRef: /),
    ]);
    expect(
      issuesOf(vendor('      preset: oxylabs\n      credentialsSecretRef: { namespace: egress-proxies }\n')),
    ).toEqual([expect.stringMatching(/^providers\[0\]\.vendor\.credentialsSecretRef\.name: /)]);
  });

  it('refuses an unknown placeholder, naming the template and the placeholder', () => {
    const issues = issuesOf(
      vendor(
        `      preset: decodo\n${REF}      usernameTemplate: "user-{user}-session-{session}-x-{zoen}"\n`,
      ),
    );
    expect(issues.join('\n')).toMatch(/^providers\[0\]\.vendor\.usernameTemplate: .*\{zoen\}/m);
  });

  it('refuses a param the preset cannot carry, never quoting a password', () => {
    const issues = issuesOf(
      vendor(`      preset: brightdata\n${REF}      params: { zone: "my zone ${SECRET}" }\n`),
    );
    expect(issues.join('\n')).toMatch(/^providers\[0\]\.vendor\.params\.zone: /m);
  });

  it('refuses a custom vendor without its endpoint and templates', () => {
    const issues = issuesOf(vendor(REF)).join('\n');
    expect(issues).toMatch(/providers\[0\]\.vendor\.endpoint/);
    expect(issues).toMatch(/providers\[0\]\.vendor\.usernameTemplate/);
  });
});

describe('list entries at load', () => {
  const list = (block: string) => `providers:\n  - name: l\n    type: list\n    list:\n${block}`;

  it('accepts a URL or static entries', () => {
    expect(
      parseProvidersConfig(list('      url: https://inventory.example/p.txt\n'), 't').providers[0],
    ).toMatchObject({
      config: { format: 'lines', refreshSeconds: 300 },
    });
    expect(parseProvidersConfig(list('      entries: ["10.0.0.1:3128"]\n'), 't').providers[0]!.type).toBe(
      'list',
    );
  });

  it('refuses a bad entry by its index, without its password', () => {
    const issues = issuesOf(list(`      entries: ["10.0.0.1:3128", "10.0.0.2:0:u:${SECRET}"]\n`));
    expect(issues).toEqual([
      expect.stringMatching(/^providers\[0\]\.list\.entries\[1\]: port of 10\.0\.0\.2 is not in 1-65535$/),
    ]);
    expect(issues.join('\n')).not.toContain(SECRET);
  });

  it('refuses both or neither of url and entries, and a URL of another scheme', () => {
    expect(issuesOf(list('      format: json\n')).join('\n')).toMatch(/set exactly one of entries and url/);
    expect(issuesOf(list('      url: ftp://x.example/p\n')).join('\n')).toMatch(
      /providers\[0\]\.list\.url: must be an http/,
    );
  });
});
