/**
 * Every Proxy, page by page: in all namespaces with one cluster-wide list,
 * or in each listed namespace (a namespace-scoped install, whose Roles
 * grant no cluster-wide list). The worker's GC and drift sweep read this.
 */
import type { CustomObjectsApi } from '@kubernetes/client-node';
import { GROUP, PROXY_PLURAL, VERSION, type Proxy } from '../resources/proxy-schema.js';

export async function listAllProxies(
  api: CustomObjectsApi,
  opts: { namespaces?: readonly string[]; pageSize: number },
): Promise<Proxy[]> {
  const out: Proxy[] = [];
  const scopes: Array<string | undefined> =
    opts.namespaces && opts.namespaces.length > 0 ? [...opts.namespaces] : [undefined];
  for (const namespace of scopes) {
    let next: string | undefined;
    do {
      const common = {
        group: GROUP,
        version: VERSION,
        plural: PROXY_PLURAL,
        limit: opts.pageSize,
        ...(next === undefined ? {} : { _continue: next }),
      };
      const page = (await (namespace === undefined
        ? api.listClusterCustomObject(common)
        : api.listNamespacedCustomObject({ ...common, namespace }))) as {
        items: Proxy[];
        metadata?: { continue?: string };
      };
      out.push(...page.items);
      next = page.metadata?.continue || undefined;
    } while (next !== undefined);
  }
  return out;
}
