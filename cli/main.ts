#!/usr/bin/env node
/**
 * The one executable: `egress-proxies <command>`.
 */
import { Command, Option } from 'commander';
import { loadDev } from './dev.js';
import { Lifecycle } from './lifecycle.js';
import { loadKubeConfig } from './kube.js';
import { createLogger } from './logger.js';
import {
  preflightWorkerConfig,
  startApi,
  startBridge,
  startGateway,
  startWorker,
  type Running,
} from './processes.js';
import { COMMANDS, planCommand, type CommandFlags, type CommandName, type CommandPlan } from './plan.js';
import { buildInfo } from './build-info.js';
import { packageVersion } from './version.js';
import { startTracing } from '../tracing/index.js';

/**
 * Options by the part that reads them. A command offers the options of the
 * parts it runs and no others; tests/unit/cli-options.test.ts proves each
 * one changes the configuration of a part its command runs.
 */

/** Read by every part: where Temporal and the cluster are, and the logger. */
function connectionOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--temporal-address <host:port>', 'Temporal frontend (env TEMPORAL_ADDRESS)'))
    .addOption(new Option('--temporal-namespace <ns>', 'Temporal namespace (env TEMPORAL_NAMESPACE)'))
    .addOption(
      new Option(
        '--temporal-profile <name>',
        'profile of the Temporal client config file (env TEMPORAL_PROFILE; default "default")',
      ),
    )
    .addOption(
      new Option(
        '--temporal-config-file <path>',
        'Temporal client config TOML (env TEMPORAL_CONFIG_FILE; default ~/.config/temporalio/temporal.toml)',
      ),
    )
    .addOption(
      new Option(
        '--temporal-tls-cert <path>',
        'client certificate for mTLS (env TEMPORAL_TLS_CLIENT_CERT_PATH)',
      ),
    )
    .addOption(new Option('--temporal-tls-key <path>', 'its private key (env TEMPORAL_TLS_CLIENT_KEY_PATH)'))
    .addOption(
      new Option(
        '--temporal-tls-ca <path>',
        'CA that signed the server (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)',
      ),
    )
    .addOption(
      new Option(
        '--temporal-tls-server-name <name>',
        'TLS server name to verify (env TEMPORAL_TLS_SERVER_NAME)',
      ),
    )
    .addOption(
      new Option(
        '--temporal-api-key-file <path>',
        'file holding a Temporal API key (or env TEMPORAL_API_KEY)',
      ),
    )
    .addOption(new Option('--kubeconfig <path>', 'kubeconfig (env KUBECONFIG; in-cluster config when unset)'))
    .addOption(new Option('--log-level <level>', 'log level (env LOG_LEVEL)'));
}

/** Each process serves its own /metrics here (the api: off the discovery port, which names every proxy). */
function metricsOption(cmd: Command): Command {
  return cmd.addOption(
    new Option(
      '--metrics-addr <host:port>',
      'serve /metrics here (the api then no longer serves it on --discovery-addr; dev: the one registry of all parts)',
    ),
  );
}

/** Read by the worker and the bridge (the prober signals workflows by ID). */
function taskQueueOption(cmd: Command): Command {
  return cmd.addOption(
    new Option('--task-queue <name>', 'task queue of the Proxy workflows').default('egress-proxies'),
  );
}

/** Read by every part that lists or watches Proxies: worker (GC, drift sweep), bridge, api. */
function watchNamespacesOption(cmd: Command): Command {
  return cmd.addOption(
    new Option(
      '--watch-namespaces <a,b>',
      'namespace-scoped install: watch and list Proxies and cloud-init Secrets in these namespaces only (env WATCH_NAMESPACES; default all)',
    ),
  );
}

function workerOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--providers-config <path>', 'providers config YAML (env PROVIDERS_CONFIG)'))
    .addOption(
      new Option(
        '--state-dir <path>',
        'state of providers that keep it on disk (dev: the whole instance, Temporal and etcd included)',
      ),
    )
    .addOption(
      new Option(
        '--installation <id>',
        'installation identity mark (env INSTALLATION_ID; derived from the cluster)',
      ),
    )
    .addOption(
      new Option('--gc-interval <duration>', 'orphan GC schedule interval, 0 disables (default 10m)'),
    )
    .addOption(
      new Option('--gc-min-age <duration>', 'never collect an instance younger than this (default 10m)'),
    )
    .addOption(new Option('--gc-dry-run', 'report what orphan GC would delete, delete nothing'))
    .addOption(
      new Option('--provider-check-interval <duration>', 'provider checks interval, 0 disables (default 1m)'),
    )
    .addOption(
      new Option(
        '--max-cached-workflows <n>',
        'worker: workflows kept in memory, ~0.3 MiB each (env MAX_CACHED_WORKFLOWS; default 100)',
      ),
    )
    .addOption(
      new Option('--provisioning-poll <duration>', 'poll while provisioning or deleting (default 10s)'),
    )
    .addOption(
      new Option(
        '--drift-sweep <duration>',
        'list each provider and signal only drifted Proxies this often, 0 disables (default 2m)',
      ),
    )
    .addOption(
      new Option(
        '--safety-poll <duration>',
        "each Proxy's own look when its provider is swept, in case a sweep is missed (default 6h)",
      ),
    )
    .addOption(
      new Option(
        '--drift-poll <duration>',
        "each Proxy's own look when its provider is not swept (default 10m)",
      ),
    );
}

function bridgeOptions(cmd: Command): Command {
  return cmd.addOption(
    new Option(
      '--reconcile-period <duration>',
      'how often every Proxy is checked for a running workflow, and every run for its Proxy (default 2m)',
    ),
  );
}

/** `api` alone (dev has it from the worker's options): the entries' `health:` blocks for the prober. */
function apiProvidersConfigOption(cmd: Command): Command {
  return cmd.addOption(
    new Option(
      '--providers-config <path>',
      "providers config YAML, read for its entries' health: blocks (the prober's per-entry probe URL and interval) and prices (what the fleet costs; env PROVIDERS_CONFIG)",
    ),
  );
}

/** `gateway` alone (dev has it from the worker's options): the entries' per-GiB prices. */
function gatewayProvidersConfigOption(cmd: Command): Command {
  return cmd.addOption(
    new Option(
      '--providers-config <path>',
      "providers config YAML, read for its entries' prices: what the bytes relayed through their proxies cost (egress_proxy_cost_total; env PROVIDERS_CONFIG)",
    ),
  );
}

/** The lease API and the health prober. */
function apiOptions(cmd: Command): Command {
  return leaseOptions(
    cmd
      .addOption(
        new Option('--discovery-addr <addr>', 'lease API listen address, host:port or :port (default :8090)'),
      )
      .addOption(
        new Option(
          '--pool-demand-interval <duration>',
          'how often ProxyPools that autoscale or rotate on bans may be sent a demand report (default 5s)',
        ),
      )
      .addOption(
        new Option(
          '--temporal-web-url <url>',
          "the Temporal Web UI's address, for the dashboard's link to each Proxy's workflow (dev: its own server's)",
        ),
      )
      .addOption(new Option('--no-dashboard', 'serve no dashboard at /ui'))
      .addOption(
        new Option(
          '--no-prober',
          'serve leases only, without health probes from this replica: one api replica probes, the others share its verdicts through the Proxies and the leases through --lease-store',
        ),
      ),
  );
}

/** How leases are granted and where they live: read by the lease API and the gateway alike. */
function leaseOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--discovery-token-file <path>',
        "file with the API token: the lease API's bearer token and the gateway's proxy password (or env DISCOVERY_TOKEN)",
      ),
    )
    .addOption(
      new Option(
        '--tenants-file <path>',
        'YAML file of tenants: each a name, the SHA-256 of its token, the pools or attributes it may use and its limits (reloaded when it changes; beside or instead of the single token)',
      ),
    )
    .addOption(
      new Option(
        '--auth-failures-per-minute <n>',
        'wrong tokens a client address may send per minute before it is answered 429 without a check (default 20; 0 turns it off)',
      ),
    )
    .addOption(
      new Option(
        '--insecure-no-auth',
        'serve the lease API and the gateway with no token on an address off the loopback (refused otherwise)',
      ),
    )
    .addOption(new Option('--lease-cooldown <duration>', 'cooldown after rate_limited/banned (default 15m)'))
    .addOption(new Option('--max-lease-ttl <duration>', 'longest lease a client may ask for (default 1h)'))
    .addOption(
      new Option(
        '--lease-store <memory|url>',
        'where leases and cooldowns live: memory (one replica) or redis://host:port / rediss:// (shared by replicas; default memory)',
      ),
    )
    .addOption(
      new Option('--lease-store-password-file <path>', 'file with the Redis password (a mounted Secret)'),
    )
    .addOption(new Option('--lease-store-ca-file <path>', 'PEM CA bundle for a rediss:// Redis'));
}

