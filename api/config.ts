/**
 * Lease API configuration: read once, validated, typed. The CLI passes the
 * environment and its parsed flags; nothing here reads process state on its
 * own or at import time.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { DEFAULT_MAX_AUTH_FAILURES } from '../tenants/guess-limiter.js';
import { DEFAULT_LEASE_COOLDOWN_MS } from './lease-store.js';

export const DEFAULT_LISTEN_ADDRESS = ':8090';
export const DEFAULT_MAX_LEASE_TTL_SECONDS = 3600;
export const DEFAULT_LEASE_TTL_SECONDS = 300;

export const leaseStoreSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('memory') }),
  z.object({
    kind: z.literal('redis'),
    /** `redis://` or `rediss://` (TLS); may carry `user:password@` and a `/db`. */
    url: z.string(),
    /** From `--lease-store-password-file`; overrides a password in the URL. */
    password: z.string().optional(),
    /** `--lease-store-ca-file`: PEM CA bundle for a `rediss://` server with a private CA. */
    caFile: z.string().optional(),
  }),
]);
export type LeaseStoreConfig = z.infer<typeof leaseStoreSchema>;

export const DEFAULT_POOL_DEMAND_INTERVAL_MS = 5_000;

export const apiOptionsSchema = z
  .object({
    /** Listen host; '' means every interface. */
    host: z.string(),
    port: z.int().min(0).max(65535),
    /** Bearer token; '' serves the API unauthenticated. */
    token: z.string(),
    leaseCooldownMs: z.int().positive(),
    maxLeaseTtlSeconds: z.int().positive(),
    defaultLeaseTtlSeconds: z.int().positive(),
    leaseStore: leaseStoreSchema,
    /** How often a ProxyPool may be sent a demand report (autoscaling, rotation on bans). */
    poolDemandIntervalMs: z.int().positive().default(DEFAULT_POOL_DEMAND_INTERVAL_MS),
    /** Whether this replica runs the health prober; lease-only replicas (`--no-prober`) leave it to one that does. */
    prober: z.boolean().default(true),
    /** `--insecure-no-auth`: serve without a token off the loopback, knowingly. */
    insecureNoAuth: z.boolean().default(false),
    /** `--tenants-file`: named clients with their own tokens, scopes and limits (tenants/). */
    tenantsFile: z.string().optional(),
    /** `--auth-failures-per-minute`: wrong tokens per client address per minute before 429 (0: off). */
    authFailuresPerMinute: z.int().min(0).default(DEFAULT_MAX_AUTH_FAILURES),
    /** `--no-dashboard` turns `/ui` off. */
    dashboard: z.boolean().default(true),
    /** `--temporal-web-url`: the Temporal Web UI, for the dashboard's links to each Proxy's workflow. */
    temporalWebUrl: z.url({ protocol: /^https?$/, error: 'an http:// or https:// URL' }).optional(),
  })
  .refine((o) => o.defaultLeaseTtlSeconds <= o.maxLeaseTtlSeconds, {
    message: 'the default lease TTL (300s) must not exceed --max-lease-ttl',
    path: ['maxLeaseTtlSeconds'],
  });

export type ApiOptions = z.infer<typeof apiOptionsSchema>;

/** The flags the `api` subcommand accepts, as the CLI parsed them (strings, unvalidated). */
export interface ApiFlags {
  /** `--discovery-addr`, `host:port` or `:port` (default `:8090`). */
  discoveryAddr?: string | undefined;
  /** `--lease-cooldown`, a Go-style duration (default `15m`). */
  leaseCooldown?: string | undefined;
  /** `--max-lease-ttl`, a Go-style duration in whole seconds (default `1h`). */
  maxLeaseTtl?: string | undefined;
  /** `--discovery-token-file`, a file holding the bearer token (surrounding whitespace trimmed). */
  discoveryTokenFile?: string | undefined;
  /** `--lease-store`: `memory` (default) or a `redis://` / `rediss://` URL. */
  leaseStore?: string | undefined;
  /** `--lease-store-password-file`: the Redis password (a mounted Secret); surrounding whitespace trimmed. */
  leaseStorePasswordFile?: string | undefined;
  /** `--lease-store-ca-file`: PEM CA bundle for `rediss://`. */
  leaseStoreCaFile?: string | undefined;
  /** `--pool-demand-interval`, a Go-style duration (default `5s`). */
  poolDemandInterval?: string | undefined;
  /** false from `--no-prober`: serve leases only. */
  prober?: boolean | undefined;
  /** `--insecure-no-auth`: allow listening off the loopback with no token. */
  insecureNoAuth?: boolean | undefined;
  /** `--tenants-file`, a YAML file of tenants. */
  tenantsFile?: string | undefined;
  /** `--auth-failures-per-minute`, a whole number (default 20). */
  authFailuresPerMinute?: string | undefined;
  /** false from `--no-dashboard`. */
  dashboard?: boolean | undefined;
  /** `--temporal-web-url`. */
  temporalWebUrl?: string | undefined;
}

