/**
 * The claim store on Kubernetes: one ConfigMap per claim, in the provider
 * entry's claims namespace, labelled with the GC marks and the entry's name
 * (`kubectl get configmaps -l crawl.example.com/claim-provider=<entry>`
 * shows what is handed out). Create is the apiserver's create: two workers
 * claiming one name get one ConfigMap, and the loser reads the winner's.
 */
import { CoreV1Api, type KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import type {
  ClaimInit,
  ClaimStore,
  ClaimStoreFactory,
  SecretReader,
  StoredClaim,
} from '../providers/shared/claims.js';
import { MARK_INSTALLATION, MARK_MANAGED, MARK_MANAGED_VALUE, MARK_UID } from '../providers/types.js';
import { untilAborted } from '../providers/shared/bounded-call.js';
import { readSecretView } from './cloud-init.js';
import { httpCode } from './errors.js';

export const LABEL_CLAIM_PROVIDER = 'crawl.example.com/claim-provider';
export const LABEL_CLAIM_INSTANCE = 'crawl.example.com/claim-instance';
const CREATED_AT_KEY = 'createdAtMs';

function claimOf(cm: V1ConfigMap): StoredClaim | undefined {
  const meta = cm.metadata;
  if (!meta?.name) return undefined;
  const data = { ...(cm.data ?? {}) };
  const createdAtMs = Number(data[CREATED_AT_KEY]);
  delete data[CREATED_AT_KEY];
  const fallback = meta.creationTimestamp ? new Date(meta.creationTimestamp).getTime() : 0;
  return {
    name: meta.name,
    instanceName: meta.labels?.[LABEL_CLAIM_INSTANCE] ?? '',
    uid: meta.annotations?.[MARK_UID] ?? '',
    installation: meta.annotations?.[MARK_INSTALLATION] ?? '',
    createdAtMs: Number.isFinite(createdAtMs) && createdAtMs > 0 ? createdAtMs : fallback,
    data,
  };
}

export function createKubeClaimStore(kc: KubeConfig, provider: string, namespace: string): ClaimStore {
  let api: CoreV1Api | undefined;
  const core = () => (api ??= kc.makeApiClient(CoreV1Api));
  const labelSelector = `${MARK_MANAGED}=${MARK_MANAGED_VALUE},${LABEL_CLAIM_PROVIDER}=${provider}`;
  const read = async (name: string): Promise<StoredClaim | undefined> => {
    try {
      return claimOf(await core().readNamespacedConfigMap({ namespace, name }));
    } catch (error) {
      if (httpCode(error) === 404) return undefined;
      throw error;
    }
  };
  return {
    create: (name, init: ClaimInit, signal) =>
      untilAborted(signal, async () => {
        const body: V1ConfigMap = {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: {
            name,
            namespace,
            labels: {
              [MARK_MANAGED]: MARK_MANAGED_VALUE,
              [LABEL_CLAIM_PROVIDER]: provider,
              [LABEL_CLAIM_INSTANCE]: init.instanceName,
              'app.kubernetes.io/managed-by': 'egress-proxies',
            },
            annotations: { [MARK_UID]: init.uid, [MARK_INSTALLATION]: init.installation },
          },
          data: { ...init.data, [CREATED_AT_KEY]: String(Date.now()) },
        };
        try {
          const made = claimOf(await core().createNamespacedConfigMap({ namespace, body }));
          if (!made) throw new Error(`claim ${namespace}/${name}: the apiserver answered no name`);
          return { created: made };
        } catch (error) {
          if (httpCode(error) !== 409) throw error;
          const existing = await read(name);
          // Deleted between the refusal and the read: the caller's retry makes it.
          if (!existing) throw error;
          return { existing };
        }
      }),
    get: (name, signal) => untilAborted(signal, () => read(name)),
    delete: (name, signal) =>
      untilAborted(signal, async () => {
        try {
          await core().deleteNamespacedConfigMap({ namespace, name });
        } catch (error) {
          if (httpCode(error) !== 404) throw error;
        }
      }),
    list: (signal) =>
      untilAborted(signal, async () => {
        const out: StoredClaim[] = [];
        let _continue: string | undefined;
        do {
          const page = await core().listNamespacedConfigMap({
            namespace,
            labelSelector,
            limit: 500,
            ...(_continue ? { _continue } : {}),
          });
          for (const cm of page.items) {
            const claim = claimOf(cm);
            if (claim) out.push(claim);
          }
          _continue = page.metadata?._continue || undefined;
        } while (_continue);
        return out;
      }),
  };
}

/** The claim stores of a worker's providers, on its apiserver. */
export function kubeClaimStores(kc: KubeConfig): ClaimStoreFactory {
  return (provider, namespace) => createKubeClaimStore(kc, provider, namespace);
}

/** Reads a Secret's keys for a provider (a vendor account's), decoded; undefined when it does not exist. */
export function kubeSecretReader(kc: KubeConfig): SecretReader {
  return (namespace, name, signal) =>
    untilAborted(signal, async () => {
      const view = await readSecretView(kc, namespace, name);
      if (!view) return undefined;
      return Object.fromEntries(
        Object.entries(view.data).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]),
      );
    });
}
