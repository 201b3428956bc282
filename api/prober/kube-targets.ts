/**
 * Probe targets from the apiserver: a resilient list+watch over Proxies
 * (all namespaces, or one), each reduced to its probe target. Deletes seen
 * on a re-list after a watch outage are delivered by the informer, so the
 * map never keeps a proxy that is gone.
 */
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { createResilientInformer } from '../../k8s-bridge/informer.js';
import { GROUP, PROXY_PLURAL, VERSION, type Proxy } from '../../resources/proxy-schema.js';
import { TargetMap, proxyKey, targetFromProxy, type ProbeTargetSource } from './targets.js';

export interface ProxyProbeTargetsOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** Watch one namespace only (tests); all namespaces by default. */
  namespace?: string;
}

export function createProxyProbeTargets(options: ProxyProbeTargetsOptions): ProbeTargetSource {
  const { kubeConfig, namespace } = options;
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  const map = new TargetMap();
  const path = namespace
    ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PROXY_PLURAL}`
    : `/apis/${GROUP}/${VERSION}/${PROXY_PLURAL}`;
  const list = () =>
    namespace
      ? api.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PROXY_PLURAL })
      : api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PROXY_PLURAL });

  const informer = createResilientInformer<Proxy>({
    kubeConfig,
    path,
    list,
    logger: options.logger.child({ component: 'prober-targets' }),
    onChange(proxy, kind) {
      const { name, namespace: ns } = proxy.metadata ?? {};
      if (!name || !ns) return;
      map.put(proxyKey({ namespace: ns, name }), kind === 'delete' ? undefined : targetFromProxy(proxy));
    },
  });

  return {
    start: () => informer.start(),
    stop: () => informer.stop(),
    get: (key) => map.get(key),
    list: () => map.list(),
    subscribe: (listener) => map.subscribe(listener),
  };
}
