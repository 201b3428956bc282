/**
 * The bridge's caches, one set its reconcilers share: Proxies, ProxyPools
 * and the cloud-init Secrets (labelled ones only), each one list+watch per
 * watched scope. Watch events of the Proxies and Secrets, and restarts of
 * all three, are counted by resource.
 */
import type { KubeConfig, V1Secret } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Proxy, ProxyPool } from '../resources/proxy-schema.js';
import { createCloudInitSecretInformer } from '../kube/cloud-init.js';
import type { ResilientInformer } from '../kube/informer.js';
import { createCredentialsSecretInformer } from '../kube/proxy-credentials.js';
import { createProxyInformer } from '../kube/proxy-informer.js';
import { createProxyPoolInformer } from '../kube/proxy-pool-informer.js';
import type { BridgeMetrics } from './metrics.js';

export interface BridgeInformers {
  proxies: ResilientInformer<Proxy>;
  pools: ResilientInformer<ProxyPool>;
  secrets: ResilientInformer<V1Secret>;
  /** Secrets labelled as proxy credentials: the generated ones the bridge makes. */
  credentialSecrets: ResilientInformer<V1Secret>;
}

export function createBridgeInformers(deps: {
  kubeConfig: KubeConfig;
  /** The namespaces watched, one list+watch each (`[undefined]`: all at once). */
  scopes: ReadonlyArray<string | undefined>;
  metrics: BridgeMetrics;
  log: Logger;
  /** The pool reconciler's logger, for the pool list+watch. */
  poolLog: Logger;
}): BridgeInformers {
  const { kubeConfig, scopes, metrics, log } = deps;
  const restarted = (resource: string) => () => metrics.informerRestarts.inc({ resource });
  const proxies = createProxyInformer({
    kubeConfig,
    logger: log,
    namespaces: scopes.filter((n) => n !== undefined),
    onRestart: restarted('proxies'),
  });
  const secrets = createCloudInitSecretInformer({
    kubeConfig,
    logger: log,
    scopes,
    onRestart: restarted('secrets'),
  });
  const credentialSecrets = createCredentialsSecretInformer({
    kubeConfig,
    logger: log,
    scopes,
    onRestart: restarted('credential-secrets'),
  });
  proxies.onChange((_proxy, event) => metrics.watchEvents.inc({ resource: 'proxies', event }));
  secrets.onChange((_secret, event) => metrics.watchEvents.inc({ resource: 'secrets', event }));
  return {
    proxies,
    pools: createProxyPoolInformer({
      kubeConfig,
      logger: deps.poolLog,
      scopes,
      onRestart: restarted('proxypools'),
    }),
    secrets,
    credentialSecrets,
  };
}
