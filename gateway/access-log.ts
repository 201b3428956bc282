/**
 * The gateway's access log: one line per connection (a CONNECT tunnel or a
 * plain-HTTP request), written when it ends. Never the Proxy-Authorization
 * header, the password or a URL path (which may carry a crawler's own
 * secrets).
 */
import type { Logger } from 'pino';
import type { ConnectionKind } from './metrics.js';

export interface AccessEntry {
  kind: ConnectionKind;
  /** The crawler's address, as its connection shows it. */
  client: string;
  /** The tenant its token named, once known. */
  tenant?: string | undefined;
  /** The CONNECT authority or the request URL's host. */
  target: string;
  /** The upstream proxy that carried it, if one did. */
  proxy?: string | undefined;
  session?: string | undefined;
  status: number;
  /** `performance.now()` when the connection arrived. */
  started: number;
  /** Upstream attempts made (0 when refused before any). */
  attempts: number;
  sentBytes: number;
  receivedBytes: number;
  /** `socks5` for the SOCKS5 listener's tunnels; absent for the HTTP listener's. */
  via?: 'socks5' | undefined;
}

export type AccessLog = (entry: AccessEntry) => void;

export function createAccessLog(log: Logger): AccessLog {
  return ({
    kind,
    client,
    tenant,
    target,
    proxy,
    session,
    status,
    started,
    attempts,
    sentBytes,
    receivedBytes,
    via,
  }) => {
    log.info(
      {
        kind,
        ...(via ? { via } : {}),
        client,
        ...(tenant !== undefined ? { tenant } : {}),
        target,
        ...(proxy ? { proxy } : {}),
        ...(session !== undefined ? { session } : {}),
        status,
        attempts,
        sentBytes,
        receivedBytes,
        durationMs: Math.round((performance.now() - started) * 10) / 10,
      },
      'gateway access',
    );
  };
}

/** The line of a connection refused before or while an upstream was picked: nothing was carried. */
export function refusedEntry(
  kind: ConnectionKind,
  target: string,
  status: number,
  started: number,
  who: { client: string; tenant: string | undefined; session: string | undefined },
): AccessEntry {
  return { kind, target, status, started, ...who, attempts: 0, sentBytes: 0, receivedBytes: 0 };
}
