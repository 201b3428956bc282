/**
 * A Proxy worker in a process of its own, for tests that kill it for real
 * (SIGKILL): `node --import tsx tests/helpers/crash-worker.ts '<json>'`.
 *
 * Its provider is the real local provider, named `local`, whose `create`
 * makes the instance (listener bound, record written) and then never
 * returns, ignoring the abort signal: the window in which a crash loses the
 * instance ID. On entering that state it prints `CREATE-ENTERED <id>` on
 * stdout (after `WORKER-RUNNING` once the worker polls). Runs until killed.
 * Logs (warnings and above) go to stderr. Import only its types from tests:
 * importing the module runs the worker.
 */
import { NativeConnection } from '@temporalio/worker';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import type { ProxyTiming } from '../../workflows/proxy/types.js';
import { createProxyWorker, installTemporalRuntime } from '../../cli/worker.js';
import type { ProviderRegistry } from '../../providers/config.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider } from '../../providers/local/provider.js';
import type { Provider } from '../../providers/types.js';

const CREATE_ENTERED = 'CREATE-ENTERED';

export interface CrashWorkerArgs {
  temporalAddress: string;
  namespace: string;
  taskQueue: string;
  kubeconfigPath: string;
  workflowBundlePath: string;
  stateDir: string;
  addressRange: string;
  installation: string;
  /** The worker's Proxy timing (the test's fast polls). */
  timing?: ProxyTiming;
}

async function main(args: CrashWorkerArgs): Promise<void> {
  const logger = pino({ level: 'warn' }, pino.destination(2));
  installTemporalRuntime(logger);
  const inner = createLocalProvider({
    name: 'local',
    config: localConfigSchema.parse({ addressRange: args.addressRange }),
    stateDir: args.stateDir,
    logger,
  });
  const blocking: Provider = {
    name: inner.name,
    type: inner.type,
    async create(req, signal) {
      const id = await inner.create(req, signal);
      process.stdout.write(`${CREATE_ENTERED} ${id}\n`);
      return new Promise<string>(() => {});
    },
    get: (id, signal) => inner.get(id, signal),
    delete: (id, signal) => inner.delete(id, signal),
    listByTag: (signal) => inner.listByTag(signal),
    close: () => inner.close(),
  };
  const registry: ProviderRegistry = {
    get: (name) => (name === blocking.name ? blocking : undefined),
    names: () => [blocking.name],
    close: () => inner.close(),
  };
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(args.kubeconfigPath);
  const connection = await NativeConnection.connect({ address: args.temporalAddress });
  const worker = await createProxyWorker({
    connection,
    namespace: args.namespace,
    taskQueue: args.taskQueue,
    kubeConfig,
    registry,
    installation: args.installation,
    logger,
    workflowBundle: { codePath: args.workflowBundlePath },
    ...(args.timing ? { timing: args.timing } : {}),
  });
  process.stdout.write('WORKER-RUNNING\n');
  await worker.run();
}

main(JSON.parse(process.argv[2] ?? '{}') as CrashWorkerArgs).catch((error: unknown) => {
  process.stderr.write(
    `crash-worker: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
