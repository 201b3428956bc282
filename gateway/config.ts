/**
 * Gateway configuration: read once, validated, typed. The lease settings
 * (token, cooldown, maximum TTL, store) are the lease API's, read by the
 * same code, so a gateway and the api replicas beside it agree on them.
 */
import { z } from 'zod';
import {
  ApiConfigError,
  leaseStoreSchema,
  parseDuration,
  parseListenAddress,
  readApiConfig,
  type ApiFlags,
} from '../api/config.js';
import { GatewayConfigError } from './config-error.js';
import { readLimitFlags, type GatewayLimitFlags } from './limits-config.js';
import {
  createEgressPolicy,
  DEFAULT_EGRESS_POLICY,
  describePorts,
  EgressPolicyError,
  parseCidrList,
  parsePortList,
} from '../forwarding/egress-policy.js';

export const DEFAULT_GATEWAY_ADDR = ':8080';
/** `dev` binds the loopback; a taken port is replaced by a free one. */
export const DEV_GATEWAY_ADDR = '127.0.0.1:8092';
/** `dev`'s SOCKS5 listener; a taken port is replaced by a free one. A standalone gateway has none unasked. */
export const DEV_GATEWAY_SOCKS_ADDR = '127.0.0.1:8093';
/**
 * What `dev` starts its gateway with: its targets (the IP echo, the probe
 * target) live on the loopback on ports of their own, so it allows the
 * loopback (an allowance opens every port of its range), and its banner says
 * so. A standalone gateway never allows the loopback unasked.
 */
export const DEV_GATEWAY_DEFAULTS = {
  gatewayAddr: DEV_GATEWAY_ADDR,
  gatewaySocksAddr: DEV_GATEWAY_SOCKS_ADDR,
  egressAllowCidrs: '127.0.0.0/8,::1/128',
} as const;
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
export const DEFAULT_ATTEMPTS = 3;
export const DEFAULT_RATE_LIMIT_STATUSES = [429, 403] as const;
export const DEFAULT_MAX_TARGET_LABELS = 500;

export const gatewayOptionsSchema = z.strictObject({
  /** Listen host; '' means every interface. */
  host: z.string(),
  port: z.int().min(0).max(65535),
  /** `--gateway-socks-addr`: the SOCKS5 listener's address (gateway/socks.ts); none: no SOCKS5 listener. */
  socks: z.strictObject({ host: z.string(), port: z.int().min(0).max(65535) }).optional(),
  /** The API token crawlers send as the proxy password; '' accepts any password. */
  token: z.string(),
  /** `--insecure-no-auth`: serve without a token off the loopback, knowingly. */
  insecureNoAuth: z.boolean(),
  /** `--tenants-file`: named clients with their own tokens, scopes and limits (tenants/). */
  tenantsFile: z.string().optional(),
  /** Wrong passwords per client address per minute before 429 (0: off). */
  authFailuresPerMinute: z.int().min(0),
  /** A tunnel or exchange carrying nothing for this long is closed (0: never). */
  tunnelIdleTimeoutMs: z.int().min(0),
  /** A tunnel is closed after this long whatever it carries (0: never). */
  tunnelMaxLifetimeMs: z.int().min(0),
  /** A whole plain-HTTP exchange, however its answer drips (0: no bound). */
  responseTimeoutMs: z.int().min(0),
  /** Open tunnels and requests per client address (0: no bound). */
  maxTunnelsPerClient: z.int().min(0),
  /** Client connections held at once (Node's server.maxConnections). */
  maxConnections: z.int().positive(),
  leaseCooldownMs: z.int().positive(),
  maxLeaseTtlSeconds: z.int().positive(),
  /** A tunnel's or session's lease when the username names no ttl. */
  defaultLeaseTtlSeconds: z.int().positive(),
  leaseStore: leaseStoreSchema,
  /** Bound on reaching an upstream proxy and reading its answer to CONNECT. */
  connectTimeoutMs: z.int().positive(),
  /** Upstream proxies tried per connection (the first and its retries). */
  attempts: z.int().min(1).max(10),
  /** Plain-HTTP statuses from the target that report `rate_limited` for it. */
  rateLimitStatuses: z.array(z.int().min(100).max(599)),
  /** Distinct targets given their own metric label; the rest count as `other`. */
  maxTargetLabels: z.int().min(0),
  /** Where crawlers may reach (forwarding/egress-policy.ts): ranges denied on top of the defaults. */
  egressDenyCidrs: z.array(z.string()),
  /** Exceptions to the denied ranges (the loopback only when named). */
  egressAllowCidrs: z.array(z.string()),
  /** Destination ports allowed, inclusive ranges. */
  egressAllowPorts: z.array(z.tuple([z.int(), z.int()])),
  /** A DNS server (`ip:port`) the gateway resolves targets with instead of the system's resolver. */
  egressResolver: z.string().optional(),
});
export type GatewayOptions = z.infer<typeof gatewayOptionsSchema>;

