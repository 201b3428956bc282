/**
 * The typed client for ProxyPool objects, and what a pool's members carry:
 * the one place that spells the ProxyPool resource's coordinates. Also the
 * template hash (bridge and activities compute it the same way) and the
 * Proxy a template makes.
 */
import { createHash } from 'node:crypto';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import {
  API_VERSION,
  GROUP,
  LABEL_POOL,
  LABEL_POOL_TEMPLATE_HASH,
  PROXY_POOL_PLURAL,
  VERSION,
  type Proxy,
  type ProxyPool,
  type ProxyPoolSpecInput,
  type ProxyPoolStatus,
} from '../resources/proxy-schema.js';
import { httpCode, isNotFoundOf } from './errors.js';
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

/** The watch path of ProxyPools in one namespace, or in all. */
export function proxyPoolWatchPath(namespace?: string): string {
  return namespace
    ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PROXY_POOL_PLURAL}`
    : `/apis/${GROUP}/${VERSION}/${PROXY_POOL_PLURAL}`;
}

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

export interface ProxyPoolList {
  items: ProxyPool[];
  metadata?: { resourceVersion?: string; continue?: string };
}

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
  const api = kc.makeApiClient(CustomObjectsApi);
  const base = { group: GROUP, version: VERSION, plural: PROXY_POOL_PLURAL } as const;
  const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);
  const isGone = (error: unknown, name: string) => isNotFoundOf(error, PROXY_POOL_PLURAL, name);

  const read = async (ref: PoolRef): Promise<ProxyPool | undefined> => {
    try {
      const pool = (await api.getNamespacedCustomObject({
        ...base,
        namespace: ref.namespace,
        name: ref.name,
      })) as ProxyPool;
      return pool.metadata.uid === ref.uid ? pool : undefined;
    } catch (error) {
      if (isGone(error, ref.name)) return undefined;
      throw error;
    }
  };

  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

  return {
    read,
    async get(namespace, name) {
      try {
        return (await api.getNamespacedCustomObject({ ...base, namespace, name })) as ProxyPool;
      } catch (error) {
        if (isGone(error, name)) return undefined;
        throw error;
      }
    },
    async create(namespace, name, spec) {
      return (await api.createNamespacedCustomObject({
        ...base,
        namespace,
        body: { apiVersion: API_VERSION, kind: 'ProxyPool', metadata: { name, namespace }, spec },
      })) as ProxyPool;
    },
    async patchSpec(namespace, name, spec) {
      return (await api.patchNamespacedCustomObject(
        { ...base, namespace, name, body: { spec } },
        mergePatch,
      )) as ProxyPool;
    },
    async delete(namespace, name) {
      try {
        await api.deleteNamespacedCustomObject({ ...base, namespace, name });
        return 'deleted';
      } catch (error) {
        if (isGone(error, name)) return 'gone';
        throw error;
      }
    },
    async list(namespace) {
      return (await (namespace === undefined
        ? api.listClusterCustomObject({ ...base })
        : api.listNamespacedCustomObject({ ...base, namespace }))) as ProxyPoolList;
    },
    async writeStatus(ref, status) {
      try {
        await api.patchNamespacedCustomObjectStatus(
          {
            ...base,
            namespace: ref.namespace,
            name: ref.name,
            body: [
              { op: 'test', path: '/metadata/uid', value: ref.uid },
              { op: 'add', path: '/status', value: status },
            ],
          },
          jsonPatch,
        );
        return 'written';
      } catch (error) {
        if (isGone(error, ref.name)) return 'gone';
        if (httpCode(error) === 422 && (await read(ref)) === undefined) return 'gone';
        throw error;
      }
    },
  };
}
