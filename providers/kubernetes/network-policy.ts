/**
 * The NetworkPolicy beside each Squid pod: the egress policy and the client
 * ranges once more, enforced by the cluster's network (where its CNI
 * enforces NetworkPolicy) under Squid's own ACLs, so a Squid misconfigured
 * or replaced by another image still cannot reach inward.
 *
 * - Ingress: the proxy port, from `clientCidrs` only.
 * - Egress: the allowed ports to everything outside the denied ranges
 *   (IPv4 and IPv6), the allowed ranges on every port, and DNS (53, UDP and
 *   TCP) to anywhere: Squid resolves names through the cluster's DNS service,
 *   which lives in a denied range.
 *
 * Owned by its pod, so the pod's deletion takes it (the provider deletes it
 * too, for clusters whose garbage collector lags).
 */
import type {
  V1NetworkPolicy,
  V1NetworkPolicyPeer,
  V1NetworkPolicyPort,
  V1Pod,
} from '@kubernetes/client-node';
import ipaddr from 'ipaddr.js';
import { createEgressPolicy } from '../../forwarding/egress-policy.js';
import { MARK_UID, type CreateRequest } from '../types.js';
import type { Apiserver } from './apiserver.js';
import { ensurePodOwned, removeIfPresent } from './pod-owned.js';
import type { KubernetesConfig } from './config.js';
import { markLabels, podNamespace } from './pod.js';

export function buildNetworkPolicy(
  req: CreateRequest,
  config: KubernetesConfig,
  pod: { uid: string },
): V1NetworkPolicy {
  const policy = createEgressPolicy(config.egress);
  const ipv4Denied = policy.deniedCidrs.filter((c) => !c.includes(':'));
  const ipv6Denied = policy.deniedCidrs.filter((c) => c.includes(':'));
  const ports: V1NetworkPolicyPort[] | undefined = config.egress.allowPorts.some(
    ([from, to]) => from === 1 && to === 65535,
  )
    ? undefined
    : config.egress.allowPorts.map(([from, to]) =>
        from === to ? { protocol: 'TCP', port: from } : { protocol: 'TCP', port: from, endPort: to },
      );
  const destinations: V1NetworkPolicyPeer[] = [
    { ipBlock: { cidr: '0.0.0.0/0', except: ipv4Denied.filter((c) => prefixOf(c) > 0) } },
    { ipBlock: { cidr: '::/0', except: ipv6Denied.filter((c) => prefixOf(c) > 0) } },
  ];
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: {
      name: req.name,
      namespace: podNamespace(req, config),
      labels: markLabels(req),
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: req.name, uid: pod.uid }],
    },
    spec: {
      podSelector: { matchLabels: { [MARK_UID]: req.uid } },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [
        {
          _from: config.clientCidrs.map((cidr) => ({ ipBlock: { cidr } })),
          ports: [{ protocol: 'TCP', port: req.port }],
        },
      ],
      egress: [
        { to: destinations, ...(ports ? { ports } : {}) },
        // The allowances, on every port.
        ...(policy.allowedCidrs.length > 0
          ? [{ to: policy.allowedCidrs.map((cidr) => ({ ipBlock: { cidr } })) }]
          : []),
        {
          ports: [
            { protocol: 'UDP', port: 53 },
            { protocol: 'TCP', port: 53 },
          ],
        },
      ],
    },
  };
}

/** An `except` must lie strictly inside its block; /0 never does. */
function prefixOf(cidr: string): number {
  return ipaddr.parseCIDR(cidr)[1];
}

/** Creates and deletes the pods' NetworkPolicies, through the provider's apiserver client. */
export class NetworkPolicies {
  constructor(
    private readonly apiserver: Apiserver,
    private readonly config: KubernetesConfig,
  ) {}

  /**
   * The pod's NetworkPolicy, created once the pod exists (it is owned by the
   * pod; the prober reaches the pod only after create returns, so nothing is
   * leased before it). One left by an earlier pod of the same name is replaced.
   */
  async ensure(req: CreateRequest, pod: V1Pod, signal: AbortSignal): Promise<void> {
    if (!this.config.networkPolicy) return;
    const { net } = await this.apiserver.api('create', req.name);
    const namespace = podNamespace(req, this.config);
    const body = buildNetworkPolicy(req, this.config, { uid: pod.metadata?.uid ?? '' });
    await ensurePodOwned(pod.metadata?.uid, {
      create: () =>
        this.apiserver.call(signal, 'create', 'createNamespacedNetworkPolicy', (o) =>
          net.createNamespacedNetworkPolicy({ namespace, body }, o),
        ),
      read: () =>
        this.apiserver.call(signal, 'create', 'readNamespacedNetworkPolicy', (o) =>
          net.readNamespacedNetworkPolicy({ namespace, name: req.name }, o),
        ),
      remove: () => this.remove(namespace, req.name, signal, 'create'),
    });
  }

  /** Deletes the pod's NetworkPolicy; one already gone is fine. */
  async remove(
    namespace: string,
    name: string,
    signal: AbortSignal,
    operation: 'create' | 'delete',
  ): Promise<void> {
    if (!this.config.networkPolicy) return;
    const { net } = await this.apiserver.api(operation, name);
    await removeIfPresent(() =>
      this.apiserver.call(signal, operation, 'deleteNamespacedNetworkPolicy', (o) =>
        net.deleteNamespacedNetworkPolicy({ namespace, name }, o),
      ),
    );
  }
}
