/**
 * Provider calls as activities. Each call gets the activity's cancellation
 * signal (a worker shutdown or a workflow cancel aborts the backend call),
 * heartbeats while it runs (so a killed worker is noticed within the
 * heartbeat timeout), and every error leaves here as an ApplicationFailure
 * with a stable type.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { classOf, providerError } from '../providers/errors.js';
import type { ProviderRegistry } from '../providers/config.js';
import { instanceNameFromUid } from '../providers/names.js';
import { cloudInitContentHash, specHash } from '../providers/spec-hash.js';
import { unlistedOf, type Provider } from '../providers/types.js';
import { FailureType } from '../workflows/proxy/failure-types.js';
import { runsWithAddress } from '../workflows/proxy/transitions.js';
import { nonRetryable, toApplicationFailure } from './failures.js';
import { createProxyClient } from '../kube/proxies.js';
import { resolveCloudInit, resolveCredentials } from './kube-activities.js';
import type { SecretView } from '../kube/cloud-init.js';
import { writeProviderCredentials } from '../kube/proxy-credentials.js';
import { apiErrorLine } from '../kube/errors.js';
import type { ProxyRef } from '../kube/proxies.js';
import { credentialsDigest, generatedSecretName } from '../credentials/proxy-credentials.js';
import { createProviderCircuits, type ProviderCircuits } from './provider-circuit.js';
import type { GetInstanceResult, ProviderActivities } from './types.js';
import type { EventRecorder } from '../kube/events.js';

export interface ProviderActivityDeps {
  registry: ProviderRegistry;
  kubeConfig: KubeConfig;
  /** Written as the installation mark on every instance; GC deletes only its own. */
  installation: string;
  logger: Logger;
  /** Shared by every activity of this worker; a fresh set of circuits when absent. */
  circuits?: ProviderCircuits;
  /** Where an instance creation is reported on its Proxy; nowhere when absent. */
  events?: EventRecorder;
}

function abortSignal(): AbortSignal {
  try {
    return Context.current().cancellationSignal;
  } catch {
    // Called outside an activity (a unit test): never aborted.
    return new AbortController().signal;
  }
}

/** Well under the workflow's heartbeatTimeout (15 s), so a slow but live call is never timed out. */
const HEARTBEAT_INTERVAL_MS = 3_000;

/**
 * Runs `work` while heartbeating every few seconds. Without heartbeats the
 * server notices a killed worker (SIGKILL, OOM, a lost node) only when
 * startToCloseTimeout (2 minutes) expires; with them, after the activity's
 * heartbeatTimeout, and the retry on another worker starts soon after.
 * Heartbeats are also how a cancellation request reaches a running activity.
 */
async function heartbeating<T>(work: () => Promise<T>): Promise<T> {
  let context: Context;
  try {
    context = Context.current();
  } catch {
    // Called outside an activity (a unit test): nothing to heartbeat to.
    return work();
  }
  // A local activity has no heartbeat; its workflow task's timeout stands in.
  if (context.info.isLocal) return work();
  const timer = setInterval(() => context.heartbeat(), HEARTBEAT_INTERVAL_MS);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}

