/**
 * The lease API's view of Proxies, derived from the process's Proxy
 * informer (kube/proxy-informer.ts), which the prober shares. The informer's
 * owner starts and stops it; until its first listing has loaded the catalog
 * reports itself unsynced.
 */
import type { ResilientInformer } from '../kube/informer.js';
import type { Proxy } from '../resources/proxy-schema.js';
import { sortedViews, type ProxyCatalog, type ProxyView } from './proxy-catalog.js';

export interface InformerProxyCatalog extends ProxyCatalog {
  /** Stops following the informer. */
  close(): void;
}

export function createInformerProxyCatalog(informer: ResilientInformer<Proxy>): InformerProxyCatalog {
  let snapshot: ProxyView[] = [];
  // Rebuilt lazily on the first read after a change: a burst of watch events
  // costs one sort, and an unchanged catalog hands out the same array.
  let dirty = true;
  const unsubscribe = informer.onChange(() => {
    dirty = true;
  });
  return {
    list() {
      if (dirty) {
        dirty = false;
        snapshot = sortedViews(informer.list());
      }
      return snapshot;
    },
    synced: () => informer.synced(),
    close: () => {
      unsubscribe();
    },
  };
}
