/**
 * The typed client for Proxy objects: the one place that names the Proxy
 * kind. Every read and write the product makes of a Proxy goes through
 * here, as the generic client (`custom-resources.ts`) does it: a direct
 * read by reference (the authoritative "does the Proxy with this UID still
 * exist?"), the paged list, the spec patch and status write pinned to the
 * UID, the finalizer's add and removal, and the list+watch the informers use.
 *
 * Answers are values where the caller decides on them ('gone', 'absent',
 * 'conflict'); anything else is thrown as the apiserver's error, read with
 * `kube/errors.ts`.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import {
  PROXY_PLURAL,
  type ObjectMeta,
  type Proxy,
  type ProxySpecInput,
  type ProxyStatus,
} from '../resources/proxy-schema.js';
import type { ProxyRef } from '../resources/proxy-ref.js';
import {
  createCustomResourceClient,
  type CustomResourceKind,
  type JsonPatchOp,
  type ObjectList,
} from './custom-resources.js';
import { isNotFoundOf } from './errors.js';

export type { ProxyRef } from '../resources/proxy-ref.js';
export { proxyKey, refOf } from '../resources/proxy-ref.js';

/** Whether an apiserver error says that the Proxy `name` does not exist (a Status naming it, not a bare 404). */
export function isProxyNotFound(error: unknown, name: string): boolean {
  return isNotFoundOf(error, PROXY_PLURAL, name);
}

export const PROXY_KIND: CustomResourceKind = { kind: 'Proxy', plural: PROXY_PLURAL, namespaced: true };

/** A list as the apiserver's JSON has it (custom objects are not deserialised: the token is `metadata.continue`). */
export type ProxyList = ObjectList<Proxy>;

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

export function createProxyClient(kc: KubeConfig): ProxyClient {
  const objects = createCustomResourceClient<Proxy>(kc, PROXY_KIND);
  return {
    read: (ref) => objects.read(ref),
    get: (namespace, name) => objects.get({ namespace, name }),
    list: (namespace, opts = {}) =>
      objects.list(namespace, opts.labelSelector ? { labelSelector: opts.labelSelector } : {}),
    create: (proxy) => objects.create({ metadata: proxy.metadata, spec: proxy.spec }),

    async patch(ref, patch) {
      const ops: JsonPatchOp[] = [];
      if (patch.spec) ops.push({ op: 'replace', path: '/spec', value: patch.spec });
      // `add` on an existing member replaces it: the maps are given whole.
      if (patch.labels) ops.push({ op: 'add', path: '/metadata/labels', value: patch.labels });
      if (patch.annotations) ops.push({ op: 'add', path: '/metadata/annotations', value: patch.annotations });
      // A JSON patch so the UID can be tested: a merge patch cannot pin the object. Unpinned: never 'stale'.
      return (await objects.patchExactly(ref, ops)) === 'patched' ? 'patched' : 'gone';
    },
    // A failed UID precondition (a conflict) means the name now belongs to another Proxy.
    delete: async (ref) => ((await objects.deleteExactly(ref)) === 'deleted' ? 'deleted' : 'gone'),
    listAll: (opts) => objects.listAll(opts),

    async writeStatus(ref, status, pin) {
      const result = await objects.patchExactly(ref, [{ op: 'add', path: '/status', value: status }], {
        status: true,
        ...(pin ? { resourceVersion: pin.resourceVersion } : {}),
      });
      return result === 'patched' ? 'written' : result;
    },
    addFinalizer: (proxy, finalizer) => objects.addFinalizer(proxy, finalizer),
    async removeFinalizer(ref, finalizer) {
      const { result, object } = await objects.removeFinalizer(ref, finalizer);
      return object ? { result, proxy: object } : { result };
    },
  };
}
