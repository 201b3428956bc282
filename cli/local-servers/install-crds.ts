import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ApiextensionsV1Api,
  ApisApi,
  loadYaml,
  type KubeConfig,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';

export const CRD_DIR = fileURLToPath(new URL('../../infra/k8s/crds/', import.meta.url));

function isNotFound(error: unknown): boolean {
  return (error as { code?: number }).code === 404;
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
    for (;;) {
      const crd = await api.readCustomResourceDefinition({ name });
      const established = crd.status?.conditions?.some(
        (c) => c.type === 'Established' && c.status === 'True',
      );
      if (established) break;
      if (Date.now() > deadline) throw new Error(`CRD ${name} not Established after 30 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  // Discovery lags Established by a moment.
  for (;;) {
    const groups = await apis.getAPIVersions();
    if (groups.groups.some((g) => g.name === 'crawl.example.com')) break;
    if (Date.now() > deadline) throw new Error('crawl.example.com not in discovery after 30 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  return names;
}
