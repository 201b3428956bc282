/**
 * A one-node Kubernetes cluster of a test file's own: etcd, kube-apiserver,
 * the namespace and garbage-collector controllers, kube-scheduler, a kubelet
 * on Debian's containerd and runc, a CNI bridge (node.ts).
 *
 * Its own apiserver, not the suite's: other files create pods on the
 * suite's apiserver and drive their status by hand, which a kubelet would
 * fight. The kubernetes provider reaches this cluster through its
 * `kubeconfig:` setting, as it reaches a workload cluster in production;
 * the Proxies stay on the suite's apiserver.
 *
 * Nodes live under $TMPDIR/egress-nodes/; the start reaps any there whose
 * owner died (a run killed with SIGKILL), so nothing accumulates.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { Lifecycle } from '../cli/lifecycle.js';
import { startLocalKubeApiServer } from './kube.js';
import { claimNodeEntry, reapOrphanNodes, startLocalNode, type LocalNode } from './node.js';
import { ensureNodeTools } from './tools.js';

export interface NodeCluster {
  kubeconfigPath: string;
  kc: KubeConfig;
  core: CoreV1Api;
  node: LocalNode;
  /** Seconds spent on the tools (kubelet build, image build; near 0 when cached), the apiserver and the node. */
  seconds: { binaries: number; images: number; apiserver: number; node: number };
  stop(): Promise<void>;
}

export const NODES_ROOT = join(tmpdir(), 'egress-nodes');

export async function startNodeCluster(): Promise<NodeCluster> {
  const tools = await ensureNodeTools();
  mkdirSync(NODES_ROOT, { recursive: true });
  await reapOrphanNodes(NODES_ROOT);
  // One directory per cluster: the apiserver's and the node's, reaped together.
  const runDir = mkdtempSync(join(NODES_ROOT, 'run-'));
  claimNodeEntry(runDir);
  const scope = new Lifecycle(pino({ level: 'silent' }), { name: 'node cluster', stopTimeoutMs: 120_000 });
  return scope.start(async () => {
    let t = Date.now();
    const apiserver = await startLocalKubeApiServer({
      binDir: tools.binDir,
      dataDir: join(runDir, 'api'),
      controllerManager: true,
    });
    scope.defer('kube-apiserver', () => apiserver.stop());
    const apiserverSeconds = (Date.now() - t) / 1000;
    t = Date.now();
    const node: LocalNode = await startLocalNode({
      binDir: tools.binDir,
      imagesDir: tools.imagesDir,
      kubeconfigPath: apiserver.kubeconfigPath,
      dataDir: join(runDir, 'node'),
    });
    scope.defer('node', () => node.stop());
    const kc = new KubeConfig();
    kc.loadFromFile(apiserver.kubeconfigPath);
    return {
      kubeconfigPath: apiserver.kubeconfigPath,
      kc,
      core: kc.makeApiClient(CoreV1Api),
      node,
      seconds: { ...tools.seconds, apiserver: apiserverSeconds, node: (Date.now() - t) / 1000 },
      async stop() {
        await scope.close();
        // Kept after a failed start, for its logs (reapOrphanNodes removes it later).
        rmSync(runDir, { recursive: true, force: true });
      },
    };
  });
}
