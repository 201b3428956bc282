/** The conformance hooks of a provider that keeps claims (vendor, list): ConfigMaps written by hand, a relay to stall. */
import { randomUUID } from 'node:crypto';
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { LABEL_CLAIM_INSTANCE, LABEL_CLAIM_PROVIDER } from '../../kube/claims.js';
import { base32Lower } from '../../providers/names.js';
import { MARK_MANAGED, MARK_UID } from '../../providers/types.js';
import type { ConformanceHooks } from '../conformance/provider-conformance.js';
import type { TcpRelay } from './net.js';

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

export function claimHooks(
  kc: KubeConfig,
  namespace: string,
  provider: string,
  relay: TcpRelay,
): ConformanceHooks {
  const core = kc.makeApiClient(CoreV1Api);
  /** A claim ConfigMap put in place by hand (another writer, or an older one). */
  const extraClaim = async (labels: Record<string, string>, annotations: Record<string, string>) => {
    const id = `${provider}-${base32Lower(Buffer.from(randomUUID())).slice(0, 16)}`;
    await core.createNamespacedConfigMap({
      namespace,
      body: {
        metadata: { name: id, labels, annotations },
        data: { entry: 'none', session: 'x', lifetimeSeconds: '600' },
      },
    });
    return id;
  };
  return {
    createUnmarked: (instance) =>
      extraClaim(
        { [LABEL_CLAIM_PROVIDER]: provider, [LABEL_CLAIM_INSTANCE]: instance },
        { [MARK_UID]: randomUUID() },
      ),
    createMarkedWithEmptyUid: (instance) =>
      extraClaim(
        { [MARK_MANAGED]: 'true', [LABEL_CLAIM_PROVIDER]: provider, [LABEL_CLAIM_INSTANCE]: instance },
        { [MARK_UID]: '' },
      ),
    rewriteMarks: async (id, marks) => {
      await core.patchNamespacedConfigMap(
        {
          namespace,
          name: id,
          body: {
            metadata: { annotations: { [MARK_UID]: marks.uid } },
            data: { createdAtMs: String(marks.createdAt.getTime()) },
          },
        },
        mergePatch,
      );
    },
    stall: () => {
      const release = relay.stall();
      return Promise.resolve(() => Promise.resolve(release()));
    },
  };
}
