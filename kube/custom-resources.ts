/**
 * One client for the project's custom resources, typed per kind: the one
 * implementation of the reads and writes the typed clients beside it make
 * (`proxies.ts`, `proxy-pools.ts`, `provider-healths.ts`). A direct get, a
 * read pinned to a UID (the authoritative "does this object still exist?"),
 * the list (paged or not), create, JSON and merge patches of the object or
 * its status, a patch pinned to the object's UID (and resourceVersion),
 * deletes, and the finalizer's add and removal with optimistic locking.
 *
 * Answers are values where the caller decides on them ('gone', 'stale',
 * 'conflict', 'absent'); anything else is thrown as the apiserver's error,
 * read with `errors.ts`.
 */
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { API_VERSION, GROUP, VERSION, type ObjectMeta } from '../resources/proxy-schema.js';
import { httpCode, isNotFoundOf } from './errors.js';

/** An object of one of the project's kinds, as the apiserver's JSON has it. */
export interface CustomObject {
  metadata: ObjectMeta;
}

/** A kind's coordinates, written once by its typed client. */
export interface CustomResourceKind {
  kind: string;
  plural: string;
  /** Namespaced objects are addressed by namespace and name, cluster-scoped ones by name. */
  namespaced: boolean;
  /**
   * Whether an error says that the object `name` does not exist. Default: a
   * 404 whose Status names it (`isNotFoundOf`), never a bare 404.
   */
  isNotFound?: (error: unknown, name: string) => boolean;
}

/** KindCalls an object is: its name, and its namespace for a namespaced kind. */
export interface ObjectKey {
  namespace?: string;
  name: string;
}

/** Exactly one object: one recreated under the same name has another UID. */
export interface ObjectRef extends ObjectKey {
  uid: string;
}

/** A list as the apiserver's JSON has it (custom objects are not deserialised: the token is `metadata.continue`). */
export interface ObjectList<T> {
  items: T[];
  metadata?: { resourceVersion?: string; continue?: string };
}

export interface ListOptions {
  labelSelector?: string;
  limit?: number;
  _continue?: string;
}

export interface JsonPatchOp {
  op: 'test' | 'add' | 'replace' | 'remove';
  path: string;
  value?: unknown;
}

/** What a caller gives to create an object: its metadata (the namespace says where) and, for most kinds, a spec. */
export interface NewObject {
  metadata: Partial<ObjectMeta> & { name: string };
  spec?: unknown;
}

export interface CustomResourceClient<T extends CustomObject> {
  /** Whether an apiserver error says that the object `name` does not exist (the kind's rule). */
  isNotFound: (error: unknown, name: string) => boolean;
  /** The watch path of the kind in one namespace, or in all (and always for a cluster-scoped kind). */
  watchPath(namespace?: string): string;
  /** The object of this name, whatever its UID, or undefined when there is none. */
  get(key: ObjectKey): Promise<T | undefined>;
  /** The object with this UID, or undefined when it is gone (or its name now belongs to another UID). */
  read(ref: ObjectRef): Promise<T | undefined>;
  /** One namespace, or all (`namespace` undefined; always all for a cluster-scoped kind). */
  list(namespace?: string, opts?: ListOptions): Promise<ObjectList<T>>;
  /** Every object, page by page: one list of all namespaces, or one per listed namespace. */
  listAll(opts: { namespaces?: readonly string[]; pageSize: number }): Promise<T[]>;
  /** Creates an object; the apiserver's refusal (409 name taken, 422 schema or CEL) is thrown. */
  create(object: NewObject): Promise<T>;
  /** A JSON patch of the object; the apiserver's refusal (a failed test: 422) is thrown. */
  jsonPatch(key: ObjectKey, ops: JsonPatchOp[]): Promise<T>;
  /** A merge patch of the object; the apiserver's refusal is thrown. */
  mergePatch(key: ObjectKey, body: object): Promise<T>;
  /** A JSON patch of the object's status; the apiserver's refusal is thrown. */
  patchStatus(key: ObjectKey, ops: JsonPatchOp[]): Promise<T>;
  /**
   * A JSON patch of exactly this object (its UID tested first, so it never
   * lands on one recreated under the name), or of its status. With
   * `resourceVersion`, only if the object is still at that version (a second
   * test): 'stale' when anything wrote to it since, so a write that lands
   * late never replaces a newer one. 'gone' when it no longer exists or was
   * recreated.
   */
  patchExactly(
    ref: ObjectRef,
    ops: JsonPatchOp[],
    opts?: { status?: boolean; resourceVersion?: string },
  ): Promise<'patched' | 'gone' | 'stale'>;
  /** Deletes the object of this name: 'gone' when there is none. */
  delete(key: ObjectKey): Promise<'deleted' | 'gone'>;
  /** Deletes exactly this object (UID precondition): 'conflict' when the name now belongs to another. */
  deleteExactly(ref: ObjectKey & { uid?: string }): Promise<'deleted' | 'gone' | 'conflict'>;
  /**
   * Adds `finalizer` to the object as read (the patch names its
   * resourceVersion): 'conflict' when it changed since, 'gone' when it no
   * longer exists. `resourceVersion` is the object's after the patch, or as
   * read when nothing was patched.
   */
  addFinalizer(
    object: T,
    finalizer: string,
  ): Promise<{ result: 'added' | 'present' | 'conflict' | 'gone'; resourceVersion?: string }>;
  /**
   * Removes `finalizer` from the object with this UID, pinned to the
   * resourceVersion read (a 409 is thrown: the caller retries on a fresh
   * read). Returns the object as it was read.
   */
  removeFinalizer(
    ref: ObjectRef,
    finalizer: string,
  ): Promise<{ result: 'removed' | 'absent' | 'gone'; object?: T }>;
}

