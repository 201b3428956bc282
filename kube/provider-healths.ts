/**
 * The typed client for ProviderHealth objects (cluster-scoped, one per
 * configured provider): the one place that names the kind, over the generic
 * client (`custom-resources.ts`). Writes are pinned to the object read (UID, resourceVersion or a
 * label tested in a JSON patch), so a recreated object, or one another
 * installation has claimed since, fails them (422) and the caller retries on
 * a fresh read.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import {
  PROVIDER_HEALTH_PLURAL,
  type ProviderHealth,
  type ProviderHealthStatus,
} from '../resources/proxy-schema.js';
import { createCustomResourceClient, type CustomResourceKind, type JsonPatchOp } from './custom-resources.js';
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

/** Cluster-scoped; a bare 404 on a get or a delete says the object is gone. */
export const PROVIDER_HEALTH_KIND: CustomResourceKind = {
  kind: 'ProviderHealth',
  plural: PROVIDER_HEALTH_PLURAL,
  namespaced: false,
  isNotFound: (error) => httpCode(error) === 404,
};

export function createProviderHealthClient(kc: KubeConfig): ProviderHealthClient {
  const objects = createCustomResourceClient<ProviderHealth>(kc, PROVIDER_HEALTH_KIND);
  const get = (name: string) => objects.get({ name });
  /** The JSON-patch test that pins a write to the object read (one recreated under the name has another UID). */
  const sameUid = (object: ProviderHealth): JsonPatchOp => ({
    op: 'test',
    path: '/metadata/uid',
    value: object.metadata.uid,
  });

  return {
    get,

    async create(name, labels) {
      try {
        return { object: await objects.create({ metadata: { name, labels } }), created: true };
      } catch (error) {
        if (httpCode(error) !== 409) throw error;
        const existing = await get(name);
        if (!existing) throw error;
        return { object: existing, created: false };
      }
    },

    setLabels: (object, labels) =>
      objects.jsonPatch(object.metadata, [
        sameUid(object),
        { op: 'test', path: '/metadata/resourceVersion', value: object.metadata.resourceVersion },
        { op: 'add', path: '/metadata/labels', value: labels },
      ]),

    async writeStatus(object, pin, status) {
      await objects.patchStatus(object.metadata, [
        sameUid(object),
        { op: 'test', path: `/metadata/labels/${pointerSegment(pin.key)}`, value: pin.value },
        { op: 'add', path: '/status', value: status },
      ]);
    },

    list: async (labelSelector) => (await objects.list(undefined, { labelSelector })).items,

    delete: (object) => objects.deleteExactly({ name: object.metadata.name, uid: object.metadata.uid }),
  };
}
