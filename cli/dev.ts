/**
 * `egress-proxies dev`: the whole control plane on one machine with no
 * cloud account. Starts (or reuses) a Temporal dev server and, unless a
 * kubeconfig is given, a local kube-apiserver with etcd; installs the CRDs;
 * runs worker, bridge and lease API in this process with the `local`
 * provider. State persists under the cache directory across restarts.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { readApiConfig } from '../api/index.js';
import type { CommonConfig } from './config.js';
import { loadKubeConfig } from './kube.js';
import { installCrds } from './local-servers/install-crds.js';
import { startLocalKubeApiServer } from './local-servers/kube.js';
import { startTemporalDevServer } from './local-servers/temporal.js';
import { cacheRoot, ensureKubeBinaries, ensureTemporalCli } from './local-servers/tools.js';
import { startApi, startBridge, startWorker, type Running } from './processes.js';

export interface DevFlags {
  /** Use this cluster instead of starting a local apiserver. */
  kubeconfig?: string;
  /** Use this Temporal server instead of starting a dev server. */
  temporalAddress?: string;
  apiAddr: string;
}

export async function runDev(
  config: CommonConfig,
  flags: DevFlags,
  logger: Logger,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  const root = join(cacheRoot(env), 'dev');
  mkdirSync(root, { recursive: true });
  const stops: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const stop of stops.reverse())
      await stop().catch((e: unknown) => logger.warn({ err: String(e) }, 'stop failed'));
  };

  try {
    let temporalAddress = flags.temporalAddress;
    let uiUrl: string | undefined;
    let kubeconfigPath = flags.kubeconfig;
    let kubectlHint = 'kubectl';

    const [temporalCli, kubeBinDir] = await Promise.all([
      temporalAddress ? Promise.resolve('') : ensureTemporalCli(env),
      kubeconfigPath ? Promise.resolve('') : ensureKubeBinaries(env),
    ]);
    if (!temporalAddress) {
      const temporal = await startTemporalDevServer({
        cli: temporalCli,
        dataDir: join(root, 'temporal'),
        port: 7233,
        uiPort: 8233,
        persist: true,
      });
      stops.push(() => temporal.stop());
      temporalAddress = temporal.address;
      uiUrl = temporal.uiUrl;
    }
    if (!kubeconfigPath) {
      const kube = await startLocalKubeApiServer({
        binDir: kubeBinDir,
        dataDir: join(root, 'kube'),
        port: 6443,
        persist: true,
      });
      stops.push(() => kube.stop());
      kubeconfigPath = kube.kubeconfigPath;
      kubectlHint = join(kubeBinDir, 'kubectl');
    }
    const kc = loadKubeConfig(kubeconfigPath);
    await installCrds(kc);

    const devConfig: CommonConfig = {
      ...config,
      temporalAddress,
      // Our own dev server speaks plaintext: TLS and key settings are for a given one.
      temporalConnection: flags.temporalAddress ? config.temporalConnection : undefined,
      kubeconfig: kubeconfigPath,
      stateDir: join(root, 'state'),
    };
    const parts: Running[] = [];
    // One registry for the whole process: the lease API's /metrics serves
    // the worker's provider-check gauges too.
    const metrics = new Registry();
    const worker = await startWorker(devConfig, kc, logger, { dev: true, metrics });
    stops.push(() => worker.stop());
    parts.push(worker);
    const bridge = await startBridge(devConfig, kc, logger);
    stops.push(() => bridge.stop());
    parts.push(bridge);
    const api = await startApi(
      readApiConfig(env, { discoveryAddr: flags.apiAddr }),
      devConfig,
      kc,
      logger,
      metrics,
    );
    stops.push(() => api.stop());
    parts.push(api);

    const banner = [
      '',
      'egress-proxies dev is running.',
      `  Temporal     ${temporalAddress}${uiUrl ? `   Web UI ${uiUrl}` : ''}`,
      `  Kubernetes   export KUBECONFIG=${kubeconfigPath}`,
      `               ${kubectlHint} apply -f infra/samples/proxy-local.yaml && ${kubectlHint} get px -w`,
      ...parts.map((p) => `  ${p.name.padEnd(12)} ${p.describe()}`),
      `  State        ${root}`,
      'Ctrl-C stops everything (state is kept).',
      '',
    ];
    process.stdout.write(banner.join('\n') + '\n');

    await new Promise<void>((resolve) => {
      const onSignal = () => resolve();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      void worker.done.then(
        () => resolve(),
        (error: unknown) => {
          logger.error({ err: error instanceof Error ? error.message : String(error) }, 'worker stopped');
          resolve();
        },
      );
    });
  } finally {
    await stopAll();
  }
}