export function createProviderActivities(deps: ProviderActivityDeps): ProviderActivities {
  const proxies = createProxyClient(deps.kubeConfig);
  const log = deps.logger.child({ component: 'provider-activities' });
  const circuits =
    deps.circuits ??
    createProviderCircuits({
      onChange: (provider, view) =>
        log.warn({ provider, ...view }, view.open ? 'provider calls paused' : 'provider calls resumed'),
    });

  const lookup = (name: string): Provider => {
    const provider = deps.registry.get(name);
    if (!provider) {
      const reason = deps.registry.unbuilt?.(name);
      if (reason !== undefined) {
        throw nonRetryable(
          FailureType.ProviderNotConfigured,
          `provider "${name}" is configured but was not built: ${reason}`,
        );
      }
      const known = deps.registry.names().join(', ') || 'none';
      throw nonRetryable(
        FailureType.ProviderNotConfigured,
        `provider "${name}" is not configured (configured: ${known})`,
      );
    }
    return provider;
  };

  /** One provider Get through the circuit; NotFound is an answer, not an error. */
  const getThrough = async (provider: Provider, id: string): Promise<GetInstanceResult> => {
    try {
      const instance = await circuits.run(provider.name, 'get', id, () => provider.get(id, abortSignal()));
      return {
        found: true,
        state: instance.state,
        ...(instance.ip ? { ip: instance.ip } : {}),
        ...(instance.port ? { port: instance.port } : {}),
        ...(instance.state === 'Running' && instance.expiresAt
          ? { expiresAt: instance.expiresAt.toISOString() }
          : {}),
      };
    } catch (error) {
      if (classOf(error) === 'NotFound') return { found: false };
      throw error;
    }
  };

  /**
   * The Get a workflow makes right after a create, made here instead: one
   * activity and one workflow task fewer per provisioning, and a provider
   * that creates instances ready (local, an adopted instance) is Running at
   * once. A failure here is not the create's: the workflow asks again.
   */
  const firstLook = async (provider: Provider, id: string): Promise<{ seen?: GetInstanceResult }> => {
    try {
      const seen = await getThrough(provider, id);
      // NotFound straight after a create is eventual consistency, not an answer.
      return seen.found ? { seen } : {};
    } catch (error) {
      log.debug(
        { provider: provider.name, id, reason: error instanceof Error ? error.message : String(error) },
        'first look after create failed',
      );
      return {};
    }
  };

  /**
   * The provider's credentials for the instance, in the Proxy's generated
   * Secret (or taken out of it: a provider that sets none). Written only
   * when they differ: a create repeated by a retry writes nothing.
   */
  const syncProviderCredentials = async (
    provider: Provider,
    id: string,
    ref: ProxyRef,
    secret: SecretView,
  ): Promise<void> => {
    const set = provider.credentialsOf
      ? await circuits.run(provider.name, 'get', id, () => provider.credentialsOf!(id, abortSignal()))
      : undefined;
    let outcome: 'written' | 'unchanged';
    try {
      outcome = await writeProviderCredentials(deps.kubeConfig, ref, secret, set);
    } catch (error) {
      // The apiserver's answer (a 403 names the verb and resource), never the request's values: retried.
      throw ApplicationFailure.create({
        type: FailureType.Transient,
        message: `writing the provider's credentials into Secret ${ref.namespace}/${generatedSecretName(ref.name)}: ${apiErrorLine(error)}`,
      });
    }
    if (outcome === 'written')
      log.info(
        {
          provider: provider.name,
          id,
          proxy: `${ref.namespace}/${ref.name}`,
          providerCredentials: Boolean(set),
        },
        set
          ? "provider's credentials written to the proxy's Secret"
          : "provider's credentials taken out of the proxy's Secret",
      );
  };

  return {
    createInstance: (input) =>
      heartbeating(async () => {
        const provider = lookup(input.provider);
        const cloudInit = await resolveCloudInit(deps.kubeConfig, proxies, input.ref, input.cloudInit);
        const resolved = await resolveCredentials(deps.kubeConfig, input.ref, input.credentialsSecret);
        const credentials = resolved?.credentials;
        const attributes = provider.capabilities?.usesAttributes
          ? ((await proxies.read(input.ref))?.spec.attributes ?? {})
          : undefined;
        const hash = specHash({
          placement: input.placement,
          port: input.port,
          cloudInitSha256: cloudInitContentHash(cloudInit),
          credentialsSha256: credentials ? credentialsDigest(credentials) : '',
        });
        const name = instanceNameFromUid(input.ref.uid);
        try {
          const id = await circuits.run(provider.name, 'create', name, () =>
            provider.create(
              {
                name,
                uid: input.ref.uid,
                namespace: input.ref.namespace,
                proxyName: input.ref.name,
                placement: input.placement,
                cloudInit,
                ...(credentials ? { credentials } : {}),
                ...(attributes ? { attributes } : {}),
                port: input.port,
                installation: deps.installation,
              },
              abortSignal(),
            ),
          );
          log.info(
            {
              provider: provider.name,
              id,
              proxy: `${input.ref.namespace}/${input.ref.name}`,
              cloudInitBytes: cloudInit?.length ?? 0,
              credentialsSecret: input.credentialsSecret,
            },
            'instance created',
          );
          // What a client presents to this instance goes where the prober,
          // the gateway and the lease API read it, before any of them can
          // see the instance Running.
          if (resolved) await syncProviderCredentials(provider, id, input.ref, resolved.secret);
          const look = await firstLook(provider, id);
          // Reason as the Provisioned condition's next one; create adopts an
          // instance that already carries this Proxy's UID mark. An instance
          // running at once (a quick provider's) skips the Provisioning
          // phase: the status goes straight to Running, and the Running Event
          // its write records says the same (one Event, not two a moment apart).
          if (!(look.seen?.found === true && runsWithAddress(look.seen))) {
            await deps.events?.record(input.ref, {
              type: 'Normal',
              reason: 'Provisioning',
              action: 'Create',
              note: `instance ${id} created by provider ${provider.name}`,
            });
          }
          return { id, specHash: hash, ...look };
        } catch (error) {
          throw toApplicationFailure(error);
        }
      }),

    getInstance: ({ provider: name, id }) =>
      heartbeating(async () => {
        try {
          return await getThrough(lookup(name), id);
        } catch (error) {
          throw toApplicationFailure(error);
        }
      }),

    deleteInstance: ({ provider: name, id }) =>
      heartbeating(async () => {
        const provider = lookup(name);
        try {
          await circuits.run(provider.name, 'delete', id, () => provider.delete(id, abortSignal()));
        } catch (error) {
          throw toApplicationFailure(error);
        }
      }),

    findInstanceByUid: ({ provider: name, uid }) =>
      heartbeating(async () => {
        const provider = lookup(name);
        try {
          // Lists every instance the provider manages: rare (a deletion by a
          // run that never recorded its instance), so the cost is acceptable.
          const listed = await circuits.run(provider.name, 'list', '', () =>
            provider.listByTag(abortSignal()),
          );
          const mine = listed.find((i) => i.uid === uid);
          if (mine) return { id: mine.id };
          // Not found, but part of the fleet was not listed: it may be there. Retry, never "none".
          const unlisted = unlistedOf(listed);
          if (unlisted.length > 0)
            throw providerError({
              errorClass: 'Transient',
              operation: 'list',
              provider: provider.name,
              instance: uid,
              message: `not found on what could be listed; not listed: ${unlisted.map((u) => u.target).join(', ')}`,
            });
          return {};
        } catch (error) {
          throw toApplicationFailure(error);
        }
      }),
  };
}
