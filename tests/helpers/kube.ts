import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { inject } from 'vitest';
import {
  GROUP,
  VERSION,
  PROXY_PLURAL,
  type Condition,
  type Proxy,
  type ProxySpecInput,
} from '../../resources/proxy-schema.js';
import { reuseConnections } from '../../kube/connections.js';
import { eventually } from './temporal.js';

const run = promisify(execFile);

/**
 * The shared test cluster's kubeconfig, or the cluster's at `path` (a test
 * with an apiserver of its own), with keep-alive connections as the CLI's
 * (cli/kube.ts).
 */
export function kubeConfig(path: string = inject('kubeconfigPath')): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return reuseConnections(kc);
}

export function customObjects(kc = kubeConfig()): CustomObjectsApi {
  return kc.makeApiClient(CustomObjectsApi);
}

/** A fresh namespace per test file keeps tests independent on one shared apiserver. */
export async function createNamespace(kc: KubeConfig, prefix: string): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name } } });
  return name;
}

export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

export async function createProxy(
  api: CustomObjectsApi,
  namespace: string,
  name: string,
  spec: ProxySpecInput,
  metadata: Record<string, unknown> = {},
): Promise<Proxy> {
  return (await api.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PROXY_PLURAL,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'Proxy',
      metadata: { name, namespace, ...metadata },
      spec,
    },
  })) as Proxy;
}

export async function getProxy(api: CustomObjectsApi, namespace: string, name: string): Promise<Proxy> {
  return (await api.getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PROXY_PLURAL,
    name,
  })) as Proxy;
}

/** Runs the kubectl built with the apiserver against the test cluster. */
export async function kubectl(
  args: string[],
  kubeconfig: string = inject('kubeconfigPath'),
): Promise<string> {
  const { stdout } = await run(join(inject('kubeBinDir'), 'kubectl'), ['--kubeconfig', kubeconfig, ...args]);
  return stdout;
}

/** The apiserver's message for a rejected request (client-node puts the Status JSON in body). */
export function apiErrorMessage(error: unknown): string {
  const body = (error as { body?: unknown }).body;
  if (typeof body === 'string') {
    try {
      return (JSON.parse(body) as { message?: string }).message ?? body;
    } catch {
      return body;
    }
  }
  return error instanceof Error ? error.message : String(error);
}

export function proxyCondition(p: Proxy, type: string): Condition | undefined {
  return p.status?.conditions?.find((c) => c.type === type);
}

export function isProvisioned(p: Proxy): boolean {
  return proxyCondition(p, 'Provisioned')?.status === 'True';
}

/** Polls the Proxy until `test` holds; resolves with it. */
export function waitForProxy(
  api: CustomObjectsApi,
  namespace: string,
  name: string,
  what: string,
  test: (p: Proxy) => boolean,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<Proxy> {
  return eventually(
    `${name}: ${what}`,
    async () => {
      const p = await getProxy(api, namespace, name);
      return test(p) ? p : undefined;
    },
    { timeoutMs: opts.timeoutMs ?? 30_000, intervalMs: opts.intervalMs ?? 100 },
  );
}

/** Polls until the Proxy object is gone (its finalizer removed). */
export function waitForProxyGone(api: CustomObjectsApi, namespace: string, name: string): Promise<true> {
  return eventually(`${name} gone`, async () =>
    getProxy(api, namespace, name).then(
      () => undefined,
      (e: { code?: number }) => (e.code === 404 ? true : undefined),
    ),
  );
}

export function deleteProxy(api: CustomObjectsApi, namespace: string, name: string): Promise<unknown> {
  return api.deleteNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PROXY_PLURAL,
    name,
  });
}
