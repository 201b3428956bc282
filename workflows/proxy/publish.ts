/**
 * Publishing the state: the Proxy's status, written only when it changed
 * (a local activity), and the ProxyPhase search attribute, upserted only
 * when the phase moved. Every wait publishes first (waits.ts).
 */
import { log, upsertSearchAttributes } from '@temporalio/workflow';
import { failureOf, kubeLocal } from './activity-proxies.js';
import type { ProxyEntity } from './entity.js';
import { ProxyPhaseKey } from './search-attributes.js';
import { buildStatus } from './status.js';

export async function publish(entity: ProxyEntity): Promise<void> {
  const { state } = entity;
  const status = buildStatus(state, new Date());
  const serialised = JSON.stringify(status);
  if (serialised !== state.lastWrittenStatus) {
    try {
      const outcome = await kubeLocal.writeProxyStatus({
        ref: state.ref,
        status,
        ...(entity.knownStatus ? { previous: entity.knownStatus } : {}),
      });
      state.lastWrittenStatus = serialised;
      entity.knownStatus = status;
      if (outcome === 'gone') entity.proxyGone();
    } catch (error) {
      // It may have landed before it failed: the next write reads what is there.
      entity.knownStatus = undefined;
      log.warn('status write failed; will retry on the next change', { error: failureOf(error).message });
    }
  }
  if (state.phase !== state.indexedPhase) {
    upsertSearchAttributes([{ key: ProxyPhaseKey, value: state.phase }]);
    state.indexedPhase = state.phase;
  }
}
