/**
 * A namespace-scoped install (`--watch-namespaces a,b`): one list+watch per
 * listed namespace, read as one cache. Under a Role per namespace there is
 * no cluster-wide list or watch to open, so the union is built here.
 */
import type { CustomObject, CustomResourceClient } from './custom-resources.js';
import {
  createResilientInformer,
  type ResilientInformer,
  type ResilientInformerOptions,
} from './informer.js';

/**
 * One informer from several, each covering its own namespaces (disjoint).
 * Synced once all are; a reconnect of any is a reconnect of the whole
 * (consumers do a full pass, which is what they want either way).
 */
export function unionInformers<T extends object>(
  parts: ReadonlyArray<ResilientInformer<T>>,
): ResilientInformer<T> {
  if (parts.length === 1) return parts[0]!;
  return {
    get(name, namespace) {
      for (const p of parts) {
        const found = p.get(name, namespace);
        if (found !== undefined) return found;
      }
      return undefined;
    },
    list: (namespace) => parts.flatMap((p) => p.list(namespace)),
    synced: () => parts.every((p) => p.synced()),
    onChange(listener) {
      const offs = parts.map((p) => p.onChange(listener));
      return () => offs.forEach((off) => off());
    },
    onReconnect(listener) {
      const offs = parts.map((p) => p.onReconnect(listener));
      return () => offs.forEach((off) => off());
    },
    async start() {
      const started = parts.map((p) => p.start());
      try {
        await Promise.all(started);
      } catch (error) {
        await Promise.all(parts.map((p) => p.stop()));
        await Promise.allSettled(started);
        throw error;
      }
    },
    async stop() {
      await Promise.all(parts.map((p) => p.stop()));
    },
  };
}

/** The namespaces to watch: the listed ones, or `[undefined]` for all namespaces at once. */
export function watchScopes(namespaces: readonly string[] | undefined): Array<string | undefined> {
  return namespaces && namespaces.length > 0 ? [...namespaces] : [undefined];
}

/** One custom resource's list+watch, one per scope (`watchScopes`), read as one cache. */
export function createCustomResourceInformer<T extends CustomObject>(
  options: Omit<ResilientInformerOptions, 'path' | 'list' | 'labelSelector'> & {
    objects: CustomResourceClient<T>;
    scopes: ReadonlyArray<string | undefined>;
  },
): ResilientInformer<T> {
  const { objects, scopes, ...informer } = options;
  return unionInformers(
    scopes.map((namespace) =>
      createResilientInformer<T>({
        ...informer,
        path: objects.watchPath(namespace),
        list: () => objects.list(namespace),
      }),
    ),
  );
}