/** The gateway's own options (its lease options are leaseOptions). */
function gatewayOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--gateway-addr <addr>',
        "gateway (crawlers' proxy endpoint) listen address, host:port or :port (default :8080; dev 127.0.0.1:8092)",
      ),
    )
    .addOption(
      new Option(
        '--gateway-socks-addr <addr>',
        "the gateway's SOCKS5 listen address (RFC 1928 with username/password; same leases and options), host:port or :port (default: none; dev 127.0.0.1:8093)",
      ),
    )
    .addOption(
      new Option(
        '--gateway-connect-timeout <duration>',
        'bound on reaching an upstream proxy and reading its answer to CONNECT (default 5s)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-attempts <attempts>',
        'upstream proxies tried per connection when one refuses or times out (default 3)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-rate-limit-statuses <codes>',
        'plain-HTTP statuses that report rate_limited for their target, comma-separated; empty turns it off (default 429,403)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-max-target-labels <n>',
        'distinct targets given their own metric label; the rest count as "other" (default 500)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-tunnel-idle-timeout <duration>',
        'a tunnel or plain-HTTP exchange that carries no byte either way for this long is closed and its lease let go of (default 5m; 0 turns it off)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-tunnel-max-lifetime <duration>',
        'a tunnel is closed after this long whatever it carries (default 0: no bound)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-response-timeout <duration>',
        'bound on a whole plain-HTTP exchange, however the answer drips (default 10m)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-max-tunnels-per-client <n>',
        'open tunnels and plain-HTTP requests per client address; over it: 429 at once (default 256; 0: no bound)',
      ),
    )
    .addOption(
      new Option(
        '--gateway-max-connections <n>',
        'client connections the gateway holds at once; more are closed as they arrive (default 10000)',
      ),
    )
    .addOption(
      new Option(
        '--egress-deny-cidrs <cidrs>',
        "ranges crawlers may not reach, added to the default private, loopback, link-local and reserved ones (the cluster's pod and service CIDRs), comma-separated",
      ),
    )
    .addOption(
      new Option(
        '--egress-allow-cidrs <cidrs>',
        'exceptions to the denied ranges, on every port, comma-separated; the loopback opens only when named (127.0.0.0/8) (dev: 127.0.0.0/8,::1/128)',
      ),
    )
    .addOption(
      new Option(
        '--egress-allow-ports <ports>',
        'destination ports crawlers may reach outside --egress-allow-cidrs, like 80,443,8000-8999, or any (default 80,443)',
      ),
    )
    .addOption(
      new Option(
        '--egress-resolver <ip:port>',
        "DNS server the gateway resolves targets with (default: the system's resolver)",
      ),
    );
}

/** The gateway reads Proxies from the cluster and never talks to Temporal. */
function gatewayConnectionOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--kubeconfig <path>', 'kubeconfig (env KUBECONFIG; in-cluster config when unset)'))
    .addOption(new Option('--log-level <level>', 'log level (env LOG_LEVEL)'));
}

/** `dev` only: a local trace backend. */
function devOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--tracing',
        'also start Jaeger (built from the Go module proxy on first use) and send traces to it; its UI address is in the banner',
      ),
    )
    .addOption(
      new Option(
        '--node',
        'also run a one-node Kubernetes cluster (kubelet, containerd, a Squid image built from Debian packages; root only, a few minutes on first use): `kubernetes` Proxies run real Squid pods',
      ),
    );
}

