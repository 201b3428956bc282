/**
 * The gateway's limit flags (README, "Limits"): durations where `0` turns a
 * bound off, and whole numbers, each read once and named when wrong.
 */
import { parseDuration } from '../api/config.js';
import { GatewayConfigError } from './config-error.js';

export const DEFAULT_TUNNEL_IDLE_TIMEOUT_MS = 5 * 60_000;
export const DEFAULT_RESPONSE_TIMEOUT_MS = 10 * 60_000;
export const DEFAULT_MAX_TUNNELS_PER_CLIENT = 256;
export const DEFAULT_MAX_CONNECTIONS = 10_000;

export interface GatewayLimitFlags {
  /** `--gateway-tunnel-idle-timeout`, a duration (default 5m; 0 off). */
  gatewayTunnelIdleTimeout?: string | undefined;
  /** `--gateway-tunnel-max-lifetime`, a duration (default 0: none). */
  gatewayTunnelMaxLifetime?: string | undefined;
  /** `--gateway-response-timeout`, a duration (default 10m). */
  gatewayResponseTimeout?: string | undefined;
  /** `--gateway-max-tunnels-per-client` (default 256; 0 none). */
  gatewayMaxTunnelsPerClient?: string | undefined;
  /** `--gateway-max-connections` (default 10000). */
  gatewayMaxConnections?: string | undefined;
}

/** The limits as milliseconds and counts; `wholeNumber` reads a count flag as the gateway's config does. */
export function readLimitFlags(
  flags: GatewayLimitFlags,
  wholeNumber: (text: string | undefined, flag: string, fallback: number) => number,
): {
  tunnelIdleTimeoutMs: number;
  tunnelMaxLifetimeMs: number;
  responseTimeoutMs: number;
  maxTunnelsPerClient: number;
  maxConnections: number;
} {
  return {
    tunnelIdleTimeoutMs: duration(
      flags.gatewayTunnelIdleTimeout,
      '--gateway-tunnel-idle-timeout',
      DEFAULT_TUNNEL_IDLE_TIMEOUT_MS,
    ),
    tunnelMaxLifetimeMs: duration(flags.gatewayTunnelMaxLifetime, '--gateway-tunnel-max-lifetime', 0),
    responseTimeoutMs: duration(
      flags.gatewayResponseTimeout,
      '--gateway-response-timeout',
      DEFAULT_RESPONSE_TIMEOUT_MS,
    ),
    maxTunnelsPerClient: wholeNumber(
      flags.gatewayMaxTunnelsPerClient,
      '--gateway-max-tunnels-per-client',
      DEFAULT_MAX_TUNNELS_PER_CLIENT,
    ),
    maxConnections: wholeNumber(
      flags.gatewayMaxConnections,
      '--gateway-max-connections',
      DEFAULT_MAX_CONNECTIONS,
    ),
  };
}

/** A duration flag in whole milliseconds; `0` (off) as it is. */
function duration(text: string | undefined, flag: string, fallback: number): number {
  if (text === undefined) return fallback;
  if (text.trim() === '0') return 0;
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (error) {
    throw new GatewayConfigError(`${flag}: ${(error as Error).message}`);
  }
  if (!(ms >= 0) || !Number.isSafeInteger(Math.round(ms)))
    throw new GatewayConfigError(`${flag}: must be a duration like 5m or 0`);
  return Math.round(ms);
}