/** The gateway's flags as commander parsed them (strings), plus the lease flags it shares with `api`. */
export interface GatewayFlags extends Omit<ApiFlags, 'discoveryAddr'>, GatewayLimitFlags {
  /** `--gateway-addr`, `host:port` or `:port` (default `:8080`). */
  gatewayAddr?: string | undefined;
  /** `--gateway-socks-addr`, `host:port` or `:port` (default: no SOCKS5 listener; dev 127.0.0.1:8093). */
  gatewaySocksAddr?: string | undefined;
  /** `--gateway-connect-timeout`, a duration (default 5s). */
  gatewayConnectTimeout?: string | undefined;
  /** `--gateway-attempts`, upstream proxies tried per connection (default 3). */
  gatewayAttempts?: string | undefined;
  /** `--gateway-rate-limit-statuses`, comma-separated (default `429,403`); empty turns it off. */
  gatewayRateLimitStatuses?: string | undefined;
  /** `--gateway-max-target-labels` (default 500). */
  gatewayMaxTargetLabels?: string | undefined;
  /** `--egress-deny-cidrs`, comma-separated, added to the default denied ranges. */
  egressDenyCidrs?: string | undefined;
  /** `--egress-allow-cidrs`, comma-separated exceptions. */
  egressAllowCidrs?: string | undefined;
  /** `--egress-allow-ports`, like `80,443,8000-8999` or `any` (default 80,443). */
  egressAllowPorts?: string | undefined;
  /** `--egress-resolver`, `ip:port` of a DNS server. */
  egressResolver?: string | undefined;
}

export { GatewayConfigError };

