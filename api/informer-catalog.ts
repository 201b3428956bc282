/**
 * The lease API's view of Proxies, derived from the process's Proxy
 * informer (kube/proxy-informer.ts), which the prober shares. The informer's
 * owner starts and stops it; until its first listing has loaded the catalog
 * reports itself unsynced.
 *
 * Kept up to date one event at a time: a change re-derives the view of the
 * one Proxy it is about, and the next read rebuilds the id-sorted snapshot
 * from the kept views. At 10,000 Proxies a rebuild of every view and a full
 * sort on each status write (a latency report, about 8 a second in the scale
 * bench's steady window) was most of what a lease waited for.
 */
import type { ResilientInformer } from '../kube/informer.js';
import type { Proxy } from '../resources/proxy-schema.js';
import { compareIds, proxyViewFromResource, type ProxyCatalog, type ProxyView } from './proxy-catalog.js';

export interface InformerProxyCatalog extends ProxyCatalog {
  /** Stops following the informer. */
  close(): void;
}

export function createInformerProxyCatalog(informer: ResilientInformer<Proxy>): InformerProxyCatalog {
  const idOf = (p: Proxy) => `${p.metadata.namespace ?? ''}/${p.metadata.name}`;
  /**
   * Views by id, in id order as long as only updates arrive (a Map keeps a
   * key's place when its value is replaced): the rebuild's sort then meets
   * sorted input, which V8's TimSort passes through in one linear run.
   */
  let views = new Map<string, ProxyView>();
  let snapshot: ProxyView[] = [];
  let dirty = true;
  /** A Proxy was added since the last rebuild: its key sits at the Map's end, out of id order. */
  let reorder = false;
  /** The informer's cache is the truth; the kept views are reloaded from it whole until the catalog has seen it synced. */
  let loaded = false;
  const reload = () => {
    const all = informer.list().map(proxyViewFromResource);
    all.sort((a, b) => compareIds(a.id, b.id));
    views = new Map(all.map((v) => [v.id, v]));
    loaded = informer.synced();
  };
  const unsubscribe = informer.onChange((proxy, event) => {
    dirty = true;
    if (!loaded) return;
    const id = idOf(proxy);
    if (event === 'delete') views.delete(id);
    else {
      if (!views.has(id)) reorder = true;
      views.set(id, proxyViewFromResource(proxy));
    }
  });
  // After an outage the informer relisted and told us the differences; reload
  // whole anyway, once, so nothing missed between the two can linger.
  const unsubscribeReconnect = informer.onReconnect(() => {
    loaded = false;
  });
  return {
    list() {
      if (!loaded) {
        reload();
        dirty = true;
      }
      if (dirty) {
        dirty = false;
        const next = [...views.values()];
        next.sort((a, b) => compareIds(a.id, b.id));
        // Back into id order, so the next rebuilds after updates sort sorted input.
        if (reorder) {
          views = new Map(next.map((v) => [v.id, v]));
          reorder = false;
        }
        snapshot = next;
      }
      return snapshot;
    },
    synced: () => informer.synced(),
    close: () => {
      unsubscribe();
      unsubscribeReconnect();
    },
  };
}
