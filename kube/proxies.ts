/**
 * The typed client for Proxy objects: the one place that spells the Proxy
 * resource's group, version and plural. Every read and write the product
 * makes of a Proxy goes through here: a direct read by reference (the
 * authoritative "does the Proxy with this UID still exist?"), the paged
 * list, the status write, the finalizer's add and removal, and the
 * list+watch the informers use.
 *
 * Answers are values where the caller decides on them ('gone', 'absent',
 * 'conflict'); anything else is thrown as the apiserver's error, read with
 * `kube/errors.ts`.
 */
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import {
  API_VERSION,
  GROUP,
  PROXY_PLURAL,
  VERSION,
  type ObjectMeta,
  type Proxy,
  type ProxySpecInput,
  type ProxyStatus,
} from '../resources/proxy-schema.js';
import type { ProxyRef } from '../resources/proxy-ref.js';
import { httpCode, isNotFoundOf } from './errors.js';

export type { ProxyRef } from '../resources/proxy-ref.js';
export { proxyKey, refOf } from '../resources/proxy-ref.js';

/** Whether an apiserver error says that the Proxy `name` does not exist (a Status naming it, not a bare 404). */
export function isProxyNotFound(error: unknown, name: string): boolean {
  return isNotFoundOf(error, PROXY_PLURAL, name);
}

