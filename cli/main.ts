#!/usr/bin/env node
/**
 * The one executable: `egress-proxies <command>`.
 */
import { Command, Option } from 'commander';
import { readApiConfig, type ApiFlags } from '../api/index.js';
import { readCommonConfig, type CommonFlags } from './config.js';
import { runDev } from './dev.js';
import { loadKubeConfig } from './kube.js';
import { createLogger } from './logger.js';
import { preflightWorkerConfig, startApi, startBridge, startWorker, type Running } from './processes.js';
import { buildInfo } from './build-info.js';
import { packageVersion } from './version.js';

function commonOptions(cmd: Command): Command {
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
    .addOption(
      new Option('--task-queue <name>', 'task queue of the Proxy workflows').default('egress-proxies'),
    )
    .addOption(new Option('--kubeconfig <path>', 'kubeconfig (env KUBECONFIG; in-cluster config when unset)'))
    .addOption(new Option('--providers-config <path>', 'providers config YAML (env PROVIDERS_CONFIG)'))
    .addOption(new Option('--state-dir <path>', 'state of providers that keep it on disk'))
    .addOption(
      new Option(
        '--installation <id>',
        'installation identity mark (env INSTALLATION_ID; derived from the cluster)',
      ),
    )
    .addOption(new Option('--log-level <level>', 'log level (env LOG_LEVEL)'))
    .addOption(
      new Option('--provisioning-poll <duration>', 'poll while provisioning or deleting (default 10s)'),
    )
    .addOption(new Option('--drift-poll <duration>', 'poll when steady (default 2m)'))
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
      new Option('--metrics-addr <host:port>', 'worker: serve /metrics here (provider-check gauges)'),
    )
    .addOption(
      new Option(
        '--max-cached-workflows <n>',
        'worker: workflows kept in memory, ~1 MiB each (env MAX_CACHED_WORKFLOWS; default 1000)',
      ),
    );
}

function apiOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--discovery-addr <addr>', 'lease API listen address, host:port or :port (default :8090)'),
    )
    .addOption(
      new Option('--discovery-token-file <path>', 'file with the bearer token (or env DISCOVERY_TOKEN)'),
    )
    .addOption(new Option('--lease-cooldown <duration>', 'cooldown after rate_limited/banned (default 15m)'))
    .addOption(new Option('--max-lease-ttl <duration>', 'longest lease a client may ask for (default 1h)'));
}

/**
 * Runs until SIGTERM/SIGINT (stops everything, exits 0) or until a part
 * stops by itself (stops the rest, then fails: a worker that died must not
 * look like a clean exit to the kubelet).
 */
async function runUntilSignal(parts: Running[]): Promise<void> {
  const ended = await new Promise<{ part?: string; error?: unknown }>((resolve) => {
    process.once('SIGINT', () => resolve({}));
    process.once('SIGTERM', () => resolve({}));
    for (const p of parts)
      p.done.then(
        () => resolve({ part: p.name }),
        (error: unknown) => resolve({ part: p.name, error }),
      );
  });
  for (const p of parts.reverse()) await p.stop();
  if (ended.part !== undefined) {
    const why = ended.error instanceof Error ? ended.error.message : 'stopped';
    throw new Error(`${ended.part} stopped: ${why}`, { cause: ended.error });
  }
}

export function buildCli(env: NodeJS.ProcessEnv): Command {
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

  apiOptions(commonOptions(program.command('dev')))
    .description(
      'run the whole control plane locally: Temporal dev server, kube-apiserver (unless --kubeconfig), worker, bridge, lease API',
    )
    .action(async (flags: CommonFlags & { discoveryAddr?: string }) => {
      const config = readCommonConfig(env, flags);
      preflightWorkerConfig(config);
      // People read `dev` on a terminal; piped or in CI it stays JSON.
      const logger = createLogger(config.logLevel, undefined, { pretty: process.stdout.isTTY === true });
      await runDev(
        config,
        {
          apiAddr: flags.discoveryAddr ?? '127.0.0.1:8090',
          ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}),
          ...(flags.temporalAddress ? { temporalAddress: flags.temporalAddress } : {}),
        },
        logger,
        env,
      );
    });

  commonOptions(program.command('worker'))
    .description('run the Temporal worker: Proxy workflows and provider activities')
    .action(async (flags: CommonFlags) => {
      const config = readCommonConfig(env, flags);
      const logger = createLogger(config.logLevel);
      await runUntilSignal([await startWorker(config, loadKubeConfig(config.kubeconfig), logger)]);
    });

  commonOptions(program.command('bridge'))
    .description('run the Kubernetes bridge: Proxy and Secret events to workflow signals')
    .action(async (flags: CommonFlags) => {
      const config = readCommonConfig(env, flags);
      const logger = createLogger(config.logLevel);
      await runUntilSignal([await startBridge(config, loadKubeConfig(config.kubeconfig), logger)]);
    });

  apiOptions(commonOptions(program.command('api')))
    .description('run the lease API and health prober')
    .action(async (flags: CommonFlags & ApiFlags) => {
      const config = readCommonConfig(env, flags);
      const logger = createLogger(config.logLevel);
      const api = await startApi(
        readApiConfig(env, flags),
        config,
        loadKubeConfig(config.kubeconfig),
        logger,
      );
      await runUntilSignal([api]);
    });

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