export function readGatewayConfig(
  env: Readonly<Record<string, string | undefined>>,
  flags: GatewayFlags = {},
  defaults: {
    gatewayAddr?: string;
    gatewaySocksAddr?: string;
    egressAllowCidrs?: string;
    egressAllowPorts?: string;
  } = {},
): GatewayOptions {
  let lease;
  try {
    // The address is the api's own; only the lease settings are taken.
    lease = readApiConfig(env, { ...flags, discoveryAddr: undefined });
  } catch (error) {
    if (error instanceof ApiConfigError) throw new GatewayConfigError(error.message);
    throw error;
  }
  let address: { host: string; port: number };
  try {
    address = parseListenAddress(
      flags.gatewayAddr ?? defaults.gatewayAddr ?? DEFAULT_GATEWAY_ADDR,
      '--gateway-addr',
    );
  } catch (error) {
    throw new GatewayConfigError((error as Error).message);
  }
  let socks: { host: string; port: number } | undefined;
  const socksAddr = flags.gatewaySocksAddr ?? defaults.gatewaySocksAddr;
  if (socksAddr !== undefined) {
    try {
      socks = parseListenAddress(socksAddr, '--gateway-socks-addr');
    } catch (error) {
      throw new GatewayConfigError((error as Error).message);
    }
  }
  let connectTimeoutMs = DEFAULT_CONNECT_TIMEOUT_MS;
  if (flags.gatewayConnectTimeout !== undefined) {
    try {
      connectTimeoutMs = parseDuration(flags.gatewayConnectTimeout);
    } catch (error) {
      throw new GatewayConfigError(`--gateway-connect-timeout: ${(error as Error).message}`);
    }
    if (!(connectTimeoutMs > 0)) throw new GatewayConfigError('--gateway-connect-timeout must be positive');
  }
  const wholeNumber = (text: string | undefined, flag: string, fallback: number): number => {
    if (text === undefined) return fallback;
    if (!/^\d{1,9}$/.test(text.trim()))
      throw new GatewayConfigError(`${flag}: must be a whole number, got ${JSON.stringify(text)}`);
    return Number(text.trim());
  };
  let rateLimitStatuses: number[] = [...DEFAULT_RATE_LIMIT_STATUSES];
  if (flags.gatewayRateLimitStatuses !== undefined) {
    const text = flags.gatewayRateLimitStatuses.trim();
    rateLimitStatuses =
      text === ''
        ? []
        : text.split(',').map((part) => {
            if (!/^\s*[1-5]\d\d\s*$/.test(part))
              throw new GatewayConfigError(
                `--gateway-rate-limit-statuses: expected HTTP status codes like 429,403, got ${JSON.stringify(part.trim())}`,
              );
            return Number(part.trim());
          });
  }
  const egress = readEgressFlags(flags, defaults);
  const parsed = gatewayOptionsSchema.safeParse({
    host: address.host,
    port: address.port,
    ...(socks ? { socks } : {}),
    token: lease.token,
    insecureNoAuth: lease.insecureNoAuth,
    ...(lease.tenantsFile !== undefined ? { tenantsFile: lease.tenantsFile } : {}),
    authFailuresPerMinute: lease.authFailuresPerMinute,
    ...readLimitFlags(flags, wholeNumber),
    leaseCooldownMs: lease.leaseCooldownMs,
    maxLeaseTtlSeconds: lease.maxLeaseTtlSeconds,
    defaultLeaseTtlSeconds: lease.defaultLeaseTtlSeconds,
    leaseStore: lease.leaseStore,
    connectTimeoutMs,
    attempts: wholeNumber(flags.gatewayAttempts, '--gateway-attempts', DEFAULT_ATTEMPTS),
    rateLimitStatuses: [...new Set(rateLimitStatuses)],
    maxTargetLabels: wholeNumber(
      flags.gatewayMaxTargetLabels,
      '--gateway-max-target-labels',
      DEFAULT_MAX_TARGET_LABELS,
    ),
    ...egress,
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const flag =
      (
        { attempts: '--gateway-attempts', maxConnections: '--gateway-max-connections' } as Record<
          string,
          string | undefined
        >
      )[issue.path[0] as string] ?? issue.path.join('.');
    throw new GatewayConfigError(`${flag}: ${issue.message}`);
  }
  return parsed.data;
}

/** The egress flags, checked as one policy (a bad CIDR or port is named here, at start). */
function readEgressFlags(
  flags: GatewayFlags,
  defaults: { egressAllowCidrs?: string; egressAllowPorts?: string },
): Pick<GatewayOptions, 'egressDenyCidrs' | 'egressAllowCidrs' | 'egressAllowPorts' | 'egressResolver'> {
  try {
    const allowCidrs = flags.egressAllowCidrs ?? defaults.egressAllowCidrs;
    const allowPorts = flags.egressAllowPorts ?? defaults.egressAllowPorts;
    const spec = {
      denyCidrs: parseCidrList(flags.egressDenyCidrs ?? '', '--egress-deny-cidrs'),
      allowCidrs: parseCidrList(allowCidrs ?? '', '--egress-allow-cidrs'),
      allowPorts:
        allowPorts === undefined
          ? DEFAULT_EGRESS_POLICY.allowPorts.map(([a, b]) => [a, b] as [number, number])
          : parsePortList(allowPorts, '--egress-allow-ports'),
    };
    createEgressPolicy(spec);
    const resolver = flags.egressResolver?.trim();
    if (resolver !== undefined && !/^(\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/.test(resolver))
      throw new EgressPolicyError(
        `--egress-resolver: expected the ip:port of a DNS server (like 10.96.0.10:53), got ${JSON.stringify(resolver)}`,
      );
    return {
      egressDenyCidrs: spec.denyCidrs,
      egressAllowCidrs: spec.allowCidrs,
      egressAllowPorts: spec.allowPorts,
      ...(resolver !== undefined ? { egressResolver: resolver } : {}),
    };
  } catch (error) {
    if (error instanceof EgressPolicyError) throw new GatewayConfigError(error.message);
    throw error;
  }
}

/** The policy in one line, for the banner and the start-up log. */
export function describeEgressPolicy(
  options: Pick<GatewayOptions, 'egressDenyCidrs' | 'egressAllowCidrs' | 'egressAllowPorts'>,
  dev = false,
): string {
  const policy = createEgressPolicy({
    denyCidrs: options.egressDenyCidrs,
    allowCidrs: options.egressAllowCidrs,
    allowPorts: options.egressAllowPorts,
  });
  const head = policy.allowsLoopback
    ? `egress policy: loopback allowed${dev ? ' (dev)' : ''}`
    : `egress policy: private, loopback and link-local addresses refused${dev ? ' (dev)' : ''}`;
  const parts = [head];
  if (options.egressAllowCidrs.length > 0) parts.push(`allowed ${options.egressAllowCidrs.join(',')}`);
  if (options.egressDenyCidrs.length > 0) parts.push(`also refused ${options.egressDenyCidrs.join(',')}`);
  parts.push(`ports ${describePorts(options.egressAllowPorts)}`);
  return parts.join('; ');
}
