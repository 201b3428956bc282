import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig, type V1Secret } from '@kubernetes/client-node';
import {
  generatedSecretName,
  proxyAuthorization,
  type ProxyCredentials,
} from '../../credentials/proxy-credentials.js';
import { inject } from 'vitest';
import type { Condition, Proxy } from '../../resources/proxy-schema.js';
import { reuseConnections } from '../../kube/connections.js';
import { createProviderHealthClient, type ProviderHealthClient } from '../../kube/provider-healths.js';
import { createProxyClient, type ProxyClient } from '../../kube/proxies.js';
import { getProxy } from './kube-objects.js';
import { getThroughConnect } from './net.js';
import { eventually } from './temporal.js';

export * from './kube-objects.js';

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

/** The typed Proxy client (kube/proxies.ts) on the shared test cluster, or on `kc`: what every test reads and writes Proxies with. */
export function proxyClient(kc: KubeConfig = kubeConfig()): ProxyClient {
  return createProxyClient(kc);
}

/** The typed ProviderHealth client (kube/provider-healths.ts) on the shared test cluster, or on `kc`. */
export function providerHealthClient(kc: KubeConfig = kubeConfig()): ProviderHealthClient {
  return createProviderHealthClient(kc);
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
  api: ProxyClient,
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
export function waitForProxyGone(
  api: ProxyClient,
  namespace: string,
  name: string,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<true> {
  return eventually(
    `${name} gone`,
    async () => ((await api.get(namespace, name)) === undefined ? true : undefined),
    opts,
  );
}

/**
 * A Managed Proxy's generated credentials as a `Proxy-Authorization` value,
 * read from its Secret (which the bridge makes before the instance), and
 * the Secret itself for its marks.
 */
export async function generatedCredentials(
  kc: KubeConfig,
  namespace: string,
  proxyName: string,
): Promise<{ authorization: string; credentials: ProxyCredentials; secret: V1Secret }> {
  const name = generatedSecretName(proxyName);
  const secret = await kc.makeApiClient(CoreV1Api).readNamespacedSecret({ namespace, name });
  const decode = (key: string) => Buffer.from(secret.data?.[key] ?? '', 'base64').toString('utf8');
  const credentials = { username: decode('username'), password: decode('password') };
  return { authorization: proxyAuthorization(credentials), credentials, secret };
}

/**
 * A GET through a Managed Proxy's instance (its status.ip and spec.port)
 * over CONNECT, with the Proxy's generated credentials: the target's body.
 */
export async function throughProxy(
  kc: KubeConfig,
  proxy: Proxy,
  targetPort: number,
  timeoutMs = 5_000,
): Promise<string> {
  const namespace = proxy.metadata.namespace ?? 'default';
  const { authorization } = await generatedCredentials(kc, namespace, proxy.metadata.name);
  const port = proxy.spec.port ?? 3128;
  return getThroughConnect(proxy.status?.ip ?? '', port, targetPort, timeoutMs, '127.0.0.1', authorization);
}
