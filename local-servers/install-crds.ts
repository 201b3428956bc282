import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ApiextensionsV1Api,
  ApisApi,
  CustomObjectsApi,
  KubernetesObjectApi,
  loadAllYaml,
  loadYaml,
  type KubeConfig,
  type KubernetesObject,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';
import {
  API_VERSION,
  FINALIZER,
  GROUP,
  PROXY_PLURAL,
  VERSION,
  type Proxy,
} from '../resources/proxy-schema.js';
import { httpCode } from '../kube/errors.js';

export const CRD_DIR = fileURLToPath(new URL('../infra/k8s/crds/', import.meta.url));
export const ADMISSION_DIR = fileURLToPath(new URL('../infra/k8s/admission/', import.meta.url));

function isNotFound(error: unknown): boolean {
  return (error as { code?: number }).code === 404;
}

/** Polls `probe` every 100 ms until it returns true; throws `${what} after 30 s` past `deadline`. */
async function until(what: string, deadline: number, probe: () => Promise<boolean>): Promise<void> {
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`${what} after 30 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Creates or replaces our CRDs and waits until the apiserver serves them
 * (a new CRD is not usable until it is Established and in discovery).
 */
export async function installCrds(kc: KubeConfig, dir = CRD_DIR): Promise<string[]> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  const names: string[] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()) {
    // loadYaml maps wire names (x-kubernetes-validations, default) onto the
    // client's model fields; a plain parsed object would silently lose them.
    const crd = loadYaml<V1CustomResourceDefinition>(readFileSync(join(dir, file), 'utf8'));
    const name = crd.metadata!.name!;
    names.push(name);
    try {
      const existing = await api.readCustomResourceDefinition({ name });
      crd.metadata!.resourceVersion = existing.metadata?.resourceVersion;
      await api.replaceCustomResourceDefinition({ name, body: crd });
    } catch (error) {
      if (!isNotFound(error)) throw error;
      await api.createCustomResourceDefinition({ body: crd });
    }
  }
  const apis = kc.makeApiClient(ApisApi);
  const deadline = Date.now() + 30_000;
  for (const name of names) {
    await until(`CRD ${name} not Established`, deadline, async () => {
      const crd = await api.readCustomResourceDefinition({ name });
      return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false;
    });
  }
  // Discovery lags Established by a moment.
  await until(`${GROUP} not in discovery`, deadline, async () =>
    (await apis.getAPIVersions()).groups.some((g) => g.name === GROUP),
  );
  return names;
}

/**
 * Creates or replaces the admission policy that puts our finalizer on each
 * new Managed Proxy (infra/k8s/admission), and waits until the apiserver
 * applies it: a dry-run create in `namespace` comes back with the
 * finalizer. For a cluster-wide install only (see the policy's comment).
 * False, with nothing installed, where the apiserver does not serve
 * MutatingAdmissionPolicy (before Kubernetes 1.36, unless enabled): the
 * bridge adds the finalizer there.
 */
export async function installFinalizerPolicy(
  kc: KubeConfig,
  opts: { namespace?: string; dir?: string } = {},
): Promise<boolean> {
  const dir = opts.dir ?? ADMISSION_DIR;
  const objects = KubernetesObjectApi.makeApiClient(kc);
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()) {
    for (const doc of loadAllYaml(readFileSync(join(dir, file), 'utf8')) as KubernetesObject[]) {
      try {
        const existing = await objects.read({ ...doc, metadata: { name: doc.metadata!.name! } });
        await objects.replace({
          ...doc,
          metadata: { ...doc.metadata, resourceVersion: existing.metadata?.resourceVersion },
        });
      } catch (error) {
        if (!isNotFound(error)) throw error;
        try {
          await objects.create(doc);
        } catch (createError) {
          // The kind itself is unknown to this apiserver.
          if (isNotFound(createError)) return false;
          throw createError;
        }
      }
    }
  }
  // The apiserver loads policies from its informer: a moment after the create.
  const custom = kc.makeApiClient(CustomObjectsApi);
  const namespace = opts.namespace ?? 'default';
  const deadline = Date.now() + 30_000;
  await until('the finalizer policy is not applied', deadline, async () => {
    // A CRD just installed may still answer 429 or 503 while its storage starts.
    const probe = (await custom
      .createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        plural: PROXY_PLURAL,
        namespace,
        dryRun: 'All',
        body: {
          apiVersion: API_VERSION,
          kind: 'Proxy',
          metadata: { generateName: 'finalizer-policy-probe-' },
          spec: { mode: 'Managed', provider: 'probe' },
        },
      })
      .catch((error: unknown) => {
        const code = httpCode(error);
        if (code === 429 || code === 503) return undefined;
        throw error;
      })) as Proxy | undefined;
    return probe?.metadata.finalizers?.includes(FINALIZER) ?? false;
  });
  return true;
}
