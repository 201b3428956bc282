/**
 * A watch-backed cache that keeps itself alive. client-node 1.4's informer
 * re-lists on 410 Gone but stops on any other error (an apiserver restart, a
 * dropped connection): this restarts it with capped exponential backoff, and
 * the re-list on restart replays every object as add/update, so no event is
 * lost for a consumer that reconciles by key.
 */
import {
  makeInformer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';

/** Any object with metadata; our CRD types keep timestamps as the strings the wire carries. */
export type WatchedObject = object;

export interface ResilientInformer<T extends WatchedObject> {
  get(name: string, namespace?: string): T | undefined;
  list(namespace?: string): ReadonlyArray<T>;
  /** Resolves after the first successful list. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface ResilientInformerOptions<T extends WatchedObject> {
  kubeConfig: KubeConfig;
  /** Watch path, e.g. /apis/crawl.example.com/v1alpha1/proxies */
  path: string;
  /** Must apply the same label selector as `labelSelector` (the informer passes it to the watch only). */
  list: () => Promise<unknown>;
  labelSelector?: string;
  logger: Logger;
  onChange: (obj: T, kind: 'add' | 'update' | 'delete') => void;
  /** Called after every (re)connect, so the consumer can resync. */
  onResync?: () => void;
  maxBackoffMs?: number;
}

export function createResilientInformer<T extends WatchedObject>(
  opts: ResilientInformerOptions<T>,
): ResilientInformer<T> {
  // The informer only reads metadata.name/namespace/resourceVersion, which
  // every watched object has; the cast bridges our string-timestamp types.
  const informer = makeInformer<KubernetesObject>(
    opts.kubeConfig,
    opts.path,
    opts.list as () => Promise<KubernetesListObject<KubernetesObject>>,
    opts.labelSelector,
  );
  const as = (obj: KubernetesObject) => obj as unknown as T;
  const log = opts.logger.child({ informer: opts.path });
  const maxBackoffMs = opts.maxBackoffMs ?? 30_000;
  let stopped = false;
  let backoffMs = 500;
  let restartTimer: NodeJS.Timeout | undefined;

  informer.on('add', (obj) => opts.onChange(as(obj), 'add'));
  informer.on('update', (obj) => opts.onChange(as(obj), 'update'));
  informer.on('delete', (obj) => opts.onChange(as(obj), 'delete'));
  informer.on('connect', () => {
    backoffMs = 500;
    opts.onResync?.();
  });
  informer.on('error', (err: unknown) => {
    if (stopped) return;
    const message = err instanceof Error ? err.message : String(err);
    log.warn({ err: message, retryInMs: backoffMs }, 'watch failed; restarting');
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      if (stopped) return;
      informer.start().catch((e: unknown) => log.warn({ err: String(e) }, 'restart failed'));
    }, backoffMs);
    backoffMs = Math.min(backoffMs * 2, maxBackoffMs);
  });

  return {
    get: (name, namespace) => {
      const obj = informer.get(name, namespace);
      return obj === undefined ? undefined : as(obj);
    },
    list: (namespace) => informer.list(namespace).map(as),
    async start() {
      stopped = false;
      // The first list may fail while the apiserver comes up: retry it here.
      for (;;) {
        try {
          await informer.start();
          return;
        } catch (error) {
          if (stopped) return;
          log.warn(
            { err: error instanceof Error ? error.message : String(error), retryInMs: backoffMs },
            'initial list failed',
          );
          await new Promise((r) => setTimeout(r, backoffMs));
          backoffMs = Math.min(backoffMs * 2, maxBackoffMs);
        }
      }
    },
    async stop() {
      stopped = true;
      if (restartTimer) clearTimeout(restartTimer);
      await informer.stop();
    },
  };
}
