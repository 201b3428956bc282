/**
 * The api process's view of Proxies: a list+watch over
 * crawl.example.com/v1alpha1 proxies in all namespaces.
 *
 * @kubernetes/client-node 1.4's informer recovers from 410 Gone by itself,
 * but any other failure (apiserver restart, network error, 5xx) emits
 * `error` and stops for good. This wrapper restarts it with capped
 * exponential backoff; the last good snapshot keeps being served meanwhile,
 * as controller-runtime's cache does.
 */
import {
  CustomObjectsApi,
  makeInformer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { GROUP, PROXY_PLURAL, VERSION, type Proxy } from '../resources/proxy-schema.js';
import { sortedViews, type ProxyCatalog, type ProxyView } from './proxy-catalog.js';

export interface InformerProxyCatalogOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** First restart delay after an informer error (default 500 ms). */
  initialBackoffMs?: number;
  /** Cap of the restart delay (default 30 s). */
  maxBackoffMs?: number;
}

export interface InformerProxyCatalog extends ProxyCatalog {
  /**
   * Starts list+watch. Resolves once the first listing is loaded (retrying
   * with backoff until then); rejects if `stop` is called first.
   */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createInformerProxyCatalog(options: InformerProxyCatalogOptions): InformerProxyCatalog {
  const { kubeConfig } = options;
  const logger = options.logger.child({ component: 'proxy-informer' });
  const initialBackoffMs = options.initialBackoffMs ?? 500;
  const maxBackoffMs = options.maxBackoffMs ?? 30_000;
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  const path = `/apis/${GROUP}/${VERSION}/${PROXY_PLURAL}`;

  let listedThisAttempt = false;
  const listProxies = async (): Promise<KubernetesListObject<KubernetesObject>> => {
    const list = (await api.listClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: PROXY_PLURAL,
    })) as KubernetesListObject<KubernetesObject>;
    listedThisAttempt = true;
    return list;
  };
  const informer = makeInformer<KubernetesObject>(kubeConfig, path, listProxies);

  let snapshot: ProxyView[] = [];
  let dirty = true;
  let synced = false;
  let stopped = true;
  let delayMs = initialBackoffMs;
  let lastStartAt = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let onSynced: (() => void) | undefined;
  let onStopped: ((err: Error) => void) | undefined;

  const markDirty = (): void => {
    dirty = true;
  };
  informer.on('add', markDirty);
  informer.on('update', markDirty);
  informer.on('delete', markDirty);
  informer.on('error', (err: unknown) => {
    if (stopped) return;
    scheduleRestart(err);
  });

  function scheduleRestart(err: unknown): void {
    if (stopped || restartTimer) return;
    // A watch that stayed up for a while earns a fresh backoff; one that
    // fails right after starting keeps doubling.
    if (Date.now() - lastStartAt > maxBackoffMs * 2) delayMs = initialBackoffMs;
    const wait = delayMs;
    delayMs = Math.min(delayMs * 2, maxBackoffMs);
    logger.warn({ err: describeError(err), retryInMs: wait, synced }, 'proxy informer stopped; restarting');
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      void attempt();
    }, wait);
    restartTimer.unref();
  }

  async function attempt(): Promise<void> {
    if (stopped) return;
    listedThisAttempt = false;
    lastStartAt = Date.now();
    try {
      await informer.start();
    } catch (err) {
      scheduleRestart(err);
      return;
    }
    // informer.start() also resolves when the list failed (it reports that
    // through `error`); only a loaded listing counts as synced. A relist
    // after 410 happens inside the informer and keeps the flag.
    if (listedThisAttempt && !synced && !stopped) {
      synced = true;
      markDirty();
      logger.info({ proxies: informer.list().length }, 'proxy informer synced');
      onSynced?.();
    }
  }

  return {
    list() {
      if (dirty) {
        dirty = false;
        snapshot = sortedViews(informer.list() as unknown as Proxy[]);
      }
      return snapshot;
    },
    synced: () => synced,
    start() {
      if (!stopped) return Promise.reject(new Error('proxy informer already started'));
      stopped = false;
      synced = false;
      delayMs = initialBackoffMs;
      const ready = new Promise<void>((resolve, reject) => {
        onSynced = resolve;
        onStopped = reject;
      });
      void attempt();
      return ready;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      if (restartTimer) clearTimeout(restartTimer);
      restartTimer = undefined;
      if (!synced) onStopped?.(new Error('proxy informer stopped before it synced'));
      onSynced = undefined;
      onStopped = undefined;
      await informer.stop();
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
