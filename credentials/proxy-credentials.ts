/**
 * A proxy's credentials: the username and password a client sends in
 * `Proxy-Authorization: Basic`. Managed proxies get random ones, in a Secret
 * owned by the Proxy; External proxies name theirs with
 * `spec.endpoint.credentialsSecretRef`. Only the prober, the gateway, the
 * lease API (in a lease's `proxyURL`) and a provider's create hold them;
 * history, status, logs and metrics see a Secret's name or a digest.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import apacheMd5 from 'apache-md5';

// A CommonJS module whose typings declare an ES default export: at run time the default import is the function itself.
const aprMd5 = apacheMd5 as unknown as (password: string, salt: string) => string;

export interface ProxyCredentials {
  username: string;
  password: string;
}

/** Where a Proxy's credentials live: a Secret in the Proxy's namespace, and its two keys. */
export interface CredentialsRef {
  secret: string;
  usernameKey: string;
  passwordKey: string;
  /** A Managed Proxy's generated Secret: when it is not there, the proxy has no credentials (yet). */
  generated?: boolean;
}

export type CredentialsRead = { credentials: ProxyCredentials } | { problem: string };

/** A Proxy's credentials from wherever they are kept: undefined when it has none. */
export type CredentialsLookup = (namespace: string, ref: CredentialsRef) => CredentialsRead | undefined;

/** What credentials a Proxy has: a Managed one's generated Secret, an External one's reference, or none. */
export function credentialsRefOf(proxy: {
  metadata: { name: string };
  spec: {
    mode: string;
    endpoint?: { credentialsSecretRef?: { name: string; usernameKey?: string; passwordKey?: string } };
  };
}): CredentialsRef | undefined {
  if (proxy.spec.mode === 'Managed') return generatedCredentialsRef(proxy.metadata.name);
  const ref = proxy.spec.endpoint?.credentialsSecretRef;
  if (!ref) return undefined;
  return {
    secret: ref.name,
    usernameKey: ref.usernameKey ?? USERNAME_KEY,
    passwordKey: ref.passwordKey ?? PASSWORD_KEY,
  };
}

export const USERNAME_KEY = 'username';
export const PASSWORD_KEY = 'password';
/**
 * The generated Secret's keys for the credentials the provider set for the
 * instance (a vendor session's, a list entry's), written by the create
 * activity: what a client presents instead of the generated pair, which
 * stays what the spec hash covers.
 */
export const PROVIDER_USERNAME_KEY = 'providerUsername';
export const PROVIDER_PASSWORD_KEY = 'providerPassword';

/** Where a generated Secret keeps the provider's credentials. */
export function providerCredentialsRef(ref: CredentialsRef): CredentialsRef {
  return { ...ref, usernameKey: PROVIDER_USERNAME_KEY, passwordKey: PROVIDER_PASSWORD_KEY };
}
/** What a 407 names as the realm. */
export const PROXY_REALM = 'egress-proxies';
/** The generated Secret's name is the Proxy's and this (see generatedSecretName). */
export const GENERATED_SUFFIX = '-proxy-auth';
/** A Secret's name is a DNS subdomain: at most 253 characters. */
const MAX_SECRET_NAME = 253;

/**
 * The generated Secret of a Managed Proxy: its name plus a suffix, or, for a
 * name too long to take one, a prefix of it and a digest of the whole.
 */
export function generatedSecretName(proxyName: string): string {
  const plain = `${proxyName}${GENERATED_SUFFIX}`;
  if (plain.length <= MAX_SECRET_NAME) return plain;
  const digest = createHash('sha256').update(proxyName).digest('hex').slice(0, 10);
  const keep = MAX_SECRET_NAME - GENERATED_SUFFIX.length - digest.length - 1;
  return `${proxyName.slice(0, keep).replace(/[-.]+$/, '')}-${digest}${GENERATED_SUFFIX}`;
}

/** The generated Secret's reference, in the form an External Proxy writes its own. */
export function generatedCredentialsRef(proxyName: string): CredentialsRef {
  return {
    secret: generatedSecretName(proxyName),
    usernameKey: USERNAME_KEY,
    passwordKey: PASSWORD_KEY,
    generated: true,
  };
}

/**
 * Fresh credentials: 64 bits of name in lowercase hex (Squid folds user
 * names to lowercase unless told otherwise, and so do some clients) and
 * 192 of password in base64url (no character a URL's userinfo or Squid's
 * htpasswd reader treats specially).
 */
export function generateCredentials(): ProxyCredentials {
  return {
    username: `ep-${randomBytes(8).toString('hex')}`,
    password: randomBytes(24).toString('base64url'),
  };
}

/** The `Proxy-Authorization` value for these credentials. */
export function proxyAuthorization(credentials: ProxyCredentials): string {
  return `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`, 'utf8').toString('base64')}`;
}

/**
 * SHA-256 hex of `username:password`: what the spec hash and the local
 * provider's records hold. Not reversible for generated credentials (256
 * random bits); a weak password an External Proxy's owner chose never
 * reaches a digest (only Managed proxies' credentials are hashed).
 */
export function credentialsDigest(credentials: ProxyCredentials): string {
  return createHash('sha256').update(`${credentials.username}:${credentials.password}`, 'utf8').digest('hex');
}

/** True when a `Proxy-Authorization` header carries credentials whose digest is `digest`. */
export function authorizationMatches(header: string | undefined, digest: string): boolean {
  const sent = basicCredentials(header);
  if (!sent) return false;
  const a = Buffer.from(credentialsDigest(sent), 'hex');
  const b = Buffer.from(digest, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The credentials in a `Basic` authorization header, if it is one. */
export function basicCredentials(header: string | undefined): ProxyCredentials | undefined {
  const m = header === undefined ? null : /^basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (!m) return undefined;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return undefined;
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}

/**
 * One htpasswd line, `user:$apr1$salt$hash`: Apache's MD5 crypt, which
 * Squid's basic_ncsa_auth verifies itself (not through the system's
 * crypt(3), so any guest's Squid reads it).
 */
export function htpasswdLine(credentials: ProxyCredentials): string {
  const salt = randomBytes(6).toString('base64').replace(/\+/g, '.');
  return `${credentials.username}:${aprMd5(credentials.password, `$apr1$${salt}$`)}`;
}

/** `http://user:pass@host:port`, each part escaped as a URL's userinfo needs. */
export function proxyUrl(host: string, port: number, credentials: ProxyCredentials): string {
  const authority = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  const userinfo = `${encodeURIComponent(credentials.username)}:${encodeURIComponent(credentials.password)}`;
  return `http://${userinfo}@${authority}:${port}`;
}
