/**
 * What tests and benches do to Proxy and ProviderHealth objects by name, as
 * a user with kubectl would (create, get, edit, delete, strip finalizers) or
 * as the worker would (a status written in its place), on the typed clients
 * of kube/. No vitest here: the benches (plain scripts) use it too.
 */
import type { ProviderHealthClient } from '../../kube/provider-healths.js';
import { refOf, type NewProxy, type ProxyClient } from '../../kube/proxies.js';
import type {
  ProviderHealth,
  Proxy,
  ProxySpec,
  ProxySpecInput,
  ProxyStatus,
} from '../../resources/proxy-schema.js';

/** Creates a Proxy of this name (with labels, annotations or finalizers if given); the apiserver's refusal is thrown. */
export function createProxy(
  api: ProxyClient,
  namespace: string,
  name: string,
  spec: ProxySpecInput,
  metadata: Omit<NewProxy['metadata'], 'name' | 'namespace'> = {},
): Promise<Proxy> {
  return api.create({ metadata: { name, namespace, ...metadata }, spec });
}

/** The Proxy of this name, whatever its UID; throws when there is none. */
export async function getProxy(api: ProxyClient, namespace: string, name: string): Promise<Proxy> {
  const proxy = await api.get(namespace, name);
  if (!proxy) throw new Error(`Proxy ${namespace}/${name} not found`);
  return proxy;
}

/** Deletes the Proxy of this name, whatever its UID (as `kubectl delete` does); throws when there is none. */
export async function deleteProxy(api: ProxyClient, namespace: string, name: string): Promise<void> {
  const proxy = await getProxy(api, namespace, name);
  if ((await api.delete(refOf(proxy))) === 'gone') throw new Error(`Proxy ${namespace}/${name} not found`);
}

/**
 * Edits the Proxy of this name, as `kubectl edit` does: `change` gets the
 * Proxy as stored and returns its new spec, labels or annotations (each
 * whole), written to that same Proxy (pinned to its UID). Throws when there
 * is none.
 */
export async function patchProxy(
  api: ProxyClient,
  namespace: string,
  name: string,
  change: (proxy: Proxy) => Parameters<ProxyClient['patch']>[1],
): Promise<void> {
  const proxy = await getProxy(api, namespace, name);
  if ((await api.patch(refOf(proxy), change(proxy))) === 'gone')
    throw new Error(`Proxy ${namespace}/${name} not found`);
}

/** Edits the spec of the Proxy of this name (`patchProxy`): `edit` gets the spec as stored and returns the whole new one. */
export function editProxySpec(
  api: ProxyClient,
  namespace: string,
  name: string,
  edit: (spec: ProxySpec) => ProxySpecInput,
): Promise<void> {
  return patchProxy(api, namespace, name, (proxy) => ({ spec: edit(proxy.spec) }));
}

/** Replaces the status of this Proxy (a test standing in for the worker); throws when it is gone. */
export async function setProxyStatus(api: ProxyClient, proxy: Proxy, status: ProxyStatus): Promise<void> {
  if ((await api.writeStatus(refOf(proxy), status)) === 'gone')
    throw new Error(`Proxy ${proxy.metadata.namespace}/${proxy.metadata.name} not found`);
}

/** Removes every finalizer of the Proxy of this name (a test's hold, ours too), so a deleted one goes; throws when there is none. */
export async function removeFinalizers(api: ProxyClient, namespace: string, name: string): Promise<void> {
  const proxy = await getProxy(api, namespace, name);
  for (const finalizer of proxy.metadata.finalizers ?? []) {
    if ((await api.removeFinalizer(refOf(proxy), finalizer)).result === 'gone')
      throw new Error(`Proxy ${namespace}/${name} not found`);
  }
}

/** Creates a ProviderHealth of this name, as another installation (or a user) would; throws when the name is taken. */
export async function createProviderHealth(
  api: ProviderHealthClient,
  name: string,
  labels: Record<string, string> = {},
): Promise<ProviderHealth> {
  const { object, created } = await api.create(name, labels);
  if (!created) throw new Error(`ProviderHealth ${name} exists already`);
  return object;
}

/** Deletes the ProviderHealth of this name, whatever its UID; throws when there is none. */
export async function deleteProviderHealth(api: ProviderHealthClient, name: string): Promise<void> {
  const object = await api.get(name);
  if (!object || (await api.delete(object)) !== 'deleted')
    throw new Error(`ProviderHealth ${name} not found`);
}
