/** The egress policy as Squid directives (forwarding/egress-squid.ts), and the samples that carry them. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_EGRESS_POLICY } from '../../forwarding/egress-policy.js';
import { squidEgressRules } from '../../forwarding/egress-squid.js';
import { HTPASSWD_PATH, squidConf } from '../../providers/kubernetes/pod.js';
import { VM_HTPASSWD_PATH } from '../../providers/shared/cloud-init-credentials.js';

const ROOT = join(import.meta.dirname, '..', '..');

describe('squidEgressRules', () => {
  it('denies the default ranges, their NAT64 forms, the loopback, and every port but 80 and 443', () => {
    const rules = squidEgressRules(DEFAULT_EGRESS_POLICY, 'clients');
    expect(rules.acls[0]).toMatch(/^acl egress_denied dst 0\.0\.0\.0\/8 127\.0\.0\.0\/8 10\.0\.0\.0\/8 /);
    expect(rules.acls[0]).toContain(' 169.254.0.0/16 ');
    // 169.254.0.0/16 as NAT64: 64:ff9b::a9fe:0/112.
    expect(rules.acls[0]).toContain(' 64:ff9b::a9fe:0/112 ');
    expect(rules.acls.slice(1)).toEqual([
      'acl egress_loopback dst 127.0.0.0/8 ::1/128',
      'acl egress_ports port 80 443',
    ]);
    expect(rules.access).toEqual([
      'http_access deny egress_loopback',
      'http_access deny !egress_ports',
      'http_access deny egress_denied',
    ]);
  });

  it('adds ::1 to an allowance of 127.0.0.1, as the gateway does', () => {
    const rules = squidEgressRules({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['127.0.0.0/8'] }, 'clients');
    expect(rules.acls).toContain('acl egress_allowed dst 127.0.0.0/8 ::1/128');
  });

  it('lets the allowed ranges through for the clients before the denial; the loopback only when named', () => {
    const rules = squidEgressRules(
      { denyCidrs: ['203.0.113.0/24'], allowCidrs: ['0.0.0.0/0'], allowPorts: [[8000, 8999]] },
      'clients',
    );
    expect(rules.acls).toContain('acl egress_allowed dst 0.0.0.0/0');
    expect(rules.acls).toContain('acl egress_ports port 8000-8999');
    expect(rules.acls[0]).toContain(' 203.0.113.0/24 ');
    expect(rules.access).toEqual([
      // 0.0.0.0/0 does not name the loopback: it stays denied.
      'http_access deny egress_loopback',
      // The allowance on every port, before the port rule.
      'http_access allow clients egress_allowed',
      'http_access deny !egress_ports',
      'http_access deny egress_denied',
    ]);
  });
});

describe('the gcp sample (infra/samples/proxy-gcp.yaml)', () => {
  const squidFile = () => {
    const sample = parseYaml(readFileSync(join(ROOT, 'infra/samples/proxy-gcp.yaml'), 'utf8')) as {
      spec: { cloudInit: { inline: string } };
    };
    const cloudConfig = parseYaml(sample.spec.cloudInit.inline) as {
      write_files: Array<{ path: string; content: string; defer?: boolean }>;
    };
    const file = cloudConfig.write_files.find((f) => f.path === '/etc/squid/conf.d/egress-proxies.conf')!;
    return { defer: file.defer, conf: file.content.trim().split('\n') };
  };

  it("carries the default policy's Squid lines, before its clients' rules", () => {
    const { conf } = squidFile();
    const rules = squidEgressRules(DEFAULT_EGRESS_POLICY, 'egress_clients');
    for (const line of [...rules.acls, ...rules.access]) expect(conf).toContain(line);
    const clients = conf.indexOf('http_access deny !egress_clients');
    for (const line of rules.access) expect(conf.indexOf(line)).toBeLessThan(clients);
  });

  it("asks for the Proxy's credentials as the kubernetes pods do, from the htpasswd the VM providers write", () => {
    const { conf, defer } = squidFile();
    const pod = squidConf(3128, ['203.0.113.0/24'], DEFAULT_EGRESS_POLICY, true).split('\n');
    const auth = pod
      .filter((l) => l.startsWith('auth_param ') || l.startsWith('acl authenticated '))
      .map((l) => l.replace(HTPASSWD_PATH, VM_HTPASSWD_PATH));
    expect(auth[0]).toBe(`auth_param basic program /usr/lib/squid/basic_ncsa_auth ${VM_HTPASSWD_PATH}`);
    for (const line of auth) expect(conf).toContain(line);
    // Clients first (403), then the credentials (407): the last two rules, as in the pod's config.
    const access = conf.filter((l) => l.startsWith('http_access '));
    expect(access.slice(-2)).toEqual(['http_access deny !egress_clients', 'http_access allow authenticated']);
    // Written with the htpasswd, after the packages: Squid never starts with one and without the other.
    expect(defer).toBe(true);
  });
});
