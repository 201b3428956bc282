/**
 * The `kubernetes` provider: every instance is one Squid pod (see pod.ts) in
 * the configured namespace (or, when none is configured, the Proxy's own),
 * named by the deterministic instance name.
 *
 * Profile (contract §4): readiness immediate (seconds to schedule and pull);
 * create-return submit (returns after the apiserver accepts the pod);
 * delete-return returns-early (the kubelet stops the pod; `get` keeps
 * returning it, as Terminated, until the object is gone); ip-source
 * assigned-at-create (`status.podIP`); gc-mark native-labels (pod labels, in
 * the create call); created-at backend-timestamp
 * (`metadata.creationTimestamp`); list-partial n/a (one paginated list
 * across all namespaces; any failed page fails the whole list); quota
 * absent (a quota 403 is Permanent, see classify.ts); not-found status-404;
 * primary-key name-is-key (`<namespace>/<name>`); provisioning-state native
 * (`Pending`); async-ops none; secondary-resources none (the Squid config
 * travels in the pod); credentials workload-identity (in-cluster service
 * account) or a kubeconfig file; client-kind vendor-sdk
 * (`@kubernetes/client-node`); timeouts per-call (`operationTimeoutSeconds`
 * on every apiserver request, each with its own bound).
 *
 * Construction does nothing (contract §7): the kubeconfig is read on the
 * first call (apiserver.ts). This file is the wiring point: the apiserver,
 * the pod (pod.ts) and its state (state.ts), in this provider's operation
 * frame.
 */
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { ProviderError } from '../errors.js';
import { CallEnded } from '../shared/bounded-call.js';
import { foreignOwner, parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Operations } from '../shared/operation.js';
import {
  MARK_MANAGED,
  MARK_MANAGED_VALUE,
  MARK_UID,
  type CreateRequest,
  type Instance,
  type Provider,
  type TargetStatus,
} from '../types.js';
import { Apiserver, listPods, podListRequest, type Client } from './apiserver.js';
import { checkReason, classify, httpStatus } from './classify.js';
import { DNS1123_LABEL, type KubernetesConfig } from './config.js';
import { NetworkPolicies } from './network-policy.js';
import { AuthSecrets } from './auth-secret.js';
import { buildPod, podNamespace } from './pod.js';
import { formatProviderId, instanceFromPod, parseProviderId, podFailure } from './state.js';

export const KUBERNETES_PROVIDER_TYPE = 'kubernetes';
/** Pods per page in listByTag; every page is one bounded call. */
export const LIST_PAGE_SIZE = 500;
/** A label value: at most 63 characters, alphanumeric at both ends, `-_.` inside; may be empty. */
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;

export interface KubernetesProviderOptions {
  /** The configured name. */
  name: string;
  config: KubernetesConfig;
  logger: Logger;
  /**
   * A KubeConfig to use as given instead of loading one (`config.kubeconfig`
   * and `config.context`, or in-cluster/default rules). Only held, never
   * dialled, at construction.
   */
  kubeConfig?: KubeConfig;
  /** Pods per listByTag page (default LIST_PAGE_SIZE); tests make it small to cross pages. */
  listPageSize?: number;
  /**
   * A namespace-scoped install (`--watch-namespaces`): listByTag and check()
   * list pods in these namespaces (and `config.namespace`) one at a time,
   * instead of across all namespaces, so Roles suffice.
   */
  listNamespaces?: readonly string[];
}

export interface KubernetesProvider extends Provider {
  readonly config: KubernetesConfig;
  check(signal: AbortSignal): Promise<TargetStatus[]>;
  close(): Promise<void>;
}

export function createKubernetesProvider(options: KubernetesProviderOptions): KubernetesProvider {
  return new KubernetesProviderImpl(
    options.name,
    options.config,
    options.logger,
    options.kubeConfig,
    options.listPageSize ?? LIST_PAGE_SIZE,
    listScopes(options.config, options.listNamespaces),
  );
}

/** Where listByTag looks: everywhere at once, or each namespace pods can be in. */
function listScopes(
  config: KubernetesConfig,
  namespaces: readonly string[] | undefined,
): string[] | undefined {
  if (!namespaces || namespaces.length === 0) return undefined;
  return [...new Set([...(config.namespace ? [config.namespace] : []), ...namespaces])];
}

class KubernetesProviderImpl implements KubernetesProvider {
  readonly type = KUBERNETES_PROVIDER_TYPE;
  /** listByTag is one paged pod list. */
  readonly capabilities = { cheapListByTag: true, quickCreate: true };
  private readonly ops: Operations;
  private readonly apiserver: Apiserver;
  private readonly networkPolicies: NetworkPolicies;
  private readonly authSecrets: AuthSecrets;

