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

export const DEFAULT_GATEWAY_ADDR = ':8080';
/** `dev` binds the loopback; a taken port is replaced by a free one. */
export const DEV_GATEWAY_ADDR = '127.0.0.1:8092';
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
export const DEFAULT_ATTEMPTS = 3;
export const DEFAULT_RATE_LIMIT_STATUSES = [429, 403] as const;
export const DEFAULT_MAX_TARGET_LABELS = 500;

export const gatewayOptionsSchema = z.strictObject({
  /** Listen host; '' means every interface. */
  host: z.string(),
  port: z.int().min(0).max(65535),
  /** The API token crawlers send as the proxy password; '' accepts any password. */
  token: z.string(),
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
});
export type GatewayOptions = z.infer<typeof gatewayOptionsSchema>;

/** The gateway's flags as commander parsed them (strings), plus the lease flags it shares with `api`. */
export interface GatewayFlags extends Omit<ApiFlags, 'discoveryAddr'> {
  /** `--gateway-addr`, `host:port` or `:port` (default `:8080`). */
  gatewayAddr?: string | undefined;
  /** `--gateway-connect-timeout`, a duration (default 5s). */
  gatewayConnectTimeout?: string | undefined;
  /** `--gateway-attempts`, upstream proxies tried per connection (default 3). */
  gatewayAttempts?: string | undefined;
  /** `--gateway-rate-limit-statuses`, comma-separated (default `429,403`); empty turns it off. */
  gatewayRateLimitStatuses?: string | undefined;
  /** `--gateway-max-target-labels` (default 500). */
  gatewayMaxTargetLabels?: string | undefined;
}

export class GatewayConfigError extends Error {
  override name = 'GatewayConfigError';
}

export function readGatewayConfig(
  env: Readonly<Record<string, string | undefined>>,
  flags: GatewayFlags = {},
  defaults: { gatewayAddr?: string } = {},
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
  const parsed = gatewayOptionsSchema.safeParse({
    host: address.host,
    port: address.port,
    token: lease.token,
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
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const flag = { attempts: '--gateway-attempts' }[issue.path[0] as string] ?? issue.path.join('.');
    throw new GatewayConfigError(`${flag}: ${issue.message}`);
  }
  return parsed.data;
}
