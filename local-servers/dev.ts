/**
 * `egress-proxies dev`: the whole control plane on one machine with no
 * cloud account. Starts (or reuses) a Temporal dev server and, unless a
 * kubeconfig is given, a local kube-apiserver with etcd and a
 * kube-controller-manager; installs the CRDs; runs worker, bridge, lease
 * API and gateway in this process with the `local` provider, and an IP-echo target
 * that shows which proxy carried a request. State persists across
 * restarts in one directory per instance (`--state-dir`, default
 * <cache>/dev): Temporal's database, etcd, the kubeconfigs, the providers'
 * state, the pids of the servers. The servers die with this process however
 * it ends (process.ts), and a second `dev` on a held directory refuses to
 * start (instance.ts).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import type { RunDev } from '../cli/dev.js';
import { loadKubeConfig } from '../cli/kube.js';
import { Lifecycle } from '../cli/lifecycle.js';
import { startApi, startBridge, startGateway, startWorker, type Running } from '../cli/processes.js';
import { packageVersion } from '../cli/version.js';
import { describeEgressPolicy } from '../gateway/config.js';
import { startTracing, type TracingConfig } from '../tracing/index.js';
import { installCrds, installFinalizerPolicy } from './install-crds.js';
import { acquireStartLock, lockInstance, reapServers } from './instance.js';
import { startLocalKubeApiServer } from './kube.js';
import { preferredOrFreePort } from './ports.js';
import { startTemporalDevServer } from './temporal.js';
import { ensureJaeger, ensureKubeBinaries, ensureNodeTools, ensureTemporalCli } from './tools.js';
import { startLocalNode, type LocalNode } from './node.js';
import { startJaeger } from './jaeger.js';
import { startIpEcho } from './ip-echo.js';

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
/** The IP-echo target's preferred port (next to the lease API's 8090); a port in use is replaced. */
const IP_ECHO_PORT = 8091;
/** dev --node's pod network when free (infra/samples/proxy-kubernetes-node.yaml probes its gateway). */
const DEV_NODE_POD_CIDR = '10.244.0.0/24';
/** The bound on each stop: above a server's own (SIGKILL after 10 s per process) and the worker's shutdown grace. */
const STOP_TIMEOUT_MS = 60_000;
/** The node stops three servers (15 s each before SIGKILL), then reaps its pods, mounts and bridge. */
const NODE_STOP_TIMEOUT_MS = 120_000;

/**
 * Runs what `planCommand('dev', ...)` planned: every part gets its own
 * config from the plan, with only the servers dev started (Temporal, the
 * apiserver) and, unless given, the lease API's port filled in.
 */