  constructor(
    readonly name: string,
    readonly config: KubernetesConfig,
    logger: Logger,
    injected: KubeConfig | undefined,
    private readonly pageSize: number,
    /** Undefined: all namespaces in one list. */
    private readonly scopes: string[] | undefined,
  ) {
    this.ops = providerOperations({ name, type: KUBERNETES_PROVIDER_TYPE, logger, classify });
    this.apiserver = new Apiserver({ type: KUBERNETES_PROVIDER_TYPE, name }, config, this.ops, injected);
    this.networkPolicies = new NetworkPolicies(this.apiserver, config);
    this.authSecrets = new AuthSecrets(this.apiserver, config);
  }

  private parseId(operation: 'get' | 'delete', id: string): { namespace: string; name: string } {
    return parseIdOrFail(this.ops, operation, id, parseProviderId, '<namespace>/<pod name>');
  }

  // -- the contract ---------------------------------------------------------

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, async () => {
      this.validate(req, instance);
      const { api } = await this.apiserver.api('create', instance);
      const namespace = podNamespace(req, this.config);
      const id = formatProviderId(namespace, req.name);
      try {
        const created = await this.apiserver.call(signal, 'create', 'createNamespacedPod', (o) =>
          api.createNamespacedPod({ namespace, body: buildPod(req, this.config) }, o),
        );
        await this.networkPolicies.ensure(req, created, signal);
        await this.authSecrets.ensure(req, created, signal);
        this.ops.log.info(
          {
            instance: req.name,
            namespace,
            uid: req.uid,
            port: req.port,
            image: this.config.image,
            // Not delivered (a pod has no cloud-init); only its size is ever logged.
            cloudInitBytes: Buffer.byteLength(req.cloudInit ?? '', 'utf8'),
          },
          'created squid pod',
        );
        return id;
      } catch (err) {
        const status = httpStatus(err);
        // Do not answer NotFound from create (contract §5): the namespace is missing.
        if (status === 404) {
          throw this.ops.fail('Transient', 'create', instance, `namespace ${namespace} does not exist`, err);
        }
        if (status !== 409) throw err;
      }
      return this.adopt(req, signal, id);
    });
  }

  private validate(req: CreateRequest, instance: string): void {
    if (typeof req.name !== 'string' || !DNS1123_LABEL.test(req.name)) {
      throw this.ops.fail('Permanent', 'create', instance, 'name is not a DNS-1123 label (a pod name)');
    }
    if (this.config.namespace === undefined && !DNS1123_LABEL.test(String(req.namespace))) {
      throw this.ops.fail('Permanent', 'create', instance, "the Proxy's namespace is not a DNS-1123 label");
    }
    if (!Number.isInteger(req.port) || req.port < 1 || req.port > 65535) {
      throw this.ops.fail('Permanent', 'create', instance, `port ${String(req.port)} is not in 1-65535`);
    }
    if (req.uid === '' || !LABEL_VALUE.test(req.uid)) {
      throw this.ops.fail('Permanent', 'create', instance, 'uid is not a non-empty label value');
    }
    if (!LABEL_VALUE.test(req.installation)) {
      throw this.ops.fail(
        'Permanent',
        'create',
        instance,
        `installation "${req.installation.slice(0, 80)}" is not a label value (at most 63 of A-Z a-z 0-9 - _ .)`,
      );
    }
  }

  /** 409 on create: a pod of this name exists. It is ours only if its UID mark says so. */
  private async adopt(req: CreateRequest, signal: AbortSignal, id: string): Promise<string> {
    const { api } = await this.apiserver.api('create', req.name);
    let existing: V1Pod;
    try {
      existing = await this.apiserver.call(signal, 'create', 'readNamespacedPod', (o) =>
        api.readNamespacedPod({ namespace: podNamespace(req, this.config), name: req.name }, o),
      );
    } catch (err) {
      if (httpStatus(err) === 404) {
        throw this.ops.fail(
          'Transient',
          'create',
          req.name,
          'the existing pod disappeared during create; retry',
        );
      }
      throw err;
    }
    const owner = existing.metadata?.labels?.[MARK_UID] ?? '';
    if (owner !== req.uid) throw foreignOwner(this.ops, req.name, 'a pod', owner, req.uid);
    if (existing.metadata?.deletionTimestamp !== undefined && existing.metadata.deletionTimestamp !== null) {
      throw this.ops.fail(
        'Transient',
        'create',
        req.name,
        'the pod with this name is still being deleted; retry',
      );
    }
    await this.networkPolicies.ensure(req, existing, signal);
    await this.authSecrets.ensure(req, existing, signal);
    this.ops.log.debug({ instance: req.name }, 'create: adopted the existing pod');
    return id;
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', String(id), signal, async () => {
      const { namespace, name } = this.parseId('get', id);
      const { api } = await this.apiserver.api('get', id);
      const pod = await this.apiserver.call(signal, 'get', 'readNamespacedPod', (o) =>
        api.readNamespacedPod({ namespace, name }, o),
      );
      // What the kubelet or the scheduler reports as wrong ends the wait for
      // Running with its reason, rather than an endless Provisioning.
      const failure = podFailure(pod);
      if (failure) throw this.ops.fail(failure.errorClass, 'get', id, failure.message);
      return instanceFromPod(pod, namespace);
    });
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', String(id), signal, async () => {
      const { namespace, name } = this.parseId('delete', id);
      const { api } = await this.apiserver.api('delete', id);
      try {
        await this.apiserver.call(signal, 'delete', 'deleteNamespacedPod', (o) =>
          api.deleteNamespacedPod({ namespace, name }, o),
        );
        this.ops.log.info({ instance: name, namespace }, 'deleted squid pod');
      } catch (err) {
        if (httpStatus(err) !== 404) throw err;
        this.ops.log.debug({ instance: name, namespace }, 'delete: already gone');
      }
      await this.networkPolicies.remove(namespace, name, signal, 'delete');
      await this.authSecrets.remove(namespace, name, signal, 'delete');
    });
  }

  listByTag(signal: AbortSignal): Promise<Instance[]> {
    return this.ops.run('list', '', signal, async () => {
      const { api } = await this.apiserver.api('list', '');
      const out: Instance[] = [];
      for (const namespace of this.scopes ?? [undefined]) {
        let cont: string | undefined;
        do {
          const page = await this.apiserver.call(
            signal,
            'list',
            podListRequest(namespace),
            listPods(api, namespace, this.pageSize, cont),
          );
          for (const pod of page.items) {
            // The selector already guarantees the mark; checked again so a
            // selector mistake can never hand GC a pod we do not own.
            if (pod.metadata?.labels?.[MARK_MANAGED] !== MARK_MANAGED_VALUE) continue;
            out.push(instanceFromPod(pod, ''));
          }
          cont = page.metadata?._continue || undefined;
        } while (cont !== undefined);
      }
      return out;
    });
  }

  /**
   * One target, `apiserver`: lists at most one managed pod across all
   * namespaces, the verb and scope listByTag (and so GC) relies on. It
   * proves the apiserver answers and RBAC allows that list; it does not
   * prove create or delete rights.
   */
  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const started = Date.now();
    const base = { name: 'apiserver', address: this.apiserver.server };
    if (signal.aborted) {
      return [{ ...base, ready: false, reason: 'Timeout', message: 'check aborted before it ran' }];
    }
    let client: Client;
    try {
      client = await this.apiserver.api('check', '');
    } catch (err) {
      const message = err instanceof ProviderError ? err.message : 'kubeconfig does not load';
      return [{ ...base, ready: false, reason: 'Unreachable', message: message.slice(0, 1024) }];
    }
    const target = { ...base, address: client.server };
    try {
      const page = await this.apiserver.call(
        signal,
        'check',
        podListRequest(this.scopes?.[0]),
        listPods(client.api, this.scopes?.[0], 1, undefined),
      );
      return [
        {
          ...target,
          ready: true,
          reason: 'Reachable',
          latencyMillis: Date.now() - started,
          details: {
            namespace: this.config.namespace ?? "each Proxy's own",
            managedPodsFound: page.items.length > 0 ? 'yes' : 'no',
          },
        },
      ];
    } catch (err) {
      const ended = err instanceof CallEnded;
      const reason = checkReason(err, ended || signal.aborted);
      const where = this.scopes ? `namespace ${this.scopes[0]}` : 'all namespaces';
      const message = ended ? err.message : `list pods (${where}, limit 1): ${classify(err).summary}`;
      this.ops.log.debug({ reason }, 'check failed');
      return [{ ...target, ready: false, reason, message, latencyMillis: Date.now() - started }];
    }
  }

  close(): Promise<void> {
    this.apiserver.close();
    return Promise.resolve();
  }
}
