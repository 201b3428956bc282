/**
 * The typed client for ProviderHealth objects (cluster-scoped, one per
 * configured provider): the one place that spells their group, version and
 * plural. Writes are pinned to the object read (UID, resourceVersion or a
 * label tested in a JSON patch), so a recreated object, or one another
 * installation has claimed since, fails them (422) and the caller retries on
 * a fresh read.
 */
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import {
  API_VERSION,
  GROUP,
  PROVIDER_HEALTH_PLURAL,
  VERSION,
  type ProviderHealth,
  type ProviderHealthStatus,
} from '../resources/proxy-schema.js';
import { httpCode } from './errors.js';

/** A label key as a JSON Pointer segment (RFC 6901: `~` then `/` escaped). */
function pointerSegment(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

export interface ProviderHealthClient {
  /** The object, or undefined when there is none of that name. */
  get(name: string): Promise<ProviderHealth | undefined>;
  /** Creates it with these labels; a concurrent create (409) reads the existing one back. */
  create(name: string, labels: Record<string, string>): Promise<{ object: ProviderHealth; created: boolean }>;
  /** Replaces the labels of exactly the version read. */
  setLabels(object: ProviderHealth, labels: Record<string, string>): Promise<ProviderHealth>;
  /** Replaces the status of the object read while the label `key` still has `value`. */
  writeStatus(
    object: ProviderHealth,
    pin: { key: string; value: string },
    status: ProviderHealthStatus,
  ): Promise<void>;
  list(labelSelector: string): Promise<ProviderHealth[]>;
  /** Deletes the object listed (UID precondition): 'conflict' when one was recreated under the name since. */
  delete(object: ProviderHealth): Promise<'deleted' | 'gone' | 'conflict'>;
}

export function createProviderHealthClient(kc: KubeConfig): ProviderHealthClient {
  const api = kc.makeApiClient(CustomObjectsApi);
  const base = { group: GROUP, version: VERSION, plural: PROVIDER_HEALTH_PLURAL } as const;
  const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

  const get = async (name: string): Promise<ProviderHealth | undefined> => {
    try {
      return (await api.getClusterCustomObject({ ...base, name })) as ProviderHealth;
    } catch (error) {
      if (httpCode(error) === 404) return undefined;
      throw error;
    }
  };

  return {
    get,

    async create(name, labels) {
      const body: ProviderHealth = {
        apiVersion: API_VERSION,
        kind: 'ProviderHealth',
        metadata: { name, labels },
      };
      try {
        return {
          object: (await api.createClusterCustomObject({ ...base, body })) as ProviderHealth,
          created: true,
        };
      } catch (error) {
        if (httpCode(error) !== 409) throw error;
        const existing = await get(name);
        if (!existing) throw error;
        return { object: existing, created: false };
      }
    },

    async setLabels(object, labels) {
      return (await api.patchClusterCustomObject(
        {
          ...base,
          name: object.metadata.name,
          body: [
            { op: 'test', path: '/metadata/uid', value: object.metadata.uid },
            { op: 'test', path: '/metadata/resourceVersion', value: object.metadata.resourceVersion },
            { op: 'add', path: '/metadata/labels', value: labels },
          ],
        },
        jsonPatch,
      )) as ProviderHealth;
    },

    async writeStatus(object, pin, status) {
      await api.patchClusterCustomObjectStatus(
        {
          ...base,
          name: object.metadata.name,
          body: [
            { op: 'test', path: '/metadata/uid', value: object.metadata.uid },
            { op: 'test', path: `/metadata/labels/${pointerSegment(pin.key)}`, value: pin.value },
            { op: 'add', path: '/status', value: status },
          ],
        },
        jsonPatch,
      );
    },

    async list(labelSelector) {
      return ((await api.listClusterCustomObject({ ...base, labelSelector })) as { items: ProviderHealth[] })
        .items;
    },

    async delete(object) {
      try {
        await api.deleteClusterCustomObject({
          ...base,
          name: object.metadata.name,
          body: { preconditions: { uid: object.metadata.uid } },
        });
        return 'deleted';
      } catch (error) {
        const code = httpCode(error);
        if (code === 409) return 'conflict';
        if (code === 404) return 'gone';
        throw error;
      }
    },
  };
}
