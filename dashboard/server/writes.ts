/**
 * The dashboard's two write actions, as a user would make them with
 * kubectl: a pool's scale subresource (`kubectl scale proxypool`) and a
 * Proxy's cordon annotation (`kubectl annotate`). The api's ServiceAccount
 * holds exactly these two rights for them (infra/k8s).
 */
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { ANNOTATION_CORDONED, GROUP, PROXY_POOL_PLURAL, VERSION } from '../../resources/proxy-schema.js';
import { createCustomResourceClient } from '../../kube/custom-resources.js';
import { PROXY_KIND } from '../../kube/proxies.js';
import type { Proxy } from '../../resources/proxy-schema.js';

export interface FleetWrites {
  scalePool(namespace: string, name: string, replicas: number): Promise<void>;
  cordonProxy(namespace: string, name: string, cordoned: boolean): Promise<void>;
}

export function createKubeFleetWrites(kc: KubeConfig): FleetWrites {
  const api = kc.makeApiClient(CustomObjectsApi);
  const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  const proxies = createCustomResourceClient<Proxy>(kc, PROXY_KIND);
  return {
    async scalePool(namespace, name, replicas) {
      await api.patchNamespacedCustomObjectScale(
        {
          group: GROUP,
          version: VERSION,
          plural: PROXY_POOL_PLURAL,
          namespace,
          name,
          body: { spec: { replicas } },
        },
        merge,
      );
    },
    async cordonProxy(namespace, name, cordoned) {
      await proxies.mergePatch(
        { namespace, name },
        { metadata: { annotations: { [ANNOTATION_CORDONED]: cordoned ? 'true' : null } } },
      );
    },
  };
}
