/**
 * The drift sweep's rule (pure): which steady Proxies' instances differ
 * from what their workflow last recorded. What a workflow recorded is read
 * from the Proxy's status, which only the workflow writes: a Provisioned
 * condition that is True with reason Running, a providerID and an IP (and
 * the end its provider announced, status.expiresAt). A
 * Proxy in any other state (provisioning, replacing, failed, deleting) polls
 * its instance on its own and is left out.
 */
import type { InstanceState } from '../../providers/types.js';
import type { DriftReport, ProxyRef } from '../proxy/types.js';

/** The fields of a Proxy the rule reads. */
export interface RecordedProxy {
  ref: ProxyRef;
  mode?: string;
  provider?: string;
  deleting: boolean;
  providerID?: string;
  ip?: string;
  /** RFC 3339: the end the workflow last recorded (status.expiresAt). */
  expiresAt?: string;
  provisioned?: { status: string; reason?: string };
}

export interface ListedInstanceState {
  id: string;
  state: InstanceState;
  ip?: string;
  /** RFC 3339: when the provider ends it by itself (a Spot interruption noticed since the last look). */
  expiresAt?: string;
}

export interface Drift {
  ref: ProxyRef;
  report: DriftReport;
  /** For the log line. */
  why: 'gone' | 'not-running' | 'address-changed' | 'expiring';
}

/** The same instant, or both absent (RFC 3339 strings may spell one instant in more than one way). */
function sameEnd(a: string | undefined, b: string | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return Date.parse(a) === Date.parse(b);
}

/**
 * The listed instances, each also under the other IDs its provider says
 * name it (idAliases: an older ID form still recorded on Proxies made
 * before it changed), so such a Proxy is matched instead of read as gone.
 */
export function withIdAliases(
  listed: readonly ListedInstanceState[],
  aliases: ((id: string) => readonly string[]) | undefined,
): ListedInstanceState[] {
  if (aliases === undefined) return [...listed];
  return listed.flatMap((i) => [i, ...aliases(i.id).map((id) => ({ ...i, id }))]);
}

/** True when the workflow recorded this Proxy's instance as Running at an address. */
export function isSteady(proxy: RecordedProxy, provider: string): boolean {
  return (
    proxy.mode === 'Managed' &&
    proxy.provider === provider &&
    !proxy.deleting &&
    Boolean(proxy.providerID) &&
    Boolean(proxy.ip) &&
    proxy.provisioned?.status === 'True' &&
    proxy.provisioned.reason === 'Running'
  );
}

/**
 * The steady Proxies of `provider` whose listed instance is missing, not
 * Running, elsewhere, or now ends at another time than recorded (a Spot
 * interruption announced: the workflow's look records it, so a pool
 * replaces the member drained before the end).
 */
export function findDrift(
  provider: string,
  proxies: readonly RecordedProxy[],
  listed: readonly ListedInstanceState[],
): { compared: number; drifted: Drift[] } {
  const byId = new Map(listed.map((i) => [i.id, i]));
  const drifted: Drift[] = [];
  let compared = 0;
  for (const proxy of proxies) {
    if (!isSteady(proxy, provider)) continue;
    compared += 1;
    const instanceId = proxy.providerID!;
    const instance = byId.get(instanceId);
    if (!instance) {
      drifted.push({ ref: proxy.ref, why: 'gone', report: { instanceId, observed: { found: false } } });
      continue;
    }
    const observed = {
      found: true as const,
      state: instance.state,
      ...(instance.ip ? { ip: instance.ip } : {}),
    };
    if (instance.state !== 'Running' || !instance.ip) {
      drifted.push({ ref: proxy.ref, why: 'not-running', report: { instanceId, observed } });
    } else if (instance.ip !== proxy.ip) {
      drifted.push({ ref: proxy.ref, why: 'address-changed', report: { instanceId, observed } });
    } else if (instance.expiresAt !== undefined && !sameEnd(instance.expiresAt, proxy.expiresAt)) {
      drifted.push({ ref: proxy.ref, why: 'expiring', report: { instanceId, observed } });
    }
  }
  return { compared, drifted };
}
