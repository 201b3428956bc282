/**
 * The ProxyPool list+watch, in all namespaces or in listed ones: the
 * bridge's (to start and signal pool workflows) and the api's (to know which
 * pools want demand reports).
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ProxyPool } from '../resources/proxy-schema.js';
import { createResilientInformer, type ResilientInformer } from './informer.js';
import { unionInformers } from './namespaced-informer.js';
import { createProxyPoolClient, proxyPoolWatchPath } from './proxy-pools.js';

export function createProxyPoolInformer(options: {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** One watch per scope (`watchScopes`: undefined is every namespace). */
  scopes: ReadonlyArray<string | undefined>;
}): ResilientInformer<ProxyPool> {
  const client = createProxyPoolClient(options.kubeConfig);
  return unionInformers(
    options.scopes.map((namespace) =>
      createResilientInformer<ProxyPool>({
        kubeConfig: options.kubeConfig,
        path: proxyPoolWatchPath(namespace),
        list: () => client.list(namespace),
        logger: options.logger,
      }),
    ),
  );
}
