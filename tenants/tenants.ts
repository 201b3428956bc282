/**
 * Tenants: the named clients of the lease API and the gateway, each with its
 * own token, the part of the fleet it may use, and its limits.
 *
 * A tenant is found by its token: the token presented is hashed (SHA-256)
 * and compared with every tenant's stored digest in constant time, all of
 * them every time, so neither the answer's time nor an early exit says which
 * digest came close. The file holds digests only (`tokenSha256`), never a
 * token.
 *
 * The single token of the seed (`DISCOVERY_TOKEN` / `--discovery-token-file`)
 * is the tenant `default`, unrestricted, so the seed's clients are unchanged.
 * With no token and no tenants file, every request is the open tenant
 * `default` (allowed only on the loopback or with `--insecure-no-auth`).
 */
import { hash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';

export const DEFAULT_TENANT = 'default';

const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

const limitsSchema = z.strictObject({
  /** Concurrent gateway connections (CONNECT tunnels and plain-HTTP requests in flight). */
  tunnels: z.int().positive().optional(),
  /** Lease API acquires and gateway connections per second, per process (a token bucket with one second's burst). */
  requestsPerSecond: z.number().positive().optional(),
});

const tenantSchema = z.strictObject({
  name: z.string().regex(NAME, 'a lowercase DNS label (a-z, 0-9, "-", at most 63)'),
  /** SHA-256 of the token, 64 hex digits: `printf %s "$TOKEN" | sha256sum`. */
  tokenSha256: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, 'the SHA-256 of the token as 64 hex digits (printf %s "$TOKEN" | sha256sum)'),
  /** Only the members of these ProxyPools (absent: any pool and standalone Proxies). */
  pools: z.array(z.string().min(1)).optional(),
  /** Only Proxies whose attributes hold all of these. */
  selector: z.record(z.string(), z.string()).optional(),
  limits: limitsSchema.optional(),
  /**
   * What the dashboard lets it do: `operator` may also scale pools and
   * cordon Proxies (within its scope); `crawler` (the default) only looks.
   */
  role: z.enum(['operator', 'crawler']).optional(),
});

export const tenantsFileSchema = z.strictObject({
  tenants: z.array(tenantSchema),
});

export type TenantLimits = z.infer<typeof limitsSchema>;
export type TenantRole = 'operator' | 'crawler';

export interface Tenant {
  readonly name: string;
  /** SHA-256 of its token (empty for the open tenant of a server with no auth). */
  readonly digest: Buffer;
  /** The pools it may use; undefined: any. */
  readonly pools: ReadonlySet<string> | undefined;
  /** Attribute pairs every Proxy it uses must hold, sorted by name. */
  readonly selector: ReadonlyArray<[string, string]>;
  readonly limits: TenantLimits;
  /** The dashboard's write actions (scale, cordon) are the operator's. */
  readonly role: TenantRole;
}

/** What a tenant may lease: the parts of a Proxy view the scope reads. */
export interface ScopedProxy {
  pool: string;
  attributes: Readonly<Record<string, string>>;
}

export class TenantsFileError extends Error {
  override name = 'TenantsFileError';
}

export function sha256(text: string | Buffer): Buffer {
  // crypto.hash, one call without a Hash object: a third of createHash's cost, on every request.
  return hash('sha256', text, 'buffer');
}

/**
 * The tenant of the single token (or of no token): unrestricted, and the
 * installation's operator (the single token is the one the installer holds).
 */
export function defaultTenant(token: string): Tenant {
  return {
    name: DEFAULT_TENANT,
    digest: token === '' ? Buffer.alloc(0) : sha256(token),
    pools: undefined,
    selector: [],
    limits: {},
    role: 'operator',
  };
}

/**
 * Parses a tenants file's YAML (already loaded as a value) into tenants,
 * naming the first thing wrong by its place (`tenants[1].tokenSha256`); a
 * digest or name given twice is an error. Never echoes a digest.
 */
export function parseTenants(value: unknown, source: string): Tenant[] {
  const parsed = tenantsFileSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.reduce<string>(
      (s, p) => (typeof p === 'number' ? `${s}[${p}]` : s === '' ? String(p) : `${s}.${String(p)}`),
      '',
    );
    throw new TenantsFileError(`${source}: ${where || 'the file'}: ${issue.message}`);
  }
  const names = new Set<string>();
  const digests = new Set<string>();
  return parsed.data.tenants.map((t, i) => {
    if (names.has(t.name))
      throw new TenantsFileError(`${source}: tenants[${i}].name: ${t.name} is given twice`);
    const hex = t.tokenSha256.toLowerCase();
    if (digests.has(hex))
      throw new TenantsFileError(`${source}: tenants[${i}].tokenSha256: the same token as an earlier tenant`);
    names.add(t.name);
    digests.add(hex);
    return {
      name: t.name,
      digest: Buffer.from(hex, 'hex'),
      pools: t.pools ? new Set(t.pools) : undefined,
      selector: Object.entries(t.selector ?? {}).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)),
      limits: t.limits ?? {},
      role: t.role ?? 'crawler',
    };
  });
}

/**
 * The tenant whose token this is, or undefined. Every digest is compared,
 * in constant time, whatever matched first.
 */
export function findTenant(tenants: readonly Tenant[], token: string): Tenant | undefined {
  const digest = sha256(token);
  let found: Tenant | undefined;
  for (const t of tenants) {
    if (t.digest.length === digest.length && timingSafeEqual(t.digest, digest) && !found) found = t;
  }
  return found;
}

/** Whether the tenant may name this pool (undefined: no pool named). */
export function poolAllowed(tenant: Tenant, pool: string | undefined): boolean {
  return pool === undefined || tenant.pools === undefined || tenant.pools.has(pool);
}

/** Whether the tenant may lease this Proxy: a member of one of its pools, holding its selector's attributes. */
export function inScope(tenant: Tenant, proxy: ScopedProxy): boolean {
  if (tenant.pools !== undefined && !tenant.pools.has(proxy.pool)) return false;
  for (const [key, value] of tenant.selector) {
    if ((Object.hasOwn(proxy.attributes, key) ? proxy.attributes[key] : '') !== value) return false;
  }
  return true;
}

/** Whether the tenant's scope is the whole fleet (no pools, no selector): its candidates need no filtering. */
export function unscoped(tenant: Tenant): boolean {
  return tenant.pools === undefined && tenant.selector.length === 0;
}
