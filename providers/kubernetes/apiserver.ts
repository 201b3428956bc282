/**
 * The kubernetes provider's apiserver: the kubeconfig loaded on the first
 * call (contract §7: construction dials nothing; a missing file is
 * Transient until it appears, a Secret mount that lands late, an
 * unparsable one Permanent), and every request bounded by its own
 * `operationTimeoutSeconds` and the caller's signal, and traced.
 */
import { access } from 'node:fs/promises';
import {
  CoreV1Api,
  NetworkingV1Api,
  KubeConfig,
  Observable,
  type ConfigurationOptions,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
} from '@kubernetes/client-node';
import { reuseConnections } from '../../kube/connections.js';
import { tracedCall } from '../shared/bounded-call.js';
import type { Operations } from '../shared/operation.js';
import { MARK_MANAGED, MARK_MANAGED_VALUE, type ProviderOperation } from '../types.js';
import { classify } from './classify.js';
import type { KubernetesConfig } from './config.js';

/** The selector listByTag and check() use: the managed mark, across all namespaces. */
export const MANAGED_SELECTOR = `${MARK_MANAGED}=${MARK_MANAGED_VALUE}`;

export type RequestOptions = ConfigurationOptions<ObservableMiddleware>;

export interface Client {
  api: CoreV1Api;
  /** NetworkPolicies beside the pods. */
  net: NetworkingV1Api;
  /** The apiserver URL (check()'s target address). */
  server: string;
}

/** ConfigurationOptions that hand `signal` to node-fetch for this one request. */
function signalOptions(signal: AbortSignal): RequestOptions {
  const middleware: ObservableMiddleware = {
    pre: (context: RequestContext) => {
      context.setSignal(signal);
      return new Observable(Promise.resolve(context));
    },
    post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
  };
  return { middleware: [middleware], middlewareMergeStrategy: 'append' };
}

/** The client-node method a pod list in `namespace` (or all namespaces) calls: the request span's name. */
export function podListRequest(namespace: string | undefined): string {
  return namespace === undefined ? 'listPodForAllNamespaces' : 'listNamespacedPod';
}

/** One managed-pod list call, cluster-wide or in one namespace. */
export function listPods(
  api: CoreV1Api,
  namespace: string | undefined,
  limit: number,
  cont: string | undefined,
) {
  const query = {
    labelSelector: MANAGED_SELECTOR,
    limit,
    ...(cont === undefined ? {} : { _continue: cont }),
  };
  return (o: RequestOptions) =>
    namespace === undefined
      ? api.listPodForAllNamespaces(query, o)
      : api.listNamespacedPod({ ...query, namespace }, o);
}

export class Apiserver {
  private client: Client | undefined;

  constructor(
    private readonly provider: { type: string; name: string },
    private readonly config: KubernetesConfig,
    private readonly ops: Operations,
    /** A KubeConfig to use as given instead of loading one; only held, never dialled, here. */
    private readonly injected: KubeConfig | undefined,
  ) {}

  /** The apiserver URL once a client exists, else ''. */
  get server(): string {
    return this.client?.server ?? '';
  }

  /**
   * One apiserver request, bounded by the caller's signal and by its own
   * `operationTimeoutSeconds`. The signal goes to the HTTP request, and the
   * returned promise also settles the moment either fires, whatever the
   * transport does. Backend errors are rethrown as they are (the operation
   * classifies them); an ended call throws CallEnded.
   */
  call<T>(
    signal: AbortSignal,
    operation: ProviderOperation,
    request: string,
    fn: (options: RequestOptions) => Promise<T>,
  ): Promise<T> {
    const timeoutMs = Math.round(this.config.operationTimeoutSeconds * 1000);
    return tracedCall(
      this.provider,
      request,
      { signal, timeoutMs, what: 'apiserver call', operation, classify: (err) => classify(err).errorClass },
      (b) => fn(signalOptions(b)),
    );
  }

  /** The API client, loading the kubeconfig on first use. Config problems throw ProviderErrors. */
  async api(operation: ProviderOperation, instance: string): Promise<Client> {
    if (this.client !== undefined) return this.client;
    // A kubeconfig we load gets keep-alive connections (kube/connections.ts); an injected one comes with its own.
    const kc = this.injected ?? reuseConnections(await this.loadKubeConfig(operation, instance));
    // `context` selects within a kubeconfig we loaded; an injected one is used as given, never mutated.
    if (this.injected === undefined && this.config.context !== undefined) {
      if (!kc.getContexts().some((c) => c.name === this.config.context)) {
        throw this.ops.fail(
          'Permanent',
          operation,
          instance,
          `kubeconfig has no context "${this.config.context}"`,
        );
      }
      kc.setCurrentContext(this.config.context);
    }
    const cluster = kc.getCurrentCluster();
    if (cluster === null)
      throw this.ops.fail('Permanent', operation, instance, 'kubeconfig has no current cluster');
    this.client = {
      api: kc.makeApiClient(CoreV1Api),
      net: kc.makeApiClient(NetworkingV1Api),
      server: cluster.server,
    };
    this.ops.log.info(
      { server: cluster.server, namespace: this.config.namespace },
      'kubernetes provider ready',
    );
    return this.client;
  }

  private async loadKubeConfig(operation: ProviderOperation, instance: string): Promise<KubeConfig> {
    const kc = new KubeConfig();
    const path = this.config.kubeconfig;
    if (path === undefined) {
      try {
        kc.loadFromDefault();
      } catch (err) {
        throw this.ops.fail('Permanent', operation, instance, 'the default kubeconfig does not load', err);
      }
      return kc;
    }
    try {
      await access(path);
    } catch (err) {
      // A Secret mounted `optional: true` is absent until it exists: retry.
      throw this.ops.fail('Transient', operation, instance, `kubeconfig ${path} cannot be read`, err);
    }
    try {
      kc.loadFromFile(path);
    } catch (err) {
      throw this.ops.fail('Permanent', operation, instance, `kubeconfig ${path} does not load`, err);
    }
    return kc;
  }

  /**
   * Forgets the client. Every request opens its own connection (client-node
   * makes an agent per request); nothing stays open between calls.
   */
  close(): void {
    this.client = undefined;
  }
}
