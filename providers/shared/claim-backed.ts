/**
 * What the providers that keep claims instead of a backend (vendor, list)
 * share: their providerID (`<entry>-<digest>`, the claim's name), how a
 * claim store's failure is classed, and the claim as an Instance.
 */
import type { Classification } from './operation.js';
import type { StoredClaim } from './claims.js';
import type { Instance, InstanceState } from '../types.js';

/** The claim store's (the apiserver's) failures: refused access or a missing namespace is config; anything else passes. */
export function classifyClaimFailure(namespace: string) {
  return (err: unknown): Classification => {
    const code = (err as { code?: unknown } | null)?.code;
    if (code === 403)
      return {
        errorClass: 'Permanent',
        summary: `forbidden: the worker may not use ConfigMaps in namespace ${namespace}, where its claims are (RBAC: infra/k8s/base/claims-rbac.yaml)`,
      };
    if (code === 404) return { errorClass: 'Permanent', summary: `claims namespace ${namespace} not found` };
    return {
      errorClass: 'Transient',
      summary: typeof code === 'number' ? `claim store answered HTTP ${code}` : 'claim store unreachable',
    };
  };
}

/** A claim's name and providerID: the entry's name, "-", a lowercase base32 digest. */
export function claimIdPattern(provider: string): RegExp {
  return new RegExp(`^${provider.replace(/[-]/g, '\\-')}-[a-z2-7]{16}$`);
}

export function instanceOfClaim(
  claim: StoredClaim,
  state: InstanceState,
  where?: { ip: string; port: number },
): Instance {
  return {
    id: claim.name,
    state,
    uid: claim.uid,
    installation: claim.installation,
    createdAt: new Date(claim.createdAtMs),
    ...(state === 'Running' && where ? { ip: where.ip, port: where.port } : {}),
  };
}
