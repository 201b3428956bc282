/**
 * The Proxy list+watch, in all namespaces or in listed ones (a
 * namespace-scoped install, tests). One per process: the api process shares
 * it between the lease API's catalog and the prober.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Proxy } from '../resources/proxy-schema.js';
import type { ResilientInformer } from './informer.js';
import { createCustomResourceClient } from './custom-resources.js';
import { PROXY_KIND } from './proxies.js';
import { createCustomResourceInformer, watchScopes } from './namespaced-informer.js';

export interface ProxyInformerOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** Watch one namespace only (tests); all namespaces by default. */
  namespace?: string;
  /** Watch these namespaces only, one watch each (`--watch-namespaces`); all namespaces by default. */
  namespaces?: readonly string[];
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Called each time the watch is scheduled to restart after an error. */
  onRestart?: () => void;
}

export function createProxyInformer(options: ProxyInformerOptions): ResilientInformer<Proxy> {
  const { namespace, namespaces, kubeConfig, ...rest } = options;
  return createCustomResourceInformer({
    ...rest,
    kubeConfig,
    objects: createCustomResourceClient<Proxy>(kubeConfig, PROXY_KIND),
    scopes: watchScopes(namespace ? [namespace] : namespaces),
  });
}
