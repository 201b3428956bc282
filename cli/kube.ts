import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { reuseConnections } from '../kube/connections.js';

/**
 * A kubeconfig file when given; otherwise in-cluster config, then the
 * default loading rules. Its requests share keep-alive connections
 * (kube/connections.ts).
 */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return reuseConnections(kc);
}

/**
 * The installation identity when none is configured: derived from the UID of
 * the cluster's `default` namespace, which is unique per cluster and stable
 * for its lifetime. Two installations in one cluster must configure
 * distinct ids.
 */
export async function deriveInstallation(kc: KubeConfig): Promise<string> {
  const ns = await kc.makeApiClient(CoreV1Api).readNamespace({ name: 'default' });
  const uid = ns.metadata?.uid ?? '';
  if (!uid) throw new Error('cannot derive the installation id: the default namespace has no UID');
  return `cluster-${uid.replace(/-/g, '').slice(0, 16)}`;
}
