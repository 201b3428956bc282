/**
 * What a command runs, and each part's configuration, from parsed flags and
 * the environment: a pure function of its inputs (the token file is the one
 * read), so a test can parse any command line and look at what every part
 * would get without starting anything.
 *
 * Each part gets only the settings it reads (its config type is a Pick of
 * the validated common config), so a flag that reaches no part of a command
 * shows up in tests/unit/cli-options.test.ts as a flag that changes nothing.
 */
import { join, resolve } from 'node:path';
import { readApiConfig, requireAuthOffLoopback, type ApiFlags, type ApiOptions } from '../api/index.js';
import { ConfigError, readCommonConfig, type CommonConfig, type CommonFlags } from './config.js';
import {
  DEV_GATEWAY_DEFAULTS,
  readGatewayConfig,
  type GatewayFlags,
  type GatewayOptions,
} from '../gateway/config.js';
import { cacheRoot } from './cache-root.js';
import { readTracingConfig, type TracingConfig } from '../tracing/config.js';

export const COMMANDS = ['dev', 'worker', 'bridge', 'api', 'gateway'] as const;
export type CommandName = (typeof COMMANDS)[number];

/** The Temporal worker: Proxy workflows and their timing, provider activities, the GC, provider-check and drift-sweep schedules. */
export type WorkerConfig = Pick<
  CommonConfig,
  | 'temporalAddress'
  | 'temporalNamespace'
  | 'temporalConnection'
  | 'taskQueue'
  | 'kubeconfig'
  | 'providersConfig'
  | 'stateDir'
  | 'installation'
  | 'gc'
  | 'providerCheckIntervalMs'
  | 'metricsAddr'
  | 'maxCachedWorkflows'
  | 'timing'
  | 'driftSweepMs'
  | 'watchNamespaces'
>;
const WORKER_KEYS = [
  'temporalAddress',
  'temporalNamespace',
  'temporalConnection',
  'taskQueue',
  'kubeconfig',
  'providersConfig',
  'stateDir',
  'installation',
  'gc',
  'providerCheckIntervalMs',
  'metricsAddr',
  'maxCachedWorkflows',
  'timing',
  'driftSweepMs',
  'watchNamespaces',
] as const satisfies ReadonlyArray<keyof WorkerConfig>;

/** The Kubernetes bridge: Proxy events to workflow starts and signals (timing is the worker's). */
export type BridgeConfig = Pick<
  CommonConfig,
  | 'temporalAddress'
  | 'temporalNamespace'
  | 'temporalConnection'
  | 'taskQueue'
  | 'kubeconfig'
  | 'reconcilePeriodMs'
  | 'metricsAddr'
  | 'watchNamespaces'
>;
const BRIDGE_KEYS = [
  'temporalAddress',
  'temporalNamespace',
  'temporalConnection',
  'metricsAddr',
  'kubeconfig',
  'taskQueue',
  'reconcilePeriodMs',
  'watchNamespaces',
] as const satisfies ReadonlyArray<keyof BridgeConfig>;

/** The lease API and the health prober (which signals workflows by ID: no task queue). */
export type ApiPartConfig = Pick<
  CommonConfig,
  | 'temporalAddress'
  | 'temporalNamespace'
  | 'temporalConnection'
  | 'kubeconfig'
  | 'metricsAddr'
  | 'watchNamespaces'
  // The entries' `health:` blocks (the prober's per-entry probe settings); optional for the api.
  | 'providersConfig'
> & {
  options: ApiOptions;
};

/**
 * The gateway: the crawlers' proxy endpoint. It reads Proxies (its own
 * informer) and leases through the lease store; it never talks to Temporal.
 */
export type GatewayPartConfig = Pick<
  CommonConfig,
  // The entries' prices, for what relayed bytes cost; optional for the gateway.
  'kubeconfig' | 'metricsAddr' | 'watchNamespaces' | 'providersConfig'
> & {
  options: GatewayOptions;
};

/** `dev` itself: the servers it starts unless told where existing ones are, and where it keeps state. */
export interface DevServersConfig {
  /** Use this Temporal server instead of starting a dev server. */
  temporalAddress?: string;
  /** Use this cluster instead of starting a local apiserver. */
  kubeconfig?: string;
  /**
   * The instance's directory (`--state-dir`, default <cache>/dev): Temporal's
   * database, etcd, the kubeconfigs, the servers' pids and, under `state/`,
   * the providers' state. Two instances on two directories run side by side.
   */
  root: string;
  /** `--discovery-addr` was given: use it as is; otherwise 127.0.0.1:8090, or a free port when that is taken. */
  apiAddrGiven: boolean;
  /** `--gateway-addr` was given: use it as is; otherwise 127.0.0.1:8092, or a free port when that is taken. */
  gatewayAddrGiven: boolean;
  /** `--gateway-socks-addr` was given: use it as is; otherwise 127.0.0.1:8093, or a free port when that is taken. */
  gatewaySocksAddrGiven: boolean;
  /** `--tracing`: start a local Jaeger and send this process's spans to it (overrides an OTLP endpoint in the environment). */
  tracing?: boolean;
  /** `--node`: run a kubelet node on the local apiserver, and a `kubernetes` provider whose pods run on it. */
  node?: boolean;
}

