/**
 * Probe targets from the process's Proxy informer (shared with the lease
 * API), each Proxy reduced to its probe target. Deletes seen on a re-list
 * after a watch outage are delivered by the informer, so the map never keeps
 * a proxy that is gone. The informer's owner starts it before the prober.
 */
import type { ResilientInformer } from '../kube/informer.js';
import type { Proxy } from '../resources/proxy-schema.js';
import {
  TargetMap,
  proxyKey,
  targetFromProxy,
  type EntryHealthLookup,
  type ProbeTargetSource,
} from './targets.js';

export function createProxyProbeTargets(
  informer: ResilientInformer<Proxy>,
  /** The providers-config entries' `health:` blocks, when the api was given the providers config. */
  entryHealth?: EntryHealthLookup,
): ProbeTargetSource {
  const map = new TargetMap();
  let unsubscribe: (() => void) | undefined;
  const put = (proxy: Proxy, gone: boolean): void => {
    const { name, namespace } = proxy.metadata ?? {};
    if (!name || !namespace) return;
    map.put(proxyKey({ namespace, name }), gone ? undefined : targetFromProxy(proxy, entryHealth));
  };

  return {
    start() {
      if (unsubscribe) return Promise.reject(new Error('probe targets already started'));
      unsubscribe = informer.onChange((proxy, event) => put(proxy, event === 'delete'));
      for (const proxy of informer.list()) put(proxy, false);
      return Promise.resolve();
    },
    stop() {
      unsubscribe?.();
      unsubscribe = undefined;
      return Promise.resolve();
    },
    get: (key) => map.get(key),
    list: () => map.list(),
    subscribe: (listener) => map.subscribe(listener),
  };
}
