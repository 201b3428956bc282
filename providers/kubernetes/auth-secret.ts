/**
 * The htpasswd Squid checks a pod's clients against: one Secret per pod,
 * named like it, beside it (the pod may run in another namespace than its
 * Proxy, and a volume reads only its own namespace's Secrets), owned by the
 * pod so its deletion takes the Secret (the provider deletes it too, for a
 * cluster without the garbage collector). It holds the htpasswd line only
 * (Apache MD5 crypt), never the password, and is immutable: a pod keeps
 * the credentials it was made with while its replacement (a new pod, a new
 * Secret) gets new ones.
 */
import type { V1Pod, V1Secret } from '@kubernetes/client-node';
import { htpasswdLine, type ProxyCredentials } from '../../credentials/proxy-credentials.js';
import type { CreateRequest } from '../types.js';
import type { Apiserver } from './apiserver.js';
import type { KubernetesConfig } from './config.js';
import { HTPASSWD_KEY, markLabels, podNamespace } from './pod.js';
import { ensurePodOwned, removeIfPresent } from './pod-owned.js';

export function buildAuthSecret(
  req: CreateRequest,
  config: KubernetesConfig,
  pod: { uid: string },
  credentials: ProxyCredentials,
): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    immutable: true,
    metadata: {
      name: req.name,
      namespace: podNamespace(req, config),
      labels: markLabels(req),
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: req.name, uid: pod.uid }],
    },
    stringData: { [HTPASSWD_KEY]: `${htpasswdLine(credentials)}\n` },
  };
}

/** Creates and deletes the pods' htpasswd Secrets, through the provider's apiserver client. */
export class AuthSecrets {
  constructor(
    private readonly apiserver: Apiserver,
    private readonly config: KubernetesConfig,
  ) {}

  /** The pod's Secret, made once the pod exists; one left by an earlier pod of the same name is replaced. */
  async ensure(req: CreateRequest, pod: V1Pod, signal: AbortSignal): Promise<void> {
    if (!req.credentials) return;
    const { api } = await this.apiserver.api('create', req.name);
    const namespace = podNamespace(req, this.config);
    const body = buildAuthSecret(req, this.config, { uid: pod.metadata?.uid ?? '' }, req.credentials);
    await ensurePodOwned(pod.metadata?.uid, {
      create: () =>
        this.apiserver.call(signal, 'create', 'createNamespacedSecret', (o) =>
          api.createNamespacedSecret({ namespace, body }, o),
        ),
      read: () =>
        this.apiserver.call(signal, 'create', 'readNamespacedSecret', (o) =>
          api.readNamespacedSecret({ namespace, name: req.name }, o),
        ),
      remove: () => this.remove(namespace, req.name, signal, 'create'),
    });
  }

  /** Deletes the pod's Secret; one already gone is fine. */
  async remove(
    namespace: string,
    name: string,
    signal: AbortSignal,
    operation: 'create' | 'delete',
  ): Promise<void> {
    const { api } = await this.apiserver.api(operation, name);
    await removeIfPresent(() =>
      this.apiserver.call(signal, operation, 'deleteNamespacedSecret', (o) =>
        api.deleteNamespacedSecret({ namespace, name }, o),
      ),
    );
  }
}