export class ApiConfigError extends Error {
  override name = 'ApiConfigError';
}

/**
 * Builds validated options from the environment (`DISCOVERY_TOKEN`) and
 * flags. Throws `ApiConfigError` naming the bad setting.
 */
export function readApiConfig(
  env: Readonly<Record<string, string | undefined>>,
  flags: ApiFlags = {},
): ApiOptions {
  const { host, port } = parseListenAddress(
    flags.discoveryAddr ?? DEFAULT_LISTEN_ADDRESS,
    '--discovery-addr',
  );
  const leaseCooldownMs =
    flags.leaseCooldown === undefined
      ? DEFAULT_LEASE_COOLDOWN_MS
      : positiveDuration(flags.leaseCooldown, '--lease-cooldown');
  let maxLeaseTtlSeconds = DEFAULT_MAX_LEASE_TTL_SECONDS;
  if (flags.maxLeaseTtl !== undefined) {
    const ms = positiveDuration(flags.maxLeaseTtl, '--max-lease-ttl');
    if (ms % 1000 !== 0)
      throw new ApiConfigError(`--max-lease-ttl must be whole seconds, got ${flags.maxLeaseTtl}`);
    maxLeaseTtlSeconds = ms / 1000;
  }

  const envToken = env.DISCOVERY_TOKEN ?? '';
  let token = envToken;
  if (flags.discoveryTokenFile !== undefined) {
    if (envToken !== '') {
      throw new ApiConfigError('set the token through DISCOVERY_TOKEN or --discovery-token-file, not both');
    }
    try {
      token = readFileSync(flags.discoveryTokenFile, 'utf8').trim();
    } catch (err) {
      throw new ApiConfigError(
        `--discovery-token-file: cannot read ${flags.discoveryTokenFile}: ${(err as Error).message}`,
      );
    }
  }

  const parsed = apiOptionsSchema.safeParse({
    host,
    port,
    token,
    leaseCooldownMs,
    maxLeaseTtlSeconds,
    defaultLeaseTtlSeconds: DEFAULT_LEASE_TTL_SECONDS,
    leaseStore: leaseStoreConfig(flags),
    poolDemandIntervalMs:
      flags.poolDemandInterval === undefined
        ? DEFAULT_POOL_DEMAND_INTERVAL_MS
        : positiveDuration(flags.poolDemandInterval, '--pool-demand-interval'),
    prober: flags.prober !== false,
    insecureNoAuth: flags.insecureNoAuth === true,
    ...(flags.tenantsFile !== undefined ? { tenantsFile: flags.tenantsFile } : {}),
    authFailuresPerMinute: wholeNumberFlag(
      flags.authFailuresPerMinute,
      '--auth-failures-per-minute',
      DEFAULT_MAX_AUTH_FAILURES,
    ),
    dashboard: flags.dashboard !== false,
    ...(flags.temporalWebUrl !== undefined ? { temporalWebUrl: flags.temporalWebUrl } : {}),
  });
  if (!parsed.success) {
    const flagOf: Record<string, string> = { temporalWebUrl: '--temporal-web-url' };
    throw new ApiConfigError(
      parsed.error.issues
        .map((i) => `${flagOf[String(i.path[0])] ?? i.path.join('.')}: ${i.message}`)
        .join('; '),
    );
  }
  return parsed.data;
}

