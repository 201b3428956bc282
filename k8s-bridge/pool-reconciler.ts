/**
 * The ProxyPool reconciler: turns pool events, and events of the Proxies a
 * pool controls, into one `poolChanged` signal per change to the pool's
 * workflow (started by the first). Coalesced by pool key (namespace/name)
 * like Proxies are, and a member's change counts only when it changes what
 * the pool decides on (`poolDesiredOf`). A pool gone from the cache is told
 * so; its workflow is never started for it.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import type { Proxy, ProxyPool } from '../resources/proxy-schema.js';
import type { ResilientInformer } from '../kube/informer.js';
import { controllingPool, poolRefOf, type PoolRef } from '../kube/proxy-pools.js';
import { poolWorkflowId } from '../workflows/pool/ids.js';
import { poolChangedSignal } from '../workflows/pool/messages.js';
import { POOL_WORKFLOW_TYPE, type PoolWorkflow } from '../workflows/pool/client.js';
import type { PoolDesired, PoolTiming, PoolWorkflowInput } from '../workflows/pool/types.js';
import type { KindQueue } from './kind-queue.js';
import { poolDesiredOf } from './pool-desired.js';
import { createSentLog, type SentLog } from './sent-log.js';
import type { WorkQueue } from './workqueue.js';

export interface PoolReconcilerSettings {
  taskQueue: string;
  /** Pool keys reconciled at once. */
  concurrency: number;
  /** Passed to every pool workflow it starts (the workflow's default otherwise). */
  maxHistoryEvents?: number;
  /** Passed to every pool workflow it starts (defaults otherwise; benches compress it). */
  timing?: Partial<PoolTiming>;
}

export interface PoolReconcilerDeps {
  settings: PoolReconcilerSettings;
  client: Client;
  pools: ResilientInformer<ProxyPool>;
  /** The Proxy cache: a pool's members are read from it. */
  proxies: ResilientInformer<Proxy>;
  queue: KindQueue;
  signals: Counter<'signal'>;
  log: Logger;
}

export interface PoolReconciler {
  enqueue(pool: ProxyPool): void;
  /** Queues the pool that controls this Proxy, if any. */
  enqueueOwnerOf(proxy: Proxy): void;
  /** Queues every cached pool with what was sent forgotten (after a watch outage). */
  resync(): void;
}

interface Context extends PoolReconcilerDeps {
  lane: WorkQueue;
  sent: SentLog;
  /** What was last computed per key, to tell the workflow after the pool is gone. */
  lastDesired: Map<string, { ref: PoolRef; desired: PoolDesired }>;
}

const poolKey = (namespace: string | undefined, name: string) => `${namespace ?? 'default'}/${name}`;

export function createPoolReconciler(deps: PoolReconcilerDeps): PoolReconciler {
  const lane = deps.queue.lane({
    concurrency: deps.settings.concurrency,
    process: (k) => reconcile(ctx, k),
    onFailure(k, error, failures, delayMs) {
      deps.log.warn(
        {
          pool: k,
          attempt: failures,
          retryInMs: delayMs,
          err: error instanceof Error ? error.message : String(error),
        },
        'pool reconcile failed; retrying after backoff',
      );
    },
  });
  const ctx: Context = { ...deps, lane, sent: createSentLog(), lastDesired: new Map() };
  return {
    enqueue: (pool) => lane.add(poolKey(pool.metadata.namespace, pool.metadata.name)),
    enqueueOwnerOf(proxy) {
      const owner = controllingPool(proxy);
      if (owner) lane.add(poolKey(proxy.metadata.namespace, owner.name));
    },
    resync() {
      ctx.sent.forgetAll();
      for (const p of deps.pools.list()) lane.add(poolKey(p.metadata.namespace, p.metadata.name));
    },
  };
}

async function reconcile(ctx: Context, k: string): Promise<void> {
  const [namespace, name] = k.split('/') as [string, string];
  const pool = ctx.pools.get(name, namespace);
  if (!pool) return signalGone(ctx, k);
  const ref = poolRefOf(pool);
  const members = ctx.proxies.list(namespace).filter((p) => controllingPool(p)?.uid === ref.uid);
  const desired = poolDesiredOf(pool, members);
  ctx.lastDesired.set(k, { ref, desired });
  const fingerprint = JSON.stringify([ref.uid, desired]);
  if (ctx.sent.unchanged(k, fingerprint)) return;
  const input: PoolWorkflowInput = { ref, desired };
  if (ctx.settings.maxHistoryEvents) input.maxHistoryEvents = ctx.settings.maxHistoryEvents;
  if (ctx.settings.timing) input.timing = ctx.settings.timing;
  try {
    await ctx.client.workflow.signalWithStart<PoolWorkflow, [PoolDesired]>(POOL_WORKFLOW_TYPE, {
      workflowId: poolWorkflowId(ref),
      taskQueue: ctx.settings.taskQueue,
      args: [input],
      signal: poolChangedSignal,
      signalArgs: [desired],
      // A pool whose workflow completed (the pool was deleted) is never restarted by a late event.
      workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
    });
    ctx.signals.inc({ signal: 'poolChanged' });
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
  }
  ctx.sent.record(k, fingerprint);
}

/** Gone from the cache: tell its workflow, never start one. */
async function signalGone(ctx: Context, k: string): Promise<void> {
  const last = ctx.lastDesired.get(k);
  ctx.lastDesired.delete(k);
  ctx.sent.drop(k);
  if (!last) return;
  try {
    await ctx.client.workflow
      .getHandle(poolWorkflowId(last.ref))
      .signal(poolChangedSignal, { ...last.desired, deletionRequested: true });
    ctx.signals.inc({ signal: 'poolChanged' });
  } catch (error) {
    if (!(error instanceof WorkflowNotFoundError)) throw error;
  }
}
