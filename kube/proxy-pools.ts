/**
 * The typed client for ProxyPool objects (the generic client,
 * `custom-resources.ts`, for this kind), and what a pool's members carry:
 * the one place that names the ProxyPool kind. Also the
 * template hash (bridge and activities compute it the same way) and the
 * Proxy a template makes.
 */
import { createHash } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import {
  API_VERSION,
  LABEL_POOL,
  LABEL_POOL_TEMPLATE_HASH,
  PROXY_POOL_PLURAL,
  type Proxy,
  type ProxyPool,
  type ProxyPoolSpecInput,
  type ProxyPoolStatus,
} from '../resources/proxy-schema.js';
import { createCustomResourceClient, type CustomResourceKind, type ObjectList } from './custom-resources.js';
import type { NewProxy, OwnerReference } from './proxies.js';

/** A pool's identity, as a Proxy's: namespace, name, UID. */
export interface PoolRef {
  namespace: string;
  name: string;
  uid: string;
}

export function poolRefOf(pool: ProxyPool): PoolRef {
  return {
    namespace: pool.metadata.namespace ?? 'default',
    name: pool.metadata.name,
    uid: pool.metadata.uid ?? '',
  };
}

export const PROXY_POOL_KIND: CustomResourceKind = {
  kind: 'ProxyPool',
  plural: PROXY_POOL_PLURAL,
  namespaced: true,
};

/** The scale subresource's selector: every member carries the pool's name in this label. */
export function poolSelector(poolName: string): string {
  return `${LABEL_POOL}=${poolName}`;
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, v]) => [k, canonical(v)]),
    );
  }
  return value;
}

/** Canonical JSON: key order never changes what two objects compare or hash as. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(canonical(value));
}

/**
 * What a pool's member is made of: the template's labels, annotations and
 * spec, with the pool's drain timeout unless the template sets its own.
 */
export function memberTemplate(pool: ProxyPool): {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  spec: NewProxy['spec'];
} {
  const template = pool.spec.template;
  const spec: NewProxy['spec'] = { ...template.spec };
  if (spec.drainTimeoutSeconds === undefined)
    spec.drainTimeoutSeconds = pool.spec.strategy.drainTimeoutSeconds;
  return {
    labels: { ...(template.metadata?.labels ?? {}) },
    annotations: { ...(template.metadata?.annotations ?? {}) },
    spec,
  };
}

/** Ten hex digits of SHA-256 over the member template: a label value, and the rollout's unit. */
export function templateHashOf(pool: ProxyPool): string {
  return createHash('sha256')
    .update(canonicalJson(memberTemplate(pool)))
    .digest('hex')
    .slice(0, 10);
}

/** The controller reference a member carries to its pool. */
export function poolOwnerReference(pool: PoolRef): OwnerReference {
  return {
    apiVersion: API_VERSION,
    kind: 'ProxyPool',
    name: pool.name,
    uid: pool.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** The pool that controls this Proxy (its controller owner reference), if any. */
export function controllingPool(proxy: Proxy): { name: string; uid: string } | undefined {
  const refs = proxy.metadata.ownerReferences ?? [];
  const ref = refs.find(
    (r) => r.controller === true && r.kind === 'ProxyPool' && r.apiVersion === API_VERSION,
  );
  return ref ? { name: ref.name, uid: ref.uid } : undefined;
}

/** The Proxy a pool makes from its template under `name`. */
export function memberProxy(pool: ProxyPool, name: string): NewProxy {
  const ref = poolRefOf(pool);
  const template = memberTemplate(pool);
  return {
    metadata: {
      name,
      namespace: ref.namespace,
      labels: {
        ...template.labels,
        [LABEL_POOL]: ref.name,
        [LABEL_POOL_TEMPLATE_HASH]: templateHashOf(pool),
      },
      annotations: template.annotations,
      ownerReferences: [poolOwnerReference(ref)],
    },
    spec: template.spec,
  };
}

export type ProxyPoolList = ObjectList<ProxyPool>;

export interface ProxyPoolClient {
  /** The pool with this UID, or undefined when it is gone (or its name now belongs to another UID). */
  read(ref: PoolRef): Promise<ProxyPool | undefined>;
  /** One namespace, or all: the informer's list. */
  list(namespace?: string): Promise<ProxyPoolList>;
  /** Replaces the status of exactly this pool (UID tested): 'gone' when it no longer exists. */
  writeStatus(ref: PoolRef, status: ProxyPoolStatus): Promise<'written' | 'gone'>;
  /** The pool of this name, whatever its UID, or undefined. */
  get(namespace: string, name: string): Promise<ProxyPool | undefined>;
  /** Creates a pool; the apiserver's refusal (409, 422 schema or CEL) is thrown. */
  create(namespace: string, name: string, spec: ProxyPoolSpecInput): Promise<ProxyPool>;
  /** Merge-patches the spec (a rollout, a scale): the apiserver's refusal is thrown. */
  patchSpec(namespace: string, name: string, spec: Record<string, unknown>): Promise<ProxyPool>;
  /** Deletes the pool of this name: 'gone' when there is none. */
  delete(namespace: string, name: string): Promise<'deleted' | 'gone'>;
}

export function createProxyPoolClient(kc: KubeConfig): ProxyPoolClient {
  const objects = createCustomResourceClient<ProxyPool>(kc, PROXY_POOL_KIND);
  return {
    read: (ref) => objects.read(ref),
    get: (namespace, name) => objects.get({ namespace, name }),
    create: (namespace, name, spec) => objects.create({ metadata: { name, namespace }, spec }),
    patchSpec: (namespace, name, spec) => objects.mergePatch({ namespace, name }, { spec }),
    delete: (namespace, name) => objects.delete({ namespace, name }),
    list: (namespace) => objects.list(namespace),
    async writeStatus(ref, status) {
      const ops = [{ op: 'add' as const, path: '/status', value: status }];
      // Not pinned to a resourceVersion: never 'stale'.
      return (await objects.patchExactly(ref, ops, { status: true })) === 'patched' ? 'written' : 'gone';
    },
  };
}
