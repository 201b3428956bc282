/**
 * A direct (uncached) read of one Proxy by reference: the authoritative
 * answer to "does the Proxy with this UID still exist?".
 */
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { GROUP, PROXY_PLURAL, VERSION, type Proxy } from '../resources/proxy-schema.js';
import type { ProxyRef } from '../workflows/proxy/types.js';

/** The HTTP status of a client-node ApiException (its `code`), or undefined for anything else. */
export function httpCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

export interface ProxyReader {
  readProxy(ref: ProxyRef): Promise<Proxy | undefined>;
}

export function createProxyReader(kc: KubeConfig): ProxyReader {
  const api = kc.makeApiClient(CustomObjectsApi);
  return {
    async readProxy(ref) {
      try {
        const proxy = (await api.getNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ref.namespace,
          plural: PROXY_PLURAL,
          name: ref.name,
        })) as Proxy;
        return proxy.metadata.uid === ref.uid ? proxy : undefined;
      } catch (error) {
        if (httpCode(error) === 404) return undefined;
        throw error;
      }
    },
  };
}
