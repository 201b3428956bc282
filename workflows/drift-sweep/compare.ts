/**
 * The drift sweep's rule (pure): which steady Proxies' instances differ
 * from what their workflow last recorded. What a workflow recorded is read
 * from the Proxy's status, which only the workflow writes: a Provisioned
 * condition that is True with reason Running, a providerID and an IP. A
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
  provisioned?: { status: string; reason?: string };
}

export interface ListedInstanceState {
  id: string;
  state: InstanceState;
  ip?: string;
}

export interface Drift {
  ref: ProxyRef;
  report: DriftReport;
  /** For the log line. */
  why: 'gone' | 'not-running' | 'address-changed';
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

/** The steady Proxies of `provider` whose listed instance is missing, not Running, or elsewhere. */
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
    }
  }
  return { compared, drifted };
}
