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

/**
 * Whether an apiserver error says that this Proxy does not exist: a 404
 * whose Status names it. A bare 404 (an unserved API version, a wrong path,
 * a proxy in between) says nothing about the object, and treating it as
 * "gone" would make every Proxy workflow delete its instance and end.
 */
/** The apiserver's Status object carried by a client-node ApiException, when there is one. */
function statusOf(error: unknown): {
  kind?: unknown;
  reason?: unknown;
  message?: unknown;
  details?: { name?: unknown; kind?: unknown };
} | null {
  let body = (error as { body?: unknown }).body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body) as unknown;
    } catch {
      return null;
    }
  }
  return typeof body === 'object' && body !== null ? body : null;
}

/**
 * Whether an apiserver error says that this Proxy does not exist: a 404
 * whose Status names it. A bare 404 (an unserved API version, a wrong path,
 * a proxy in between) says nothing about the object, and treating it as
 * "gone" would make every Proxy workflow delete its instance and end.
 */
export function isProxyNotFound(error: unknown, name: string): boolean {
  if (httpCode(error) !== 404) return false;
  const status = statusOf(error);
  return (
    status?.kind === 'Status' &&
    status.reason === 'NotFound' &&
    status.details?.name === name &&
    status.details.kind === PROXY_PLURAL
  );
}

/** One line for a log: the apiserver's Status message (what RBAC denied, what the schema refused), else the error's first line. */
export function apiErrorLine(error: unknown): string {
  const message = statusOf(error)?.message;
  const line = typeof message === 'string' ? message : error instanceof Error ? error.message : String(error);
  return line.split('\n')[0]!.slice(0, 300);
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
        if (isProxyNotFound(error, ref.name)) return undefined;
        throw error;
      }
    },
  };
}