/** The watch path of Proxies in one namespace, or in all. */
export function proxyWatchPath(namespace?: string): string {
  return namespace
    ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PROXY_PLURAL}`
    : `/apis/${GROUP}/${VERSION}/${PROXY_PLURAL}`;
}

/** A list as the apiserver's JSON has it (custom objects are not deserialised: the token is `metadata.continue`). */
export interface ProxyList {
  items: Proxy[];
  metadata?: { resourceVersion?: string; continue?: string };
}

/** What a caller gives to create a Proxy: the metadata it sets and a spec as a user writes it. */
export interface NewProxy {
  metadata: Omit<
    ObjectMeta,
    'uid' | 'generation' | 'resourceVersion' | 'creationTimestamp' | 'deletionTimestamp'
  > & {
    namespace: string;
  };
  spec: ProxySpecInput;
}

export type { OwnerReference } from '../resources/proxy-schema.js';

export interface ProxyClient {
  /** The Proxy with this UID, or undefined when it is gone (or its name now belongs to another UID). */
  read(ref: ProxyRef): Promise<Proxy | undefined>;
  /** The Proxy of this name, whatever its UID, or undefined when there is none. */
  get(namespace: string, name: string): Promise<Proxy | undefined>;
  /** One namespace, or all (`namespace` undefined): the informer's list. */
  list(namespace?: string, opts?: { labelSelector?: string }): Promise<ProxyList>;
  /** Creates a Proxy; the apiserver's refusal (409 name taken, 422 schema or CEL) is thrown. */
  create(proxy: NewProxy): Promise<Proxy>;
  /**
   * Replaces the spec, the labels or the annotations (each given whole) of
   * exactly this Proxy (pinned to its UID): 'gone' when it no longer exists
   * or was recreated.
   */
  patch(
    ref: ProxyRef,
    patch: { spec?: ProxySpecInput; labels?: Record<string, string>; annotations?: Record<string, string> },
  ): Promise<'patched' | 'gone'>;
  /** Deletes exactly this Proxy (UID precondition): 'gone' when it no longer exists or was recreated. */
  delete(ref: ProxyRef): Promise<'deleted' | 'gone'>;
  /** Every Proxy, page by page: one cluster-wide list, or one per listed namespace (a namespace-scoped install). */
  listAll(opts: { namespaces?: readonly string[]; pageSize: number }): Promise<Proxy[]>;
  /**
   * Replaces the status of exactly this Proxy (the patch tests the UID, so it
   * never lands on a recreated Proxy of the same name: that fails with 422).
   * With `pin`, only if the Proxy is still at that resourceVersion (a second
   * `test`): 'stale' when anything wrote to it since, so a write that lands
   * late never replaces a newer one.
   */
  writeStatus(
    ref: ProxyRef,
    status: ProxyStatus,
    pin?: { resourceVersion: string },
  ): Promise<'written' | 'gone' | 'stale'>;
  /**
   * Adds `finalizer` to the Proxy as read (the patch names its
   * resourceVersion): 'conflict' when it changed since (its next event brings
   * the caller back), 'gone' when it no longer exists. `resourceVersion` is
   * the Proxy's after the patch, or as read when nothing was patched.
   */
  addFinalizer(
    proxy: Proxy,
    finalizer: string,
  ): Promise<{ result: 'added' | 'present' | 'conflict' | 'gone'; resourceVersion?: string }>;
  /**
   * Removes `finalizer` from the Proxy with this UID, pinned to the
   * resourceVersion read (a 409 is thrown: the caller retries on a fresh
   * read). Returns the Proxy as it was read, for what the caller reports.
   */
  removeFinalizer(
    ref: ProxyRef,
    finalizer: string,
  ): Promise<{ result: 'removed' | 'absent' | 'gone'; proxy?: Proxy }>;
}

function versionOf(proxy: Proxy): { resourceVersion?: string } {
  const version = proxy.metadata.resourceVersion;
  return version === undefined ? {} : { resourceVersion: version };
}

export function createProxyClient(kc: KubeConfig): ProxyClient {
  const api = kc.makeApiClient(CustomObjectsApi);
  const base = { group: GROUP, version: VERSION, plural: PROXY_PLURAL } as const;
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

  const read = async (ref: ProxyRef): Promise<Proxy | undefined> => {
    try {
      const proxy = (await api.getNamespacedCustomObject({
        ...base,
        namespace: ref.namespace,
        name: ref.name,
      })) as Proxy;
      return proxy.metadata.uid === ref.uid ? proxy : undefined;
    } catch (error) {
      if (isProxyNotFound(error, ref.name)) return undefined;
      throw error;
    }
  };

  const list = async (
    namespace?: string,
    extra: { limit?: number; _continue?: string; labelSelector?: string } = {},
  ) =>
    (await (namespace === undefined
      ? api.listClusterCustomObject({ ...base, ...extra })
      : api.listNamespacedCustomObject({ ...base, namespace, ...extra }))) as ProxyList;

  return {
    read,
    async get(namespace, name) {
      try {
        return (await api.getNamespacedCustomObject({ ...base, namespace, name })) as Proxy;
      } catch (error) {
        if (isProxyNotFound(error, name)) return undefined;
        throw error;
      }
    },
    list: (namespace, opts = {}) =>
      list(namespace, opts.labelSelector ? { labelSelector: opts.labelSelector } : {}),

    async create(proxy) {
      return (await api.createNamespacedCustomObject({
        ...base,
        namespace: proxy.metadata.namespace,
        body: { apiVersion: API_VERSION, kind: 'Proxy', metadata: proxy.metadata, spec: proxy.spec },
      })) as Proxy;
    },

    async patch(ref, patch) {
      // A JSON patch so the UID can be tested: a merge patch cannot pin the object.
      const body: unknown[] = [{ op: 'test', path: '/metadata/uid', value: ref.uid }];
      if (patch.spec) body.push({ op: 'replace', path: '/spec', value: patch.spec });
      // `add` on an existing member replaces it: the maps are given whole.
      if (patch.labels) body.push({ op: 'add', path: '/metadata/labels', value: patch.labels });
      if (patch.annotations)
        body.push({ op: 'add', path: '/metadata/annotations', value: patch.annotations });
      try {
        await api.patchNamespacedCustomObject(
          { ...base, namespace: ref.namespace, name: ref.name, body },
          jsonPatch,
        );
        return 'patched';
      } catch (error) {
        if (isProxyNotFound(error, ref.name)) return 'gone';
        if (httpCode(error) === 422 && (await read(ref)) === undefined) return 'gone';
        throw error;
      }
    },

    async delete(ref) {
      try {
        await api.deleteNamespacedCustomObject({
          ...base,
          namespace: ref.namespace,
          name: ref.name,
          body: { preconditions: { uid: ref.uid } },
        });
        return 'deleted';
      } catch (error) {
        if (isProxyNotFound(error, ref.name)) return 'gone';
        // A UID precondition that fails is a 409: the name now belongs to another Proxy.
        if (httpCode(error) === 409) return 'gone';
        throw error;
      }
    },

    async listAll(opts) {
      const out: Proxy[] = [];
      const scopes: Array<string | undefined> =
        opts.namespaces && opts.namespaces.length > 0 ? [...opts.namespaces] : [undefined];
      for (const namespace of scopes) {
        let next: string | undefined;
        do {
          const page = await list(namespace, {
            limit: opts.pageSize,
            ...(next === undefined ? {} : { _continue: next }),
          });
          out.push(...page.items);
          next = page.metadata?.continue || undefined;
        } while (next !== undefined);
      }
      return out;
    },

    async writeStatus(ref, status, pin) {
      try {
        await api.patchNamespacedCustomObjectStatus(
          {
            ...base,
            namespace: ref.namespace,
            name: ref.name,
            body: [
              { op: 'test', path: '/metadata/uid', value: ref.uid },
              ...(pin ? [{ op: 'test', path: '/metadata/resourceVersion', value: pin.resourceVersion }] : []),
              { op: 'add', path: '/status', value: status },
            ],
          },
          jsonPatch,
        );
        return 'written';
      } catch (error) {
        if (isProxyNotFound(error, ref.name)) return 'gone';
        // 422 is a failed test (UID or version) and a status the schema
        // rejects alike: only a fresh read tells them apart.
        if (httpCode(error) === 422) {
          const now = await read(ref);
          if (now === undefined) return 'gone';
          if (pin && now.metadata.resourceVersion !== pin.resourceVersion) return 'stale';
        }
        throw error;
      }
    },

    async addFinalizer(proxy, finalizer) {
      const finalizers = proxy.metadata.finalizers ?? [];
      if (finalizers.includes(finalizer)) {
        return { result: 'present', ...versionOf(proxy) };
      }
      try {
        const patched = (await api.patchNamespacedCustomObject(
          {
            ...base,
            namespace: proxy.metadata.namespace ?? 'default',
            name: proxy.metadata.name,
            body: {
              metadata: {
                resourceVersion: proxy.metadata.resourceVersion,
                finalizers: [...finalizers, finalizer],
              },
            },
          },
          mergePatch,
        )) as Proxy;
        return { result: 'added', ...versionOf(patched) };
      } catch (error) {
        if (httpCode(error) === 409) return { result: 'conflict' };
        if (isProxyNotFound(error, proxy.metadata.name)) return { result: 'gone' };
        throw error;
      }
    },

    async removeFinalizer(ref, finalizer) {
      const proxy = await read(ref);
      if (!proxy) return { result: 'gone' };
      const finalizers = proxy.metadata.finalizers ?? [];
      if (!finalizers.includes(finalizer)) return { result: 'absent', proxy };
      try {
        await api.patchNamespacedCustomObject(
          {
            ...base,
            namespace: ref.namespace,
            name: ref.name,
            body: {
              metadata: {
                resourceVersion: proxy.metadata.resourceVersion,
                finalizers: finalizers.filter((f) => f !== finalizer),
              },
            },
          },
          mergePatch,
        );
      } catch (error) {
        if (isProxyNotFound(error, ref.name)) return { result: 'gone' };
        throw error;
      }
      return { result: 'removed', proxy };
    },
  };
}
