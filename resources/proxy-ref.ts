/**
 * A Proxy's identity: namespace, name and UID (a Proxy deleted and
 * recreated under the same name is another Proxy). Here, in the lowest
 * layer, because every room names Proxies by it: the workflows (sandbox,
 * pure data only), the activities, the bridge, the prober and the
 * Kubernetes gateway in `kube/`, which re-exports it.
 */
import type { Proxy } from './proxy-schema.js';

export interface ProxyRef {
  namespace: string;
  name: string;
  uid: string;
}

export function refOf(proxy: Proxy): ProxyRef {
  return {
    namespace: proxy.metadata.namespace ?? 'default',
    name: proxy.metadata.name,
    uid: proxy.metadata.uid ?? '',
  };
}

/** `namespace/name`: the key Proxies are queued, cached and labelled by (the bridge's work queue, the prober, metrics). */
export function proxyKey(ref: { namespace: string; name: string }): string {
  return `${ref.namespace}/${ref.name}`;
}
