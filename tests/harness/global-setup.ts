/**
 * One Temporal dev server and one kube-apiserver (with etcd and our CRDs)
 * for the whole integration run. Set EP_TEST_TEMPORAL_ADDRESS and/or
 * EP_TEST_KUBECONFIG to reuse servers that are already running.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import type { TestProject } from 'vitest/node';
import { Lifecycle } from '../../cli/lifecycle.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { bundleWorkflows } from '../../cli/worker.js';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildTestDist } from './test-dist.js';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    temporalNamespace: string;
    temporalUiUrl: string;
    temporalCli: string;
    kubeconfigPath: string;
    kubeBinDir: string;
    /** The workflow bundle, built once for the run. */
    workflowBundlePath: string;
    /** The compiled CLI's entry point (tests/harness/test-dist.ts): what `egress-proxies` child processes run. */
    cliEntry: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dataDir = mkdtempSync(join(tmpdir(), 'egress-proxies-test-'));
  // The run's servers: a setup that fails half-way stops what it started (vitest then runs no teardown).
  const scope = new Lifecycle(pino({ level: 'warn' }), { name: 'integration run', stopTimeoutMs: 60_000 });
  const started = Date.now();
  return scope.start(async () => {
    const [temporalCli, kubeBinDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);

    const temporal = process.env.EP_TEST_TEMPORAL_ADDRESS
      ? { address: process.env.EP_TEST_TEMPORAL_ADDRESS, namespace: 'default', uiUrl: '' }
      : await startTemporalDevServer({ cli: temporalCli, dataDir: join(dataDir, 'temporal') });
    if ('stop' in temporal) scope.defer('Temporal dev server', () => temporal.stop());

    let kubeconfigPath = process.env.EP_TEST_KUBECONFIG ?? '';
    if (!kubeconfigPath) {
      const kube = await startLocalKubeApiServer({ binDir: kubeBinDir, dataDir: join(dataDir, 'kube') });
      scope.defer('kube-apiserver', () => kube.stop());
      kubeconfigPath = kube.kubeconfigPath;
    }
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfigPath);
    await installCrds(kc);

    const bundle = await bundleWorkflows();
    const workflowBundlePath = join(dataDir, 'workflow-bundle.js');
    writeFileSync(workflowBundlePath, bundle.code);
    project.provide('workflowBundlePath', workflowBundlePath);
    const root = fileURLToPath(new URL('../../', import.meta.url));
    project.provide('cliEntry', await buildTestDist(root, join(root, '.tmp', 'test-dist'), bundle.code));
    project.provide('temporalAddress', temporal.address);
    project.provide('temporalNamespace', temporal.namespace);
    project.provide('temporalUiUrl', temporal.uiUrl ?? '');
    project.provide('temporalCli', temporalCli);
    project.provide('kubeconfigPath', kubeconfigPath);
    project.provide('kubeBinDir', kubeBinDir);
    console.log(
      `[harness] Temporal ${temporal.address}${temporal.uiUrl ? ` (UI ${temporal.uiUrl})` : ''}, kubeconfig ${kubeconfigPath}, ready in ${Date.now() - started} ms`,
    );

    return async () => {
      await scope.close();
      // Kept after a failed setup, for the servers' logs.
      if (!process.env.EP_TEST_KEEP_DATA) rmSync(dataDir, { recursive: true, force: true });
    };
  });
}
