/**
 * Proxy credentials' pure parts: the generated Secret's name and body,
 * reading credentials from a Secret (every problem named, no value in a
 * message), the htpasswd line (checked against OpenSSL's own apr1), the
 * header and the proxyURL, and the kubernetes pod and Squid config with
 * credentials.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import {
  authorizationMatches,
  basicCredentials,
  credentialsDigest,
  credentialsRefOf,
  generateCredentials,
  generatedSecretName,
  htpasswdLine,
  proxyAuthorization,
  proxyUrl,
} from '../../credentials/proxy-credentials.js';
import { credentialsFromSecret, generatedCredentialsSecret } from '../../kube/proxy-credentials.js';
import { kubernetesConfigSchema } from '../../providers/kubernetes/config.js';
import { buildAuthSecret } from '../../providers/kubernetes/auth-secret.js';
import { buildPod, squidConf } from '../../providers/kubernetes/pod.js';
import type { CreateRequest } from '../../providers/types.js';

const run = promisify(execFile);
const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');
const LABELLED = { 'crawl.example.com/proxy-credentials': 'true' };
const ref = { secret: 'vendor-auth', usernameKey: 'username', passwordKey: 'password' };

describe('generated credentials', () => {
  it('are fresh each time: a lowercase name and a long URL-safe password', () => {
    const a = generateCredentials();
    const b = generateCredentials();
    expect(a.username).toMatch(/^ep-[0-9a-f]{16}$/);
    expect(a.password).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(a).not.toEqual(b);
  });

  it('live in <proxy>-proxy-auth, a name that stays a Secret name for the longest Proxy names', () => {
    expect(generatedSecretName('px-1')).toBe('px-1-proxy-auth');
    const long = `${'a'.repeat(120)}.${'b'.repeat(132)}`;
    const name = generatedSecretName(long);
    expect(name.length).toBeLessThanOrEqual(253);
    expect(name).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
    expect(name).not.toBe(generatedSecretName(`${long.slice(0, -1)}c`));
  });

  it('the Secret is basic-auth, labelled, owned by the Proxy, and holds exactly the pair', () => {
    const secret = generatedCredentialsSecret(
      { namespace: 'crawl', name: 'px-1', uid: 'uid-1' },
      { username: 'u', password: 'p' },
    );
    expect(secret).toMatchObject({
      type: 'kubernetes.io/basic-auth',
      metadata: {
        name: 'px-1-proxy-auth',
        namespace: 'crawl',
        labels: LABELLED,
        ownerReferences: [
          {
            apiVersion: 'crawl.example.com/v1alpha1',
            kind: 'Proxy',
            name: 'px-1',
            uid: 'uid-1',
            controller: true,
          },
        ],
      },
      stringData: { username: 'u', password: 'p' },
    });
  });

  it('a Managed Proxy has its generated Secret; an External one only what it names', () => {
    expect(credentialsRefOf({ metadata: { name: 'm' }, spec: { mode: 'Managed' } })).toEqual({
      secret: 'm-proxy-auth',
      usernameKey: 'username',
      passwordKey: 'password',
      generated: true,
    });
    expect(
      credentialsRefOf({ metadata: { name: 'e' }, spec: { mode: 'External', endpoint: {} } }),
    ).toBeUndefined();
    expect(
      credentialsRefOf({
        metadata: { name: 'e' },
        spec: { mode: 'External', endpoint: { credentialsSecretRef: { name: 's', passwordKey: 'pw' } } },
      }),
    ).toEqual({ secret: 's', usernameKey: 'username', passwordKey: 'pw' });
  });
});

describe('credentialsFromSecret', () => {
  it('reads the pair from the named keys', () => {
    const read = credentialsFromSecret('crawl', ref, {
      labels: LABELLED,
      data: { username: b64('user'), password: b64('p:ss w0rd') },
    });
    expect(read).toEqual({ credentials: { username: 'user', password: 'p:ss w0rd' } });
  });

  it.each([
    ['missing', undefined, /Secret crawl\/vendor-auth not found/],
    ['unlabelled', { labels: {}, data: { username: b64('u'), password: b64('p') } }, /lacks the label/],
    ['no username key', { labels: LABELLED, data: { password: b64('secret-value') } }, /no key "username"/],
    ['no password key', { labels: LABELLED, data: { username: b64('u') } }, /no key "password"/],
    [
      'a colon in the name',
      { labels: LABELLED, data: { username: b64('a:b'), password: b64('secret-value') } },
      /must be a non-empty name without ":"/,
    ],
    [
      'a line break in the password',
      { labels: LABELLED, data: { username: b64('u'), password: b64('secret\r\nvalue') } },
      /has a line break/,
    ],
  ])('%s: a problem naming the Secret and never the value', (_what, secret, message) => {
    const read = credentialsFromSecret('crawl', ref, secret);
    expect('problem' in read && read.problem).toMatch(message);
    expect(JSON.stringify(read)).not.toContain('secret-value');
  });
});

describe('on the wire', () => {
  const credentials = { username: 'ep-0123456789abcdef', password: 'pa:ss/wo@rd' };

  it('Proxy-Authorization is Basic, and reads back; another pair does not match its digest', () => {
    const header = proxyAuthorization(credentials);
    expect(header).toBe(`Basic ${b64('ep-0123456789abcdef:pa:ss/wo@rd')}`);
    expect(basicCredentials(header)).toEqual(credentials);
    expect(authorizationMatches(header, credentialsDigest(credentials))).toBe(true);
    expect(
      authorizationMatches(
        proxyAuthorization({ ...credentials, password: 'x' }),
        credentialsDigest(credentials),
      ),
    ).toBe(false);
    expect(authorizationMatches(undefined, credentialsDigest(credentials))).toBe(false);
    expect(authorizationMatches('Bearer abc', credentialsDigest(credentials))).toBe(false);
  });

  it('proxyURL escapes the userinfo and brackets an IPv6 host', () => {
    expect(proxyUrl('10.0.0.7', 3128, credentials)).toBe(
      'http://ep-0123456789abcdef:pa%3Ass%2Fwo%40rd@10.0.0.7:3128',
    );
    const url = new URL(proxyUrl('fd00::7', 3128, credentials));
    expect(url.hostname).toBe('[fd00::7]');
    expect(decodeURIComponent(url.password)).toBe(credentials.password);
  });

  it('the htpasswd line is Apache MD5 crypt that OpenSSL computes the same from its salt', async () => {
    const line = htpasswdLine(credentials);
    const [user, hash] = [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1)];
    expect(user).toBe(credentials.username);
    const salt = /^\$apr1\$([./0-9A-Za-z]{8})\$[./0-9A-Za-z]{22}$/.exec(hash)?.[1];
    expect(salt).toBeDefined();
    const { stdout } = await run('openssl', ['passwd', '-apr1', '-salt', salt!, credentials.password]);
    expect(stdout.trim()).toBe(hash);
    expect(line).not.toContain(credentials.password);
  });
});

describe('kubernetes pods with credentials', () => {
  const config = kubernetesConfigSchema.parse({ namespace: 'egress-proxies' });
  const credentials = { username: 'ep-0123456789abcdef', password: 'never-in-the-pod' };
  const request: CreateRequest = {
    name: 'proxy-abcdefghijklmnop',
    uid: 'uid-1',
    namespace: 'crawlers',
    proxyName: 'px-1',
    placement: {},
    port: 3128,
    installation: 'cluster-0123456789abcdef',
    credentials,
  };

  it("takes the htpasswd from the pod's Secret by reference (no volume), and the password is nowhere in the pod", () => {
    const pod = buildPod(request, config);
    expect(pod.spec?.volumes).toBeUndefined();
    expect(pod.spec?.containers[0]?.env?.find((e) => e.name === 'SQUID_HTPASSWD')).toEqual({
      name: 'SQUID_HTPASSWD',
      valueFrom: { secretKeyRef: { name: 'proxy-abcdefghijklmnop', key: 'htpasswd' } },
    });
    expect(JSON.stringify(pod)).not.toContain('never-in-the-pod');
    expect(JSON.stringify(pod)).not.toContain('$apr1$');
    const { credentials: _none, ...without } = request;
    expect(buildPod(without, config).spec?.containers[0]?.env?.map((e) => e.name)).toEqual(['SQUID_CONF']);
  });

  it("the pod's Secret holds the htpasswd line only, owned by the pod, with the GC marks", () => {
    const secret = buildAuthSecret(request, config, { uid: 'pod-uid' }, credentials);
    expect(secret.metadata).toMatchObject({
      name: 'proxy-abcdefghijklmnop',
      namespace: 'egress-proxies',
      labels: {
        'crawl.example.com/uid': 'uid-1',
        'crawl.example.com/installation': 'cluster-0123456789abcdef',
      },
      ownerReferences: [{ kind: 'Pod', name: 'proxy-abcdefghijklmnop', uid: 'pod-uid' }],
    });
    expect(Object.keys(secret.stringData ?? {})).toEqual(['htpasswd']);
    expect(secret.stringData?.htpasswd).toMatch(/^ep-0123456789abcdef:\$apr1\$/);
    expect(JSON.stringify(secret)).not.toContain('never-in-the-pod');
  });

  it('Squid asks after the client and egress rules; an egress exception asks too', () => {
    const lines = squidConf(
      3128,
      ['10.0.0.0/8'],
      { denyCidrs: [], allowCidrs: ['192.0.2.0/24'], allowPorts: [[443, 443]] },
      true,
    ).split('\n');
    const access = lines.filter((l) => l.startsWith('http_access'));
    expect(access).toEqual([
      'http_access deny manager',
      'http_access deny egress_loopback',
      'http_access allow clients authenticated egress_allowed',
      'http_access deny !egress_ports',
      'http_access deny egress_denied',
      'http_access deny !clients',
      'http_access allow authenticated',
      'http_access deny all',
    ]);
    expect(lines).toContain('acl authenticated proxy_auth REQUIRED');
    expect(lines).toContain('auth_param basic casesensitive on');
    // Without credentials the config is what it was.
    expect(squidConf(3128, ['10.0.0.0/8'])).not.toMatch(/auth/);
  });
});
