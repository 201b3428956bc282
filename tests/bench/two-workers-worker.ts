/**
 * One worker process of `tests/bench/two-workers.ts`: the real Proxy worker
 * (`createProxyWorker`, what `egress-proxies worker` runs) with one `gcp`
 * provider driving the real `@google-cloud/compute` client against the
 * bench's TLS fake, whose token it is given (the CLI would get one from
 * Google credentials, which this machine has none of). Its settings come as
 * JSON in EP_TWO_WORKERS; it prints "ready" once polling, and runs until
 * killed.
 */
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { OAuth2Client } from 'google-auth-library';
import { pino } from 'pino';
import { loadKubeConfig } from '../../cli/kube.js';
import { createProxyWorker } from '../../cli/worker.js';
import type { ProviderRegistry } from '../../providers/config.js';
import { gcpConfigSchema } from '../../providers/gcp/config.js';
import { createGcpProvider } from '../../providers/gcp/provider.js';
import { DEFAULT_TIMING } from '../../workflows/proxy/types.js';

export interface TwoWorkersChildConfig {
  temporal: string;
  kubeconfig: string;
  taskQueue: string;
  bundlePath: string;
  project: string;
  endpoint: string;
  endpointCaFile: string;
  token: string;
  maxCachedWorkflows: number;
}

const config = JSON.parse(process.env.EP_TWO_WORKERS ?? '') as TwoWorkersChildConfig;
Runtime.install({ logger: new DefaultLogger('ERROR') });
const logger = pino({ level: 'silent' });
const auth = new OAuth2Client();
auth.setCredentials({ access_token: config.token, expiry_date: Date.now() + 24 * 3_600_000 });
const gcp = createGcpProvider({
  name: 'gcp',
  config: gcpConfigSchema.parse({
    project: config.project,
    endpoint: config.endpoint,
    endpointCaFile: config.endpointCaFile,
  }),
  logger,
  authClient: auth,
});
const registry: ProviderRegistry = {
  get: (n) => (n === 'gcp' ? gcp : undefined),
  names: () => ['gcp'],
  close: () => gcp.close(),
};
const worker = await createProxyWorker({
  connection: await NativeConnection.connect({ address: config.temporal }),
  namespace: 'default',
  taskQueue: config.taskQueue,
  kubeConfig: loadKubeConfig(config.kubeconfig),
  registry,
  installation: 'bench',
  logger,
  workflowBundle: { codePath: config.bundlePath },
  maxCachedWorkflows: config.maxCachedWorkflows,
  timing: { ...DEFAULT_TIMING, provisioningPollMs: 1_000, deletionPollMs: 1_000 },
  driftSweepOn: true,
});
const running = worker.run();
console.log('ready');
await running;
