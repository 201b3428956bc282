/**
 * The bridge's ProxyPool part: turns pool events, and events of the Proxies
 * a pool controls, into one `poolChanged` signal per change to the pool's
 * workflow (started by the first). Coalesced by pool key like Proxies are,
 * and a member's change counts only when it changes what the pool decides
 * on (existence, readiness, drain, template hash, spec, labels): a member's
 * routine status write (a latency report) sends nothing.
 */
import { createHash } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import {
  DEFAULT_MAX_LEASES,
  LABEL_POOL_TEMPLATE_HASH,
  type Proxy,
  type ProxyPool,
} from '../resources/proxy-schema.js';
import type { ResilientInformer } from '../kube/informer.js';
import { createProxyPoolInformer } from '../kube/proxy-pool-informer.js';
import { controllingPool, poolRefOf, templateHashOf, type PoolRef } from '../kube/proxy-pools.js';
import { poolWorkflowId } from '../workflows/pool/ids.js';
import { poolChangedSignal } from '../workflows/pool/messages.js';
import { POOL_WORKFLOW_TYPE, type PoolWorkflow } from '../workflows/pool/client.js';
import type { PoolDesired, PoolTiming, PoolWorkflowInput } from '../workflows/pool/types.js';
import { createWorkQueue } from './workqueue.js';

export interface PoolBridgeOptions {
  kubeConfig: KubeConfig;
  client: Client;
  taskQueue: string;
  logger: Logger;
  /** The bridge's Proxy cache: members are read from it. */
  proxies: ResilientInformer<Proxy>;
  /** Namespaces watched (undefined: all). */
  scopes: ReadonlyArray<string | undefined>;
  signals: Counter<'signal'>;
  maxHistoryEvents?: number;
  /** Passed to every pool workflow it starts (defaults otherwise). */
  poolTiming?: Partial<PoolTiming>;
  retryBaseMs?: number;
  retryMaxMs?: number;
}

export interface PoolBridge {
  start(): Promise<void>;
  stop(): Promise<void>;
  idle(): Promise<void>;
}

/** What a member says to its pool's decisions, as one line. */
function memberLine(p: Proxy): string {
  const conditions = p.status?.conditions ?? [];
  const is = (type: string) => conditions.some((c) => c.type === type && c.status === 'True');
  return JSON.stringify([
    p.metadata.name,
    p.metadata.uid,
    p.metadata.labels?.[LABEL_POOL_TEMPLATE_HASH] ?? '',
    is('Ready'),
    is('Draining'),
    Boolean(p.metadata.deletionTimestamp),
    p.metadata.generation ?? 0,
    p.metadata.labels ?? {},
    p.metadata.annotations ?? {},
  ]);
}

export function membersVersion(members: readonly Proxy[]): string {
  const lines = members.map(memberLine).sort();
  return createHash('sha256').update(lines.join('\n')).digest('hex').slice(0, 16);
}

export function poolDesiredOf(pool: ProxyPool, members: readonly Proxy[]): PoolDesired {
  const { strategy, autoscaling, rotation } = pool.spec;
  return {
    generation: pool.metadata.generation ?? 1,
    replicas: pool.spec.replicas,
    templateHash: templateHashOf(pool),
    strategy: {
      maxSurge: strategy.maxSurge,
      maxUnavailable: strategy.maxUnavailable,
      drainTimeoutSeconds: strategy.drainTimeoutSeconds,
    },
    ...(autoscaling
      ? {
          autoscaling: {
            minReplicas: autoscaling.minReplicas,
            maxReplicas: autoscaling.maxReplicas,
            targetUtilization: autoscaling.targetUtilization,
            scaleUpStabilizationMs: autoscaling.scaleUpStabilizationSeconds * 1000,
            scaleDownStabilizationMs: autoscaling.scaleDownStabilizationSeconds * 1000,
          },
        }
      : {}),
    ...(rotation && (rotation.maxAgeSeconds !== undefined || rotation.afterBans)
      ? {
          rotation: {
            ...(rotation.maxAgeSeconds !== undefined ? { maxAgeMs: rotation.maxAgeSeconds * 1000 } : {}),
            ...(rotation.afterBans
              ? {
                  afterBans: {
                    reports: rotation.afterBans.reports,
                    distinctTargets: rotation.afterBans.distinctTargets,
                    windowMs: rotation.afterBans.windowSeconds * 1000,
                  },
                }
              : {}),
          },
        }
      : {}),
    maxLeasesPerMember: pool.spec.template.spec.maxLeases ?? DEFAULT_MAX_LEASES,
    deletionRequested: Boolean(pool.metadata.deletionTimestamp),
    membersVersion: membersVersion(members),
  };
}

