/**
 * The ProxyPool list+watch, in all namespaces or in listed ones: the
 * bridge's (to start and signal pool workflows) and the api's (to know which
 * pools want demand reports).
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ProxyPool } from '../resources/proxy-schema.js';
import type { ResilientInformer } from './informer.js';
import { createCustomResourceClient } from './custom-resources.js';
import { createCustomResourceInformer } from './namespaced-informer.js';
import { PROXY_POOL_KIND } from './proxy-pools.js';

export function createProxyPoolInformer(options: {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** One watch per scope (`watchScopes`: undefined is every namespace). */
  scopes: ReadonlyArray<string | undefined>;
  /** Called each time the watch is scheduled to restart after an error. */
  onRestart?: () => void;
}): ResilientInformer<ProxyPool> {
  return createCustomResourceInformer({
    ...options,
    objects: createCustomResourceClient<ProxyPool>(options.kubeConfig, PROXY_POOL_KIND),
  });
}