export function createCustomResourceClient<T extends CustomObject>(
  kc: KubeConfig,
  kind: CustomResourceKind,
): CustomResourceClient<T> {
  const calls: KindCalls = {
    api: objectsApi(kc, kind),
    isNotFound: kind.isNotFound ?? ((error, name) => isNotFoundOf(error, kind.plural, name)),
  };
  const reads = readsOf<T>(calls);
  return {
    isNotFound: calls.isNotFound,
    watchPath: (namespace) =>
      kind.namespaced && namespace
        ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${kind.plural}`
        : `/apis/${GROUP}/${VERSION}/${kind.plural}`,
    ...reads,
    create: async (object) =>
      (await calls.api.create(object.metadata.namespace, {
        apiVersion: API_VERSION,
        kind: kind.kind,
        ...object,
      })) as T,
    jsonPatch: async (key, ops) => (await calls.api.patch(key, ops, 'json')) as T,
    mergePatch: async (key, body) => (await calls.api.patch(key, body, 'merge')) as T,
    patchStatus: async (key, ops) => (await calls.api.patchStatus(key, ops)) as T,
    ...exactWritesOf(calls, reads.read),
    ...finalizersOf(calls, reads.read),
  };
}

/** The kind's calls, and its rule for "this object does not exist". */
interface KindCalls {
  api: ObjectsApi;
  isNotFound: (error: unknown, name: string) => boolean;
}

type Reads<T extends CustomObject> = Pick<CustomResourceClient<T>, 'get' | 'read' | 'list' | 'listAll'>;

function readsOf<T extends CustomObject>({ api, isNotFound }: KindCalls): Reads<T> {
  const get = async (key: ObjectKey): Promise<T | undefined> => {
    try {
      return (await api.get(key)) as T;
    } catch (error) {
      if (isNotFound(error, key.name)) return undefined;
      throw error;
    }
  };
  const list = async (namespace?: string, opts: ListOptions = {}) =>
    (await api.list(namespace, opts)) as ObjectList<T>;
  return {
    get,
    async read(ref) {
      const object = await get(ref);
      return object?.metadata.uid === ref.uid ? object : undefined;
    },
    list,
    async listAll(opts) {
      const out: T[] = [];
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
  };
}

/** The writes whose refusals are read into answers: pinned patches and deletes. */
function exactWritesOf<T extends CustomObject>(
  { api, isNotFound }: KindCalls,
  read: Reads<T>['read'],
): Pick<CustomResourceClient<T>, 'patchExactly' | 'delete' | 'deleteExactly'> {
  return {
    async patchExactly(ref, ops, opts = {}) {
      const body: JsonPatchOp[] = [
        { op: 'test', path: '/metadata/uid', value: ref.uid },
        ...(opts.resourceVersion === undefined
          ? []
          : [{ op: 'test' as const, path: '/metadata/resourceVersion', value: opts.resourceVersion }]),
        ...ops,
      ];
      try {
        await (opts.status ? api.patchStatus(ref, body) : api.patch(ref, body, 'json'));
        return 'patched';
      } catch (error) {
        if (isNotFound(error, ref.name)) return 'gone';
        // 422 is a failed test (UID or version) and a body the schema
        // rejects alike: only a fresh read tells them apart.
        if (httpCode(error) === 422) {
          const now = await read(ref);
          if (now === undefined) return 'gone';
          if (opts.resourceVersion !== undefined && now.metadata.resourceVersion !== opts.resourceVersion)
            return 'stale';
        }
        throw error;
      }
    },

    async delete(key) {
      try {
        await api.delete(key);
        return 'deleted';
      } catch (error) {
        if (isNotFound(error, key.name)) return 'gone';
        throw error;
      }
    },

    async deleteExactly(ref) {
      try {
        await api.delete(ref, { preconditions: { uid: ref.uid } });
        return 'deleted';
      } catch (error) {
        if (isNotFound(error, ref.name)) return 'gone';
        // A UID precondition that fails is a 409: the name now belongs to another object.
        if (httpCode(error) === 409) return 'conflict';
        throw error;
      }
    },
  };
}

function versionOf(object: CustomObject): { resourceVersion?: string } {
  const version = object.metadata.resourceVersion;
  return version === undefined ? {} : { resourceVersion: version };
}

/** The finalizer's add and removal, each a merge patch that names the resourceVersion read. */
function finalizersOf<T extends CustomObject>(
  { api, isNotFound }: KindCalls,
  read: Reads<T>['read'],
): Pick<CustomResourceClient<T>, 'addFinalizer' | 'removeFinalizer'> {
  const setFinalizers = (key: ObjectKey, resourceVersion: string | undefined, finalizers: string[]) =>
    api.patch(key, { metadata: { resourceVersion, finalizers } }, 'merge') as Promise<T>;
  return {
    async addFinalizer(object, finalizer) {
      const finalizers = object.metadata.finalizers ?? [];
      if (finalizers.includes(finalizer)) return { result: 'present', ...versionOf(object) };
      try {
        const patched = await setFinalizers(object.metadata, object.metadata.resourceVersion, [
          ...finalizers,
          finalizer,
        ]);
        return { result: 'added', ...versionOf(patched) };
      } catch (error) {
        if (httpCode(error) === 409) return { result: 'conflict' };
        if (isNotFound(error, object.metadata.name)) return { result: 'gone' };
        throw error;
      }
    },

    async removeFinalizer(ref, finalizer) {
      const object = await read(ref);
      if (!object) return { result: 'gone' };
      const finalizers = object.metadata.finalizers ?? [];
      if (!finalizers.includes(finalizer)) return { result: 'absent', object };
      try {
        await setFinalizers(
          ref,
          object.metadata.resourceVersion,
          finalizers.filter((f) => f !== finalizer),
        );
      } catch (error) {
        if (isNotFound(error, ref.name)) return { result: 'gone' };
        throw error;
      }
      return { result: 'removed', object };
    },
  };
}

type PatchStrategyName = 'json' | 'merge';

/** client-node's custom-object calls for one kind, namespaced or cluster-scoped, behind one shape. */
interface ObjectsApi {
  get(key: ObjectKey): Promise<unknown>;
  list(namespace: string | undefined, opts: ListOptions): Promise<unknown>;
  create(namespace: string | undefined, body: object): Promise<unknown>;
  patch(key: ObjectKey, body: object, strategy: PatchStrategyName): Promise<unknown>;
  /** Always a JSON patch. */
  patchStatus(key: ObjectKey, body: object): Promise<unknown>;
  delete(key: ObjectKey, body?: object): Promise<unknown>;
}

function objectsApi(kc: KubeConfig, kind: CustomResourceKind): ObjectsApi {
  const api = kc.makeApiClient(CustomObjectsApi);
  const base = { group: GROUP, version: VERSION, plural: kind.plural } as const;
  const strategies = {
    json: setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
    merge: setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  };
  const withBody = (body: object | undefined) => (body === undefined ? {} : { body });

  if (!kind.namespaced)
    return {
      get: (key) => api.getClusterCustomObject({ ...base, name: key.name }),
      list: (_namespace, opts) => api.listClusterCustomObject({ ...base, ...opts }),
      create: (_namespace, body) => api.createClusterCustomObject({ ...base, body }),
      patch: (key, body, strategy) =>
        api.patchClusterCustomObject({ ...base, name: key.name, body }, strategies[strategy]),
      patchStatus: (key, body) =>
        api.patchClusterCustomObjectStatus({ ...base, name: key.name, body }, strategies.json),
      delete: (key, body) => api.deleteClusterCustomObject({ ...base, name: key.name, ...withBody(body) }),
    };
  const at = (key: ObjectKey) => ({ ...base, namespace: key.namespace ?? 'default', name: key.name });
  return {
    get: (key) => api.getNamespacedCustomObject(at(key)),
    list: (namespace, opts) =>
      namespace === undefined
        ? api.listClusterCustomObject({ ...base, ...opts })
        : api.listNamespacedCustomObject({ ...base, namespace, ...opts }),
    create: (namespace, body) =>
      api.createNamespacedCustomObject({ ...base, namespace: namespace ?? 'default', body }),
    patch: (key, body, strategy) =>
      api.patchNamespacedCustomObject({ ...at(key), body }, strategies[strategy]),
    patchStatus: (key, body) => api.patchNamespacedCustomObjectStatus({ ...at(key), body }, strategies.json),
    delete: (key, body) => api.deleteNamespacedCustomObject({ ...at(key), ...withBody(body) }),
  };
}