/**
 * Resolves at the first SIGTERM or SIGINT from now on. Listened for before
 * any part starts: a pod stopped while it is still starting (a rolling
 * update, a scale-down) stops gracefully once the start in progress ends,
 * instead of dying by the signal with whatever it had opened. The listener
 * goes with the first signal, so a second one takes the default action and
 * ends the process at once.
 */
function stopSignal(): Promise<void> {
  return new Promise((resolve) => {
    const onSignal = () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      resolve();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

/**
 * Waits for the stop signal (the caller then stops everything, and exits 0)
 * or for a part to stop by itself (throws: the caller stops the rest, and a
 * worker that died must not look like a clean exit to the kubelet).
 */
async function runUntilSignal(parts: Running[], stop: Promise<void>): Promise<void> {
  const ended = await new Promise<{ part?: string; error?: unknown }>((resolve) => {
    void stop.then(() => resolve({}));
    for (const p of parts)
      p.done.then(
        () => resolve({ part: p.name }),
        (error: unknown) => resolve({ part: p.name, error }),
      );
  });
  if (ended.part !== undefined) {
    const why = ended.error instanceof Error ? ended.error.message : 'stopped';
    throw new Error(`${ended.part} stopped: ${why}`, { cause: ended.error });
  }
}

/**
 * The bound on one part's whole stop: above the worker's (its shutdown
 * grace, then its connections), each of whose steps has a bound of its own.
 */
const PART_STOP_TIMEOUT_MS = 60_000;

/** Starts what a plan says and runs until a signal or a part stops by itself. */
export async function runPlan(
  command: CommandName,
  plan: CommandPlan,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  // Everything that can be checked without a connection, before anything
  // starts (dev: before its servers): a bad flag must not leave a polling
  // worker behind.
  if (plan.worker) preflightWorkerConfig(plan.worker);
  if (command === 'dev') {
    const runDev = await loadDev();
    // People read `dev` on a terminal; piped or in CI it stays JSON.
    const logger = createLogger(plan.logger.level, undefined, { pretty: process.stdout.isTTY === true });
    await runDev(plan, logger, env);
    return;
  }
  const logger = createLogger(plan.logger.level);
  const stop = stopSignal();
  // Before any part: the Temporal plugin and the lease API's hook are given to them at start.
  const tracing = await startTracing(plan.tracing, packageVersion());
  if (plan.tracing) logger.info({ traces: tracing.describe() }, 'tracing on');
  const scope = new Lifecycle(logger, { name: command, stopTimeoutMs: PART_STOP_TIMEOUT_MS });
  // Deferred first, so stopped last: spans still buffered are sent before the process exits.
  scope.defer('tracing', () => tracing.shutdown().catch(() => undefined));
  const parts: Running[] = [];
  let stopping = false;
  /** One part's start; a part whose start ends after a stop was asked for is stopped at once. */
  const startPart = async (start: () => Promise<Running>): Promise<void> => {
    if (stopping) return;
    const part = await start();
    if (stopping) {
      await part.stop();
      return;
    }
    scope.defer(part.name, () => part.stop());
    parts.push(part);
  };
  const startAll = async (): Promise<void> => {
    if (plan.worker) {
      const worker = plan.worker;
      await startPart(() => startWorker(worker, loadKubeConfig(worker.kubeconfig), logger, { tracing }));
    }
    if (plan.bridge) {
      const bridge = plan.bridge;
      await startPart(() => startBridge(bridge, loadKubeConfig(bridge.kubeconfig), logger, { tracing }));
    }
    if (plan.api) {
      const api = plan.api;
      await startPart(() =>
        startApi(api.options, api, loadKubeConfig(api.kubeconfig), logger, undefined, { tracing }),
      );
    }
    if (plan.gateway) {
      const gateway = plan.gateway;
      await startPart(() =>
        startGateway(gateway.options, gateway, loadKubeConfig(gateway.kubeconfig), logger, undefined, {
          tracing,
        }),
      );
    }
  };
  try {
    const starting = startAll();
    const first = await Promise.race([
      starting.then(() => 'started' as const),
      stop.then(() => 'stop' as const),
    ]);
    if (first === 'started') {
      await runUntilSignal(parts, stop);
      return;
    }
    // Asked to stop while a part is still starting (a pod stopped during a
    // rolling update, or one waiting for RBAC it lacks): what has started
    // stops now; the part being started stops when its start ends, and a
    // start that would not end (an informer that cannot sync retries
    // forever) is left to the process's exit, which the backstop makes sure of.
    stopping = true;
    logger.info('stop requested while starting: stopping what has started');
    starting.catch((error: unknown) =>
      logger.debug({ err: oneLine(error) }, 'a start cut short by the stop failed'),
    );
    setTimeout(() => process.exit(), EXIT_BACKSTOP_MS).unref();
  } finally {
    await scope.close();
  }
}

export interface CliDeps {
  /** What an action does with its plan; tests capture the plan instead of starting anything. */
  run?: (command: CommandName, plan: CommandPlan) => Promise<void>;
}

export function buildCli(env: NodeJS.ProcessEnv, deps: CliDeps = {}): Command {
  const run = deps.run ?? ((command, plan) => runPlan(command, plan, env));
  const program = new Command('egress-proxies')
    .description('Control plane for a fleet of HTTP egress proxies, on Temporal and Kubernetes')
    .version(packageVersion(), '-v, --version');

  program
    .command('version')
    .description('print the version')
    .action(() => {
      const info = buildInfo();
      process.stdout.write(
        `egress-proxies ${info.version} (commit ${info.commit}, node ${process.version})\n`,
      );
    });

  const commands: Record<CommandName, { description: string; options: Array<(c: Command) => Command> }> = {
    dev: {
      description:
        'run the whole control plane locally: Temporal dev server (unless --temporal-address), kube-apiserver (unless --kubeconfig), worker, bridge, lease API, gateway',
      options: [
        connectionOptions,
        taskQueueOption,
        metricsOption,
        watchNamespacesOption,
        workerOptions,
        bridgeOptions,
        apiOptions,
        gatewayOptions,
        devOptions,
      ],
    },
    worker: {
      description: 'run the Temporal worker: Proxy workflows and provider activities',
      options: [connectionOptions, taskQueueOption, metricsOption, watchNamespacesOption, workerOptions],
    },
    bridge: {
      description: 'run the Kubernetes bridge: Proxy and Secret events to workflow signals',
      options: [connectionOptions, taskQueueOption, metricsOption, watchNamespacesOption, bridgeOptions],
    },
    api: {
      description: 'run the lease API and health prober',
      options: [
        connectionOptions,
        metricsOption,
        watchNamespacesOption,
        apiOptions,
        apiProvidersConfigOption,
      ],
    },
    gateway: {
      description:
        'run the gateway: one HTTP proxy endpoint (CONNECT and plain HTTP) that leases a Ready proxy per connection or session',
      options: [
        gatewayConnectionOptions,
        metricsOption,
        watchNamespacesOption,
        leaseOptions,
        gatewayOptions,
        gatewayProvidersConfigOption,
      ],
    },
  };
  for (const name of COMMANDS) {
    const cmd = program.command(name).description(commands[name].description);
    for (const add of commands[name].options) add(cmd);
    cmd.action(async (flags: CommandFlags) => {
      await run(name, planCommand(name, flags, env));
    });
  }

  return program;
}

/** One line for the operator: multi-line messages (a config file's issues) are joined. */
export function oneLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .join('; ');
}

/** How long a failed start may take to let go of what it held before the process exits anyway. */
const EXIT_BACKSTOP_MS = 5_000;

export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  try {
    await buildCli(env).parseAsync(argv);
  } catch (error) {
    process.stderr.write(`egress-proxies: ${oneLine(error)}\n`);
    process.exitCode = 1;
    // Every start stops what it started; this is the backstop for a handle
    // something else left open (a library's retry timer), so a failed
    // process never keeps running. Unref'd: it does not itself hold the
    // process open when nothing else does.
    setTimeout(() => process.exit(1), EXIT_BACKSTOP_MS).unref();
  }
}