export interface CommandPlan {
  logger: { level: CommonConfig['logLevel'] };
  worker?: WorkerConfig;
  bridge?: BridgeConfig;
  api?: ApiPartConfig;
  gateway?: GatewayPartConfig;
  dev?: DevServersConfig;
  /** OpenTelemetry tracing from the OTEL_* environment; absent when no OTLP endpoint is set (off). */
  tracing?: TracingConfig;
}

export type CommandFlags = CommonFlags & ApiFlags & GatewayFlags & { tracing?: boolean; node?: boolean };

/** The service name of each command's spans when OTEL_SERVICE_NAME is unset. */
const SERVICE_NAMES: Record<CommandName, string> = {
  dev: 'egress-proxies',
  worker: 'egress-proxies-worker',
  bridge: 'egress-proxies-bridge',
  api: 'egress-proxies-api',
  gateway: 'egress-proxies-gateway',
};

/** `dev` listens on loopback only; `api` on every interface, as the seed's default `:8090`. */
export const DEV_DISCOVERY_ADDR = '127.0.0.1:8090';

function pick<T extends object, K extends keyof T>(from: T, keys: readonly K[]): Pick<T, K> {
  const out = {} as Pick<T, K>;
  for (const key of keys) if (from[key] !== undefined) out[key] = from[key];
  return out;
}

/** Throws ConfigError / ApiConfigError naming the bad flag. */
export function planCommand(
  command: CommandName,
  flags: CommandFlags,
  env: Readonly<Record<string, string | undefined>>,
): CommandPlan {
  // Under dev, --state-dir names the whole instance; its providers keep their state in <dir>/state.
  const devRoot = resolve(flags.stateDir ?? join(cacheRoot(env), 'dev'));
  const common = readCommonConfig(env, {
    ...flags,
    ...(command === 'dev' ? { stateDir: join(devRoot, 'state') } : {}),
  });
  const plan: CommandPlan = { logger: { level: common.logLevel } };
  const tracing = readTracingConfig(env, SERVICE_NAMES[command]);
  if (tracing) plan.tracing = tracing;
  if (command === 'dev' || command === 'worker') plan.worker = pick(common, WORKER_KEYS);
  if (command === 'dev' || command === 'bridge') plan.bridge = pick(common, BRIDGE_KEYS);
  if (command === 'dev' || command === 'api') {
    plan.api = {
      ...pick(common, [
        'temporalAddress',
        'temporalNamespace',
        'temporalConnection',
        'kubeconfig',
        'metricsAddr',
        'watchNamespaces',
        'providersConfig',
      ] as const),
      options: readApiConfig(
        env,
        command === 'dev' ? { ...flags, discoveryAddr: flags.discoveryAddr ?? DEV_DISCOVERY_ADDR } : flags,
      ),
    };
  }
  if (command === 'dev' || command === 'gateway') {
    plan.gateway = {
      ...pick(common, ['kubeconfig', 'metricsAddr', 'watchNamespaces', 'providersConfig'] as const),
      options: readGatewayConfig(env, flags, command === 'dev' ? DEV_GATEWAY_DEFAULTS : {}),
    };
  }
  if (plan.api)
    requireAuthOffLoopback('the lease API', plan.api.options, plan.api.options, '--discovery-addr');
  if (plan.gateway) {
    requireAuthOffLoopback('the gateway', plan.gateway.options, plan.gateway.options, '--gateway-addr');
    const { socks } = plan.gateway.options;
    if (socks)
      requireAuthOffLoopback(
        "the gateway's SOCKS5 listener",
        socks,
        plan.gateway.options,
        '--gateway-socks-addr',
      );
  }
  if (command === 'dev') {
    if (flags.node && flags.kubeconfig) {
      throw new ConfigError(
        '--node: the node joins the apiserver dev starts; it cannot be used with --kubeconfig (a cluster of your own has its nodes)',
      );
    }
    if (flags.node && flags.providersConfig) {
      throw new ConfigError(
        "--node: it adds a `kubernetes` provider to dev's embedded providers config; with --providers-config, point a kubernetes entry at the node yourself",
      );
    }
    plan.dev = {
      root: devRoot,
      apiAddrGiven: flags.discoveryAddr !== undefined,
      gatewayAddrGiven: flags.gatewayAddr !== undefined,
      gatewaySocksAddrGiven: flags.gatewaySocksAddr !== undefined,
      ...(flags.tracing ? { tracing: true } : {}),
      ...(flags.node ? { node: true } : {}),
      ...(flags.temporalAddress ? { temporalAddress: flags.temporalAddress } : {}),
      ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}),
    };
  }
  return plan;
}
