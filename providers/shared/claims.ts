/**
 * A claim: a small record a provider without a backend of its own keeps per
 * instance (a vendor session, a proxy list's entry given to a Proxy). The
 * store is injected (`ProviderDeps.claims`): Kubernetes ConfigMaps in the
 * worker (kube/claims.ts), so every worker replica sees the same claims and
 * a create is atomic (the apiserver refuses a second object of one name).
 * Pure types: providers import nothing of Kubernetes.
 */

export interface ClaimInit {
  /** The instance name the claim stands for (create's idempotency key). */
  instanceName: string;
  uid: string;
  installation: string;
  /** Provider fields; strings only, none secret. */
  data: Record<string, string>;
}

export interface StoredClaim extends ClaimInit {
  /** The claim's own name (unique in its store). */
  name: string;
  /** When the claim was made (milliseconds, as written). */
  createdAtMs: number;
}

export interface ClaimStore {
  /** Creates `name`, or answers the claim already there under that name. */
  create(
    name: string,
    init: ClaimInit,
    signal: AbortSignal,
  ): Promise<{ created: StoredClaim } | { existing: StoredClaim }>;
  /** The claim, or undefined when there is none. */
  get(name: string, signal: AbortSignal): Promise<StoredClaim | undefined>;
  /** Deletes it; a claim already gone resolves. */
  delete(name: string, signal: AbortSignal): Promise<void>;
  /** Every claim of this provider entry. */
  list(signal: AbortSignal): Promise<StoredClaim[]>;
}

/** Makes the claim store of one provider entry in `namespace`. Does not dial until used. */
export type ClaimStoreFactory = (provider: string, namespace: string) => ClaimStore;

/** Reads a Secret's keys (decoded), or undefined when the Secret does not exist. */
export type SecretReader = (
  namespace: string,
  name: string,
  signal: AbortSignal,
) => Promise<Record<string, string> | undefined>;
