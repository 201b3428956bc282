/**
 * The one list+watch cache every process uses (the bridge's Proxies and
 * Secrets, the api process's Proxies for the lease API and the prober).
 *
 * @kubernetes/client-node 1.4's informer re-lists by itself after 410 Gone,
 * but any other failure (apiserver restart, dropped connection, 5xx, a failed
 * list) emits `error` and stops for good; and its `start()` resolves even when
 * the list failed. This wrapper restarts it with capped exponential backoff,
 * keeps serving the last good snapshot meanwhile (as controller-runtime's
 * cache does), and counts as synced only a listing that really loaded.
 *
 * A restart resumes the watch from the last resourceVersion, so the events of
 * the outage arrive as ordinary add/update/delete; if that version has been
 * compacted the apiserver answers 410 and the informer re-lists, delivering
 * adds, updates and deletes against its cache. Either way a consumer that
 * reconciles by key misses nothing.
 */
import {
  makeInformer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';

export type InformerEvent = 'add' | 'update' | 'delete';

export interface ResilientInformer<T extends object> {
  get(name: string, namespace?: string): T | undefined;
  list(namespace?: string): T[];
  /** False until the first complete listing has been loaded. */
  synced(): boolean;
  /** Hears every add, update and delete from now on. Returns an unsubscribe. */
  onChange(listener: (obj: T, event: InformerEvent) => void): () => void;
  /**
   * Hears the end of each outage: once the watch is open again after a
   * failure (not after the watch's routine timeout, which resumes from its
   * resourceVersion and misses nothing), and once per outage however many
   * retries failed. The informer replays what changed either way; this is
   * for a consumer that also wants a full pass afterwards.
   */
  onReconnect(listener: () => void): () => void;
  /**
   * Starts list+watch. Resolves once the first listing is loaded (retrying
   * with backoff until then); rejects if `stop` is called first.
   */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface ResilientInformerOptions {
  kubeConfig: KubeConfig;
  /** Watch path, e.g. /apis/crawl.example.com/v1alpha1/proxies */
  path: string;
  /** Lists what the watch covers; must apply the same label selector as `labelSelector`. */
  list: () => Promise<unknown>;
  /** Passed to the watch only (the informer does not apply it to `list`). */
  labelSelector?: string;
  logger: Logger;
  /** First restart delay after an error (default 500 ms). */
  initialBackoffMs?: number;
  /** Cap of the restart delay (default 30 s). */
  maxBackoffMs?: number;
  /** Called each time a stopped watch is scheduled to restart (metrics). */
  onRestart?: () => void;
}

export function createResilientInformer<T extends object>(
  options: ResilientInformerOptions,
): ResilientInformer<T> {
  const logger = options.logger.child({ informer: options.path });
  const initialBackoffMs = options.initialBackoffMs ?? 500;
  const maxBackoffMs = options.maxBackoffMs ?? 30_000;

  // Whether a listing has ever loaded. Until then nothing counts as synced
  // (client-node's start() resolves even when the list failed); after it, a
  // start after stop() resumes the watch from its resourceVersion without
  // listing again, and the cache is still good.
  let everListed = false;
  const listOnce = async (): Promise<KubernetesListObject<KubernetesObject>> => {
    // client-node does not look at its own stop flag between list and watch.
    if (stopped) throw new Error(`informer ${options.path} stopped`);
    const list = (await options.list()) as KubernetesListObject<KubernetesObject>;
    everListed = true;
    return list;
  };
  // The informer only reads metadata.name/namespace/resourceVersion, which
  // every watched object has; the casts bridge our string-timestamp types.
  const informer = makeInformer<KubernetesObject>(
    options.kubeConfig,
    options.path,
    listOnce,
    options.labelSelector,
  );
  const as = (obj: KubernetesObject) => obj as unknown as T;

  const changeListeners = new Set<(obj: T, event: InformerEvent) => void>();
  const reconnectListeners = new Set<() => void>();
  let synced = false;
  let stopped = true;
  let recovering = false;
  let errors = 0;
  let inFlight: Promise<void> | undefined;
  let delayMs = initialBackoffMs;
  let lastStartAt = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let onSynced: (() => void) | undefined;
  let onStoppedEarly: ((err: Error) => void) | undefined;

  const emit = (event: InformerEvent) => (obj: KubernetesObject) => {
    for (const listener of changeListeners) listener(as(obj), event);
  };
  informer.on('add', emit('add'));
  informer.on('update', emit('update'));
  informer.on('delete', emit('delete'));
  informer.on('error', (err: unknown) => {
    errors += 1;
    scheduleRestart(err);
  });

  function scheduleRestart(err: unknown): void {
    // One pending restart at most: two would run two watches side by side.
    if (stopped || restartTimer) return;
    // A watch that stayed up for a while earns a fresh backoff; one that
    // fails right after starting keeps doubling.
    if (Date.now() - lastStartAt > maxBackoffMs * 2) delayMs = initialBackoffMs;
    const wait = delayMs;
    delayMs = Math.min(delayMs * 2, maxBackoffMs);
    logger.warn({ err: describeError(err), retryInMs: wait, synced }, 'watch stopped; restarting');
    options.onRestart?.();
    if (synced) recovering = true;
    // Not unref'd: while the first listing is pending this timer may be the
    // only thing keeping the process alive, and an exit there would be silent.
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      void attempt();
    }, wait);
  }

  async function attempt(): Promise<void> {
    if (stopped) return;
    lastStartAt = Date.now();
    const errorsBefore = errors;
    const running = informer.start();
    inFlight = running;
    try {
      await running;
    } catch (err) {
      scheduleRestart(err);
      return;
    } finally {
      inFlight = undefined;
    }
    // stop() came while the list ran or the watch was connecting: client-node
    // stores the watch request only once it is open, so abort it now.
    if (stopped) {
      await informer.stop();
      return;
    }
    // informer.start() also resolves when the list or the watch failed (it
    // reports that through `error`, and a restart is already scheduled).
    if (errors !== errorsBefore) return;
    if (!synced) {
      // Only a loaded listing counts. A relist after 410 happens inside the
      // informer and keeps the flag.
      if (everListed) {
        synced = true;
        logger.info({ objects: informer.list().length }, 'informer synced');
        onSynced?.();
      }
      return;
    }
    // Back after a failure, with the cache caught up and the watch open:
    // once per outage, not once per failed retry.
    if (recovering) {
      recovering = false;
      logger.info({ objects: informer.list().length }, 'watch restored');
      for (const listener of reconnectListeners) listener();
    }
  }

  return {
    get(name, namespace) {
      const obj = informer.get(name, namespace);
      return obj === undefined ? undefined : as(obj);
    },
    list: (namespace) => informer.list(namespace).map(as),
    synced: () => synced,
    onChange(listener) {
      changeListeners.add(listener);
      return () => changeListeners.delete(listener);
    },
    onReconnect(listener) {
      reconnectListeners.add(listener);
      return () => reconnectListeners.delete(listener);
    },
    start() {
      if (!stopped) return Promise.reject(new Error(`informer ${options.path} already started`));
      stopped = false;
      synced = false;
      recovering = false;
      delayMs = initialBackoffMs;
      const ready = new Promise<void>((resolve, reject) => {
        onSynced = resolve;
        onStoppedEarly = reject;
      });
      void attempt();
      return ready;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      if (restartTimer) clearTimeout(restartTimer);
      restartTimer = undefined;
      if (!synced) onStoppedEarly?.(new Error(`informer ${options.path} stopped before it synced`));
      onSynced = undefined;
      onStoppedEarly = undefined;
      await informer.stop();
      // An attempt still listing or connecting aborts its own watch when it
      // sees `stopped`; wait for that, but never hang a shutdown on it.
      const pending = inFlight;
      if (pending) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          pending.catch(() => undefined),
          new Promise((resolve) => (timer = setTimeout(resolve, 5_000))),
        ]);
        clearTimeout(timer);
      }
    },
  };
}

function describeError(err: unknown): Record<string, unknown> {
  if (err instanceof Error) {
    const extra = err as Error & { code?: unknown; statusCode?: unknown };
    return { message: err.message, name: err.name, code: extra.code ?? extra.statusCode };
  }
  return { message: String(err) };
}
