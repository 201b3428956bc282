/**
 * Provider calls as activities. Each call gets the activity's cancellation
 * signal (a worker shutdown or a workflow cancel aborts the backend call),
 * and every error leaves here as an ApplicationFailure with a stable type.
 */
import { Context } from '@temporalio/activity';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { classOf } from '../providers/errors.js';
import type { ProviderRegistry } from '../providers/config.js';
import { instanceNameFromUid } from '../providers/names.js';
import { cloudInitContentHash, specHash } from '../providers/spec-hash.js';
import type { Provider } from '../providers/types.js';
import { FailureType } from '../workflows/proxy/failure-types.js';
import { nonRetryable, toApplicationFailure } from './failures.js';
import { createProxyReader, resolveCloudInit } from './kube-activities.js';
import type { ProviderActivities } from './types.js';

export interface ProviderActivityDeps {
  registry: ProviderRegistry;
  kubeConfig: KubeConfig;
  /** Written as the installation mark on every instance; GC deletes only its own. */
  installation: string;
  logger: Logger;
}

function abortSignal(): AbortSignal {
  try {
    return Context.current().cancellationSignal;
  } catch {
    // Called outside an activity (a unit test): never aborted.
    return new AbortController().signal;
  }
}

export function createProviderActivities(deps: ProviderActivityDeps): ProviderActivities {
  const reader = createProxyReader(deps.kubeConfig);
  const log = deps.logger.child({ component: 'provider-activities' });

  const lookup = (name: string): Provider => {
    const provider = deps.registry.get(name);
    if (!provider) {
      const known = deps.registry.names().join(', ') || 'none';
      throw nonRetryable(
        FailureType.ProviderNotConfigured,
        `provider "${name}" is not configured (configured: ${known})`,
      );
    }
    return provider;
  };

  return {
    async createInstance(input) {
      const provider = lookup(input.provider);
      const cloudInit = await resolveCloudInit(deps.kubeConfig, reader, input.ref, input.cloudInit);
      const hash = specHash({
        placement: input.placement,
        port: input.port,
        cloudInitSha256: cloudInitContentHash(cloudInit),
      });
      const name = instanceNameFromUid(input.ref.uid);
      try {
        const id = await provider.create(
          {
            name,
            uid: input.ref.uid,
            namespace: input.ref.namespace,
            proxyName: input.ref.name,
            placement: input.placement,
            cloudInit,
            port: input.port,
            installation: deps.installation,
          },
          abortSignal(),
        );
        log.info(
          {
            provider: provider.name,
            id,
            proxy: `${input.ref.namespace}/${input.ref.name}`,
            cloudInitBytes: cloudInit?.length ?? 0,
          },
          'instance created',
        );
        return { id, specHash: hash };
      } catch (error) {
        throw toApplicationFailure(error);
      }
    },

    async getInstance({ provider: name, id }) {
      const provider = lookup(name);
      try {
        const instance = await provider.get(id, abortSignal());
        return { found: true, state: instance.state, ...(instance.ip ? { ip: instance.ip } : {}) };
      } catch (error) {
        if (classOf(error) === 'NotFound') return { found: false };
        throw toApplicationFailure(error);
      }
    },

    async deleteInstance({ provider: name, id }) {
      const provider = lookup(name);
      try {
        await provider.delete(id, abortSignal());
      } catch (error) {
        throw toApplicationFailure(error);
      }
    },
  };
}
