/**
 * The Proxy list+watch, in all namespaces or in listed ones (a
 * namespace-scoped install, tests). One per process: the api process shares
 * it between the lease API's catalog and the prober.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Proxy } from '../resources/proxy-schema.js';
import { createResilientInformer, type ResilientInformer } from './informer.js';
import { createProxyClient, proxyWatchPath } from './proxies.js';
import { unionInformers, watchScopes } from './namespaced-informer.js';

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
  const { kubeConfig } = options;
  const proxies = createProxyClient(kubeConfig);
  const scopes = watchScopes(options.namespace ? [options.namespace] : options.namespaces);
  return unionInformers(
    scopes.map((namespace) =>
      createResilientInformer<Proxy>({
        kubeConfig,
        path: proxyWatchPath(namespace),
        list: () => proxies.list(namespace),
        logger: options.logger,
        initialBackoffMs: options.initialBackoffMs,
        maxBackoffMs: options.maxBackoffMs,
        ...(options.onRestart ? { onRestart: options.onRestart } : {}),
      }),
    ),
  );
}
