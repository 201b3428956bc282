/**
 * Which Proxies a request selects: the seed's attribute selector (and,
 * beyond the seed, the ProxyPool that made them), and the lease candidates
 * among them.
 */
import type { ProxyView } from '../proxy-catalog.js';

export interface Partition {
  /** Healthy, addressed, selector-matching proxies not being deleted: what the store chooses from. */
  candidates: readonly ProxyView[];
  /** Selector-matching proxies not being deleted that cannot be leased (draining ones are not counted: they are going). */
  unhealthy: number;
}

/**
 * Unhealthy matches never reach the store, so they are counted here. A
 * proxy without an address cannot be used even if a stale Healthy
 * condition says True; it counts as unhealthy.
 */
export function partition(
  views: readonly ProxyView[],
  selector: ReadonlyArray<[string, string]>,
  pool?: string,
): Partition {
  const candidates: ProxyView[] = [];
  let unhealthy = 0;
  for (let i = 0; i < views.length; i++) {
    const p = views[i]!;
    if (p.deleting || (selector.length > 0 && !matches(p, selector))) continue;
    if (pool !== undefined && p.pool !== pool) continue;
    // Draining or cordoned: its held leases end in their own time, it takes no new one.
    if (p.draining || p.cordoned) continue;
    if (!p.healthy || p.host === '') unhealthy++;
    else candidates.push(p);
  }
  return { candidates, unhealthy };
}

/**
 * Every selector pair must equal the proxy's attribute, and a missing
 * attribute reads as "" (a Go map lookup), so `attr.geo=` selects the
 * proxies without a geo.
 */
export function matches(p: ProxyView, selector: ReadonlyArray<[string, string]>): boolean {
  for (const [key, value] of selector) {
    if ((Object.hasOwn(p.attributes, key) ? p.attributes[key] : '') !== value) return false;
  }
  return true;
}