export function createPoolBridge(opts: PoolBridgeOptions): PoolBridge {
  const log = opts.logger.child({ component: 'pool-bridge' });
  const pools: ResilientInformer<ProxyPool> = createProxyPoolInformer({
    kubeConfig: opts.kubeConfig,
    logger: log,
    scopes: opts.scopes,
  });
  const lastSent = new Map<string, string>();
  const lastDesired = new Map<string, { ref: PoolRef; desired: PoolDesired }>();
  const key = (namespace: string, name: string) => `${namespace}/${name}`;

  const queue = createWorkQueue({
    concurrency: 4,
    baseDelayMs: opts.retryBaseMs ?? 1_000,
    maxDelayMs: opts.retryMaxMs ?? 2 * 60_000,
    process: (k) => reconcile(k),
    onFailure(k, error, failures, delayMs) {
      log.warn(
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

  pools.onChange((pool) => queue.add(key(pool.metadata.namespace ?? 'default', pool.metadata.name)));
  let offProxies: (() => void) | undefined;
  pools.onReconnect(() => {
    lastSent.clear();
    for (const p of pools.list()) queue.add(key(p.metadata.namespace ?? 'default', p.metadata.name));
  });

  async function reconcile(k: string): Promise<void> {
    const [namespace, name] = k.split('/') as [string, string];
    const pool = pools.get(name, namespace);
    if (!pool) {
      // Gone from the cache: tell its workflow, never start one.
      const last = lastDesired.get(k);
      lastDesired.delete(k);
      lastSent.delete(k);
      if (!last) return;
      try {
        await opts.client.workflow
          .getHandle(poolWorkflowId(last.ref))
          .signal(poolChangedSignal, { ...last.desired, deletionRequested: true });
        opts.signals.inc({ signal: 'poolChanged' });
      } catch (error) {
        if (!(error instanceof WorkflowNotFoundError)) throw error;
      }
      return;
    }
    const ref = poolRefOf(pool);
    const members = opts.proxies.list(namespace).filter((p) => controllingPool(p)?.uid === ref.uid);
    const desired = poolDesiredOf(pool, members);
    lastDesired.set(k, { ref, desired });
    const fingerprint = JSON.stringify([ref.uid, desired]);
    if (lastSent.get(k) === fingerprint) return;
    const input: PoolWorkflowInput = { ref, desired };
    if (opts.maxHistoryEvents) input.maxHistoryEvents = opts.maxHistoryEvents;
    if (opts.poolTiming) input.timing = opts.poolTiming;
    try {
      await opts.client.workflow.signalWithStart<PoolWorkflow, [PoolDesired]>(POOL_WORKFLOW_TYPE, {
        workflowId: poolWorkflowId(ref),
        taskQueue: opts.taskQueue,
        args: [input],
        signal: poolChangedSignal,
        signalArgs: [desired],
        // A pool whose workflow completed (the pool was deleted) is never restarted by a late event.
        workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
      });
      opts.signals.inc({ signal: 'poolChanged' });
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
    lastSent.set(k, fingerprint);
  }

  return {
    async start() {
      queue.resume();
      offProxies ??= opts.proxies.onChange((proxy) => {
        const owner = controllingPool(proxy);
        if (owner) queue.add(key(proxy.metadata.namespace ?? 'default', owner.name));
      });
      await pools.start();
      log.info({ pools: pools.list().length }, 'pool bridge started');
    },
    async stop() {
      offProxies?.();
      offProxies = undefined;
      await pools.stop();
      await queue.shutDown();
    },
    idle: () => queue.idle(),
  };
}
