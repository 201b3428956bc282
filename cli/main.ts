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
import { startApi, startBridge, startWorker, type Running } from './processes.js';
import { packageVersion } from './version.js';

function commonOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--temporal-address <host:port>', 'Temporal frontend (env TEMPORAL_ADDRESS)'))
    .addOption(new Option('--temporal-namespace <ns>', 'Temporal namespace (env TEMPORAL_NAMESPACE)'))
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
      new Option(
        '--metrics-addr <host:port>',
        'worker and api: serve /metrics here (the api then no longer serves it on --discovery-addr)',
      ),
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

async function runUntilSignal(parts: Running[]): Promise<void> {
  await new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
    for (const p of parts) void p.done.finally(() => resolve());
  });
  for (const p of parts.reverse()) await p.stop();
}

export function buildCli(env: NodeJS.ProcessEnv): Command {
  const program = new Command('egress-proxies')
    .description('Control plane for a fleet of HTTP egress proxies, on Temporal and Kubernetes')
    .version(packageVersion(), '-v, --version');

  program
    .command('version')
    .description('print the version')
    .action(() => {
      process.stdout.write(`egress-proxies ${packageVersion()} (node ${process.version})\n`);
    });

  apiOptions(commonOptions(program.command('dev')))
    .description(
      'run the whole control plane locally: Temporal dev server, kube-apiserver (unless --kubeconfig), worker, bridge, lease API',
    )
    .action(async (flags: CommonFlags & ApiFlags) => {
      const config = readCommonConfig(env, flags);
      const logger = createLogger(config.logLevel);
      await runDev(
        config,
        {
          apiAddr: flags.discoveryAddr ?? '127.0.0.1:8090',
          apiFlags: {
            leaseStore: flags.leaseStore,
            leaseStorePasswordFile: flags.leaseStorePasswordFile,
            leaseStoreCaFile: flags.leaseStoreCaFile,
          },
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

export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  try {
    await buildCli(env).parseAsync(argv);
  } catch (error) {
    process.stderr.write(`egress-proxies: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