export const runDev: RunDev = async (plan, logger, env) => {
  const { dev, worker: workerConfig, bridge: bridgeConfig, api: apiConfig, gateway: gatewayConfig } = plan;
  if (!dev || !workerConfig || !bridgeConfig || !apiConfig || !gatewayConfig)
    throw new Error('not a dev plan');
  const root = dev.root;
  mkdirSync(root, { recursive: true });
  // Everything dev brings up, stopped newest first when it ends however it ends.
  const scope = new Lifecycle(logger, { name: 'dev', stopTimeoutMs: STOP_TIMEOUT_MS });
  let onSignal: (() => void) | undefined;
  // Removed last: a second Ctrl-C while the rest stops must find a listener, or it would kill us mid-stop.
  scope.defer('signal handlers', () => {
    for (const signal of STOP_SIGNALS) if (onSignal) process.off(signal, onSignal);
  });
  try {
    const lock = lockInstance(root);
    scope.defer('instance lock', () => lock.release());
    const pidDir = join(root, 'pids');
    // Holding the lock, so their parent is gone: servers a killed dev left behind.
    for (const { name, pid } of await reapServers(pidDir))
      logger.warn({ server: name, pid }, 'killed a server left by an earlier dev that did not stop');

    let temporalAddress = dev.temporalAddress;
    let uiUrl: string | undefined;
    let kubeconfigPath = dev.kubeconfig;
    let kubectlHint = 'kubectl';

    if (dev.node && process.getuid?.() !== 0) {
      throw new Error(
        '--node needs root: containerd, runc and the kubelet create cgroups, network namespaces, mounts and a bridge',
      );
    }
    const [temporalCli, kubeBinDir, jaegerBin, nodeTools] = await Promise.all([
      temporalAddress ? Promise.resolve('') : ensureTemporalCli(env),
      kubeconfigPath ? Promise.resolve('') : ensureKubeBinaries(env),
      dev.tracing ? ensureJaeger(env) : Promise.resolve(''),
      dev.node ? ensureNodeTools(env) : Promise.resolve(undefined),
    ]);
    const starting = await acquireStartLock(
      join(tmpdir(), `egress-proxies-dev-start-${process.getuid?.() ?? 0}.lock`),
      {
        onWait: (pid) => logger.info({ pid }, 'waiting for another dev to finish starting (ports)'),
      },
    );
    const releaseStartLock = scope.defer('start lock', () => starting.release());
    if (!temporalAddress) {
      const temporal = await startTemporalDevServer({
        cli: temporalCli,
        dataDir: join(root, 'temporal'),
        port: 7233,
        uiPort: 8233,
        persist: true,
        pidDir,
      });
      scope.defer('Temporal dev server', () => temporal.stop());
      temporalAddress = temporal.address;
      uiUrl = temporal.uiUrl;
    }
    if (!kubeconfigPath) {
      const kube = await startLocalKubeApiServer({
        binDir: kubeBinDir,
        dataDir: join(root, 'kube'),
        port: 6443,
        persist: true,
        controllerManager: true,
        pidDir,
      });
      scope.defer('kube-apiserver', () => kube.stop());
      kubeconfigPath = kube.kubeconfigPath;
      kubectlHint = join(kubeBinDir, 'kubectl');
    }
    const kc = loadKubeConfig(kubeconfigPath);
    await installCrds(kc);
    // dev's own apiserver, every namespace watched: as a cluster-wide install
    // has it, the apiserver puts the finalizer on each new Managed Proxy.
    if (!dev.kubeconfig && !bridgeConfig.watchNamespaces) await installFinalizerPolicy(kc);

    // --node: a kubelet on this apiserver. Its name is kept in the instance
    // directory, so after a restart the same Node comes back and its kubelet
    // restarts the pods bound to it, as a rebooted node does.
    let node: LocalNode | undefined;
    if (nodeTools) {
      const idFile = join(root, 'node-id');
      const id = existsSync(idFile) ? readFileSync(idFile, 'utf8').trim() : randomBytes(3).toString('hex');
      writeFileSync(idFile, id);
      const localNode = await startLocalNode({
        binDir: nodeTools.binDir,
        imagesDir: nodeTools.imagesDir,
        kubeconfigPath,
        dataDir: join(root, 'node'),
        pidDir,
        id,
        // The sample's probe URL names this network's gateway; another is taken when it is in use here.
        preferredPodCidr: DEV_NODE_POD_CIDR,
      });
      node = localNode;
      scope.defer('node', () => localNode.stop(), { timeoutMs: NODE_STOP_TIMEOUT_MS });
      logger.info(
        { node: node.name, podCidr: node.podCidr, seconds: Number(node.startSeconds.toFixed(1)) },
        'node Ready',
      );
    }

    // --tracing: a local Jaeger receives this process's spans (it overrides an endpoint from OTEL_*).
    let tracingConfig: TracingConfig | undefined = plan.tracing;
    let jaegerUi: string | undefined;
    if (dev.tracing) {
      const jaeger = await startJaeger({
        bin: jaegerBin,
        dataDir: join(root, 'jaeger'),
        otlpPort: 4318,
        queryPort: 16686,
        pidDir,
      });
      scope.defer('Jaeger', () => jaeger.stop());
      jaegerUi = jaeger.queryUrl;
      tracingConfig = {
        url: `${jaeger.otlpEndpoint}/v1/traces`,
        protocol: 'http/protobuf',
        serviceName: plan.tracing?.serviceName ?? 'egress-proxies',
      };
    }
    const tracing = await startTracing(tracingConfig, packageVersion());
    // Deferred before the parts: stopped after them, so their last spans are sent.
    scope.defer('tracing', () => tracing.shutdown());

    // Where the servers dev started are; everything else is as planned.
    const servers = {
      temporalAddress,
      kubeconfig: kubeconfigPath,
      // Our own dev server speaks plaintext: TLS and key settings are for a given one.
      temporalConnection: dev.temporalAddress ? workerConfig.temporalConnection : undefined,
    };
    const apiOptions = dev.apiAddrGiven
      ? apiConfig.options
      : {
          ...apiConfig.options,
          port: await preferredOrFreePort(apiConfig.options.port, apiConfig.options.host),
        };
    // The parts, for the banner; their stops are the scope's.
    const parts: Running[] = [];
    const started = (part: Running) => {
      scope.defer(part.name, () => part.stop());
      parts.push(part);
    };
    // One registry for the whole process: the lease API's /metrics serves
    // the worker's provider-check gauges too.
    const metrics = new Registry();
    const worker = await startWorker({ ...workerConfig, ...servers }, kc, logger, {
      dev: true,
      ...(node
        ? { devNode: { kubeconfig: kubeconfigPath, image: node.images.squid, gateway: node.gateway } }
        : {}),
      metrics,
      tracing,
    });
    started(worker);
    const bridge = await startBridge({ ...bridgeConfig, ...servers }, kc, logger, { tracing });
    started(bridge);
    // One registry for the whole process: with --metrics-addr the worker serves it there, so the api does not.
    const api = await startApi(
      // The dashboard's workflow links go to this dev server's Web UI unless told otherwise.
      { ...apiOptions, ...(apiOptions.temporalWebUrl || !uiUrl ? {} : { temporalWebUrl: uiUrl }) },
      { ...apiConfig, ...servers, metricsAddr: undefined },
      kc,
      logger,
      metrics,
      { metricsServedElsewhere: Boolean(workerConfig.metricsAddr), tracing },
    );
    started(api);
    // The gateway leases from the lease API's own catalog and store: one pool for both.
    // A taken default port (HTTP 8092, SOCKS5 8093) is replaced by a free one; a given address is used as is.
    const { socks } = gatewayConfig.options;
    const gatewayOptions = {
      ...gatewayConfig.options,
      ...(dev.gatewayAddrGiven
        ? {}
        : { port: await preferredOrFreePort(gatewayConfig.options.port, gatewayConfig.options.host) }),
      ...(socks && !dev.gatewaySocksAddrGiven
        ? { socks: { ...socks, port: await preferredOrFreePort(socks.port, socks.host) } }
        : {}),
    };
    const gateway = await startGateway(gatewayOptions, gatewayConfig, undefined, logger, metrics, {
      tracing,
      shared: {
        catalog: api.catalog,
        leaseStore: api.leaseStore,
        tenants: api.tenants,
        demand: api.demand,
        credentials: api.credentials,
        traffic: api.traffic,
        cost: api.cost,
      },
    });
    started(gateway);
    // A stand-in for an IP-echo site (api.ipify.org): fetched through a
    // `local` proxy it answers with that proxy's own address, its egress IP.
    const echo = await startIpEcho({ host: '127.0.0.1', port: await preferredOrFreePort(IP_ECHO_PORT) });
    scope.defer('IP echo', () => echo.close());
    // With a node, the echo answers on its gateway too: the one host address a pod reaches (the sample's probe URL).
    let nodeEcho: Awaited<ReturnType<typeof startIpEcho>> | undefined;
    if (node) {
      const onNode = await startIpEcho({ host: node.gateway, port: IP_ECHO_PORT });
      nodeEcho = onNode;
      scope.defer('IP echo for pods', () => onNode.close());
    }
    await releaseStartLock();

    const banner = [
      '',
      'egress-proxies dev is running.',
      `  Temporal     ${temporalAddress}${uiUrl ? `   Web UI ${uiUrl}` : ''}`,
      `  Kubernetes   export KUBECONFIG=${kubeconfigPath}`,
      `               ${kubectlHint} apply -f infra/samples/proxy-local.yaml && ${kubectlHint} get px -w`,
      `               ${kubectlHint} apply -f infra/samples/proxypool-local.yaml && ${kubectlHint} get proxypools -w`,
      ...(node
        ? [
            `  Node         ${node.name} Ready, pods on ${node.podCidr} (bridge ${node.bridge}); IP echo for pods ${nodeEcho?.url ?? ''}`,
            `               provider \`kubernetes\`: ${kubectlHint} apply -f infra/samples/proxy-kubernetes-node.yaml${node.gateway === '10.244.0.1' ? '' : ` (edit its probeURL to ${nodeEcho?.url ?? ''})`}`,
          ]
        : ['  Node         none: `kubernetes` Proxies stay Pending (dev --node runs a real one)']),
      ...parts.map((p) => `  ${p.name.padEnd(12)} ${p.describe()}`),
      `  IP echo      ${echo.url} answers {"ip":"<caller>"}; through a local proxy, its egress IP`,
      `  Egress       ${describeEgressPolicy(gatewayOptions, true)}`,
      ...(jaegerUi
        ? [`  Tracing      Jaeger UI ${jaegerUi}`]
        : tracingConfig
          ? [`  Tracing      ${tracing.describe()}`]
          : []),
      `  State        ${root}`,
      'Ctrl-C stops everything (state is kept).',
      '',
    ];
    process.stdout.write(banner.join('\n') + '\n');

    await new Promise<void>((resolve) => {
      onSignal = () => resolve();
      // `on`, not `once`: under `make dev` the same Ctrl-C arrives twice (the
      // terminal's, and the one npm/tsx relay); a second one with no listener
      // would kill us mid-stop. SIGHUP: a closed terminal.
      for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
      void worker.done.then(
        () => resolve(),
        (error: unknown) => {
          logger.error({ err: error instanceof Error ? error.message : String(error) }, 'worker stopped');
          resolve();
        },
      );
    });
  } finally {
    await scope.close();
  }
};