/** Error messages never carry the URL's password: only the scheme or a redacted form is quoted. */
function leaseStoreConfig(flags: ApiFlags): LeaseStoreConfig {
  const text = flags.leaseStore ?? 'memory';
  if (text === 'memory') {
    for (const [flag, value] of [
      ['--lease-store-password-file', flags.leaseStorePasswordFile],
      ['--lease-store-ca-file', flags.leaseStoreCaFile],
    ] as const) {
      if (value !== undefined)
        throw new ApiConfigError(`${flag} needs --lease-store redis://... or rediss://...`);
    }
    return { kind: 'memory' };
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ApiConfigError(
      '--lease-store: expected memory, redis://host:port or rediss://host:port, got something that is not a URL',
    );
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new ApiConfigError(
      `--lease-store: expected memory, redis://host:port or rediss://host:port, got a ${url.protocol}// URL`,
    );
  }
  if (url.hostname === '') throw new ApiConfigError('--lease-store: the Redis URL has no host');
  if (url.pathname !== '' && url.pathname !== '/' && !/^\/\d+$/.test(url.pathname)) {
    throw new ApiConfigError('--lease-store: the Redis URL path must be a database number, like /0');
  }
  if (flags.leaseStoreCaFile !== undefined && url.protocol !== 'rediss:') {
    throw new ApiConfigError('--lease-store-ca-file needs a rediss:// (TLS) URL');
  }
  const config: LeaseStoreConfig = { kind: 'redis', url: text };
  if (flags.leaseStorePasswordFile !== undefined) {
    try {
      config.password = readFileSync(flags.leaseStorePasswordFile, 'utf8').trim();
    } catch (err) {
      throw new ApiConfigError(
        `--lease-store-password-file: cannot read ${flags.leaseStorePasswordFile}: ${(err as Error).message}`,
      );
    }
  }
  if (flags.leaseStoreCaFile !== undefined) {
    try {
      readFileSync(flags.leaseStoreCaFile);
    } catch (err) {
      throw new ApiConfigError(
        `--lease-store-ca-file: cannot read ${flags.leaseStoreCaFile}: ${(err as Error).message}`,
      );
    }
    config.caFile = flags.leaseStoreCaFile;
  }
  return config;
}

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const DURATION = /^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$/;
const DURATION_PART = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/g;

/**
 * Parses a Go `time.ParseDuration` string ("90s", "15m", "1h30m", "1.5h")
 * to milliseconds. Signs are not accepted: no setting here can be negative.
 * "0" is accepted as in Go.
 */
export function parseDuration(text: string): number {
  if (text === '0') return 0;
  if (!DURATION.test(text))
    throw new ApiConfigError(`invalid duration ${JSON.stringify(text)} (examples: 90s, 15m, 1h)`);
  let ms = 0;
  for (const [, value, unit] of text.matchAll(DURATION_PART)) ms += Number(value) * (UNIT_MS[unit!] ?? NaN);
  return Math.round(ms);
}

function positiveDuration(text: string, flag: string): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (err) {
    throw new ApiConfigError(`${flag}: ${(err as Error).message}`);
  }
  if (!(ms > 0) || !Number.isSafeInteger(ms))
    throw new ApiConfigError(`${flag} must be positive, got ${text}`);
  return ms;
}

/** `host:port`, `:port` or `[v6]:port`, as Go's net.Listen takes it. */
export function parseListenAddress(text: string, flag = 'address'): { host: string; port: number } {
  const m = /^(?:\[([^\]]*)\]|([^:[\]]*)):(\d{1,5})$/.exec(text);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535)
    throw new ApiConfigError(`${flag}: expected host:port or :port, got ${JSON.stringify(text)}`);
  return { host: m[1] ?? m[2] ?? '', port };
}

/**
 * Nothing listens off the loopback without auth: a lease API or gateway
 * with no token on an address others can reach refuses to start, unless
 * `--insecure-no-auth` says it is meant.
 */
export function requireAuthOffLoopback(
  what: string,
  listen: { host: string; port: number },
  auth: { token: string; insecureNoAuth: boolean; tenantsFile?: string | undefined },
  flag: string,
): void {
  if (
    auth.token !== '' ||
    auth.tenantsFile !== undefined ||
    auth.insecureNoAuth ||
    isLoopbackHost(listen.host)
  )
    return;
  const where = listen.host === '' ? `:${listen.port} (every interface)` : `${listen.host}:${listen.port}`;
  throw new ApiConfigError(
    `${what} would listen on ${where} with no token: set DISCOVERY_TOKEN, --discovery-token-file or --tenants-file, listen on the loopback (${flag} 127.0.0.1:${listen.port}), or pass --insecure-no-auth to serve it open`,
  );
}

/** A flag holding a whole number, or its default when absent. */
export function wholeNumberFlag(text: string | undefined, flag: string, fallback: number): number {
  if (text === undefined) return fallback;
  if (!/^\d{1,9}$/.test(text.trim()))
    throw new ApiConfigError(`${flag}: must be a whole number, got ${JSON.stringify(text)}`);
  return Number(text.trim());
}

/** 127.0.0.0/8, ::1 and localhost: addresses only this machine reaches. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}
