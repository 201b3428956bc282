/**
 * The `kubernetes` provider's config block. Pure: no I/O, no cluster access.
 *
 *   kubernetes:
 *     namespace: egress-proxies              # optional: where the Squid pods go; unset, each in its Proxy's namespace (the seed's behaviour)
 *     image: ubuntu/squid:6.6-24.04_edge     # the seed's pinned tag
 *     kubeconfig: /etc/egress-proxies/kubeconfig   # optional; default: in-cluster, then the default rules
 *     context: prod                          # optional; the kubeconfig's current context otherwise
 *     clientCidrs: [10.0.0.0/8, ...]         # who may use the proxies (Squid `src` ACL)
 *     resources: { cpuRequest: 50m, memoryRequest: 64Mi, memoryLimit: 256Mi }
 *     operationTimeoutSeconds: 10
 *     egress: { denyCidrs: [10.96.0.0/12], allowCidrs: [], allowPorts: [80, 443] }   # providers/shared/egress-config.ts
 *     networkPolicy: true                    # a NetworkPolicy beside each pod
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { egressConfigSchema } from '../shared/egress-config.js';

/** The seed's default image (`ubuntu/squid`, Canonical's maintained build), pinned by tag. */
export const DEFAULT_SQUID_IMAGE = 'ubuntu/squid:6.6-24.04_edge';

/**
 * Sources allowed to use a proxy by default: the private and shared ranges a
 * pod network is carved from (RFC 1918, RFC 6598 CGNAT, IPv6 ULA and
 * link-local). Everything else is denied, so a pod that ends up reachable
 * from outside the cluster is not an open proxy.
 */
export const DEFAULT_CLIENT_CIDRS = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10',
  'fc00::/7',
  'fe80::/10',
] as const;

/** Lowercase RFC 1123 label, at most 63 characters: namespace and pod names. */
export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** A Kubernetes resource quantity (`50m`, `64Mi`, `1G`, `0.5`). */
const QUANTITY = /^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/;

/** Returns an error message for a bad CIDR, or undefined. Host bits are not checked: Squid masks them. */
export function cidrProblem(text: string): string | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return `"${text}" is not a CIDR (want address/prefix, like 10.0.0.0/8)`;
  const address = text.slice(0, slash);
  const prefixText = text.slice(slash + 1);
  const family = isIP(address);
  if (family === 0) return `"${text}" does not start with an IPv4 or IPv6 address`;
  if (!/^[0-9]{1,3}$/.test(prefixText)) return `"${text}" has no numeric prefix length`;
  const prefix = Number(prefixText);
  const max = family === 4 ? 32 : 128;
  if (prefix > max) return `"${text}" has a prefix longer than /${max}`;
  return undefined;
}

const quantity = (example: string) =>
  z.string().regex(QUANTITY, `must be a Kubernetes quantity like ${example}`);

export const kubernetesConfigSchema = z.strictObject({
  /**
   * Namespace the pods are created in; it must match the worker's RBAC Role.
   * Unset: each pod goes in its Proxy's namespace (the seed's behaviour),
   * which needs pod create/get/delete in every namespace Proxies live in.
   */
  namespace: z
    .string()
    .regex(DNS1123_LABEL, 'must be a lowercase DNS-1123 label of at most 63 characters (a namespace name)')
    .optional(),
  /** Squid image. Must run `/bin/sh` and `squid` (the command writes the config, then execs Squid). */
  image: z
    .string()
    .min(1, 'must not be empty')
    .max(512)
    .regex(/^[^\s]+$/, 'must not contain whitespace')
    .default(DEFAULT_SQUID_IMAGE),
  /** A kubeconfig file. Unset: in-cluster config when running in a pod, else $KUBECONFIG or ~/.kube/config. */
  kubeconfig: z.string().min(1, 'must not be empty').optional(),
  /** A context of that kubeconfig; unset uses its current context. */
  context: z.string().min(1, 'must not be empty').optional(),
  /** Client source ranges the proxies accept (Squid `acl ... src`); all others are denied. */
  clientCidrs: z
    .array(
      z.string().superRefine((value, ctx) => {
        const problem = cidrProblem(value);
        if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
      }),
    )
    .min(1, 'must list at least one range (an empty list would deny every client)')
    .max(64)
    .default([...DEFAULT_CLIENT_CIDRS]),
  resources: z
    .strictObject({
      cpuRequest: quantity('50m').default('50m'),
      memoryRequest: quantity('64Mi').default('64Mi'),
      /** Squid with `cache_mem 16 MB` and 1,024 descriptors stays well below this. */
      memoryLimit: quantity('256Mi').default('256Mi'),
    })
    .default({ cpuRequest: '50m', memoryRequest: '64Mi', memoryLimit: '256Mi' }),
  /** Bound on each apiserver call (the caller's signal can only shorten it). */
  operationTimeoutSeconds: z.number().positive().max(600).default(10),
  /** Where crawlers may reach through the pods (Squid `dst` and `port` ACLs); the defaults refuse every internal range. */
  egress: egressConfigSchema.prefault({}),
  /** A NetworkPolicy beside each pod (the same egress policy and client ranges, enforced by the CNI); needs RBAC on networkpolicies. */
  networkPolicy: z.boolean().default(true),
});

export type KubernetesConfig = z.output<typeof kubernetesConfigSchema>;
