/**
 * The real `worker` and `bridge` processes with a providers config holding
 * an `aws` entry on a machine with no AWS credentials, next to a `local`
 * entry: the worker keeps running and serving the local Proxy; the aws
 * Proxy shows a Transient Provisioned condition naming the missing
 * credentials and where they were looked for; the aws entry's
 * ProviderHealth has its region target not ready, Unauthorized, saying the
 * same; nothing goes unhandled.
 *
 * No AWS credentials and nothing sent off the machine: every credential
 * variable of the SDK's default chain is removed from the children's
 * environment (the SDK treats an empty one as unset as well), HOME is an
 * empty directory (no ~/.aws), AWS_EC2_METADATA_DISABLED=true (no instance
 * metadata probe), and the entry's endpoint is a loopback listener of this
 * test, which counts connections: none may arrive (an unsigned request
 * never leaves).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { ROOT, startCli, type CliProcess, testServerArgs } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  deleteProviderHealth,
  deleteProxy,
  isProvisioned,
  kubeConfig,
  providerHealthClient,
  proxyClient,
  proxyCondition,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { eventually, uniqueTaskQueue } from '../helpers/temporal.js';
import type { ProxySpecInput } from '../../resources/proxy-schema.js';

const NO_CREDENTIALS = 'no AWS credentials: the SDK default chain found none';
/** Where the message says the chain looked (the user's list of what to set). */
const SOURCES = [
  'AWS_ACCESS_KEY_ID',
  'shared config and credentials files',
  'web identity',
  'container credentials',
  'instance metadata',
];
/** Every variable through which the SDK's default chain could find credentials. */
const CREDENTIAL_VARIABLES = [
  'AWS_ACCESS_KEY_ID',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
  'AWS_PROFILE',
  'AWS_DEFAULT_PROFILE',
  'AWS_SHARED_CREDENTIALS_FILE',
  'AWS_CONFIG_FILE',
  'AWS_WEB_IDENTITY_TOKEN_FILE',
  'AWS_ROLE_ARN',
  'AWS_CONTAINER_CREDENTIALS_FULL_URI',
  'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI',
  'AWS_CONTAINER_AUTHORIZATION_TOKEN',
];

describe('a worker with an aws entry and no AWS credentials', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-aws-nocreds-'));
  const home = join(dir, 'home');
  const installation = `aws-nocreds-${randomBytes(3).toString('hex')}`;
  const api = proxyClient();
  const healths = providerHealthClient();
  const children: CliProcess[] = [];
  /** The aws entry's endpoint: a loopback listener that only counts who connects. */
  let endpoint: Server;
  let connections = 0;
  let namespace: string;
  let worker: CliProcess;

  beforeAll(async () => {
    mkdirSync(home);
    endpoint = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve));
    const port = (endpoint.address() as { port: number }).port;
    namespace = await createNamespace(kubeConfig(), 'aws-nocreds');
    const config = join(dir, 'providers.yaml');
    writeFileSync(
      config,
      stringifyYaml({
        providers: [
          {
            name: 'aws-eu',
            type: 'aws',
            aws: {
              region: 'us-east-1',
              imageId: 'ami-0123456789abcdef0',
              endpoint: `http://127.0.0.1:${port}`,
            },
          },
          {
            name: 'local',
            type: 'local',
            local: { stateDir: join(dir, 'local'), addressRange: '127.77.59.0/24' },
          },
        ],
      }),
    );
    const taskQueue = uniqueTaskQueue('aws-nocreds');
    const common = [...testServerArgs(), '--task-queue', taskQueue, '--watch-namespaces', namespace];
    // undefined: removed from the child's environment (startCli spreads it over process.env).
    const env: Record<string, string | undefined> = {
      ...Object.fromEntries(CREDENTIAL_VARIABLES.map((name) => [name, undefined])),
      AWS_EC2_METADATA_DISABLED: 'true',
      HOME: home,
    };
    const start = (args: string[]) => {
      const child = startCli(args, { env });
      children.push(child);
      return child;
    };
    worker = start([
      'worker',
      ...common,
      '--installation',
      installation,
      '--providers-config',
      config,
      '--provider-check-interval',
      '10s',
      '--provisioning-poll',
      '1s',
    ]);
    const bridge = start(['bridge', ...common]);
    await worker.waitFor(/worker started/, 120_000);
    await bridge.waitFor(/bridge started/, 120_000);
  });

  afterAll(async () => {
    for (const c of children) await c.stop(30_000).catch(() => undefined);
    await deleteProviderHealth(healths, 'aws-eu').catch(() => undefined);
    await new Promise((resolve) => endpoint?.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps serving: aws-eu fails its own Proxy and ProviderHealth saying no credentials (and where it looked), local works', async () => {
    const awsSample = parseYaml(readFileSync(join(ROOT, 'infra/samples/proxy-aws.yaml'), 'utf8')) as {
      spec: Record<string, unknown>;
    };
    expect(awsSample.spec.provider).toBe('aws-eu');
    await createProxy(api, namespace, 'cloud', awsSample.spec as ProxySpecInput);
    await createProxy(api, namespace, 'fine', { mode: 'Managed', provider: 'local', port: 18259 });

    // The worker must not die meanwhile: every wait checks it first.
    const alive = () => {
      if (worker.proc.exitCode !== null || worker.proc.signalCode !== null) {
        throw new Error(
          `the worker exited (${worker.proc.exitCode ?? worker.proc.signalCode}):\n${worker.output()}`,
        );
      }
    };
    // The aws Proxy shows the credentials error, retried (Transient: credentials set up later are picked up).
    const cloud = await waitForProxy(api, namespace, 'cloud', 'the credentials error', (p) => {
      alive();
      return Boolean(proxyCondition(p, 'Provisioned')?.message?.includes(NO_CREDENTIALS));
    });
    expect(proxyCondition(cloud, 'Provisioned')).toMatchObject({ status: 'False', reason: 'TransientError' });
    for (const source of SOURCES) expect(proxyCondition(cloud, 'Provisioned')?.message).toContain(source);
    expect(cloud.status?.phase).not.toBe('Failed');

    // The local Proxy, in the same worker, is provisioned.
    await waitForProxy(api, namespace, 'fine', 'Running', (p) => {
      alive();
      return isProvisioned(p);
    });

    // aws-eu's ProviderHealth: its region target not ready, Unauthorized, with the same words.
    const ph = await eventually(
      'the aws-eu ProviderHealth with the credentials error',
      async () => {
        alive();
        const obj = await healths.get('aws-eu').catch(() => undefined);
        const target = obj?.status?.targets?.find((t) => t.name === 'us-east-1');
        return target?.message?.includes(NO_CREDENTIALS) ? { obj: obj!, target } : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    expect(ph.obj.metadata.labels?.['crawl.example.com/installation']).toBe(installation);
    expect(ph.target).toMatchObject({ ready: false, reason: 'Unauthorized' });
    for (const source of SOURCES) expect(ph.target.message).toContain(source);

    // Still running, nothing went unobserved, and nothing reached the endpoint.
    expect(worker.proc.exitCode).toBeNull();
    const out = worker.output();
    expect(out).not.toMatch(/unhandled/i);
    expect(out).toContain(NO_CREDENTIALS);
    expect(connections).toBe(0);

    for (const name of ['fine', 'cloud']) {
      await deleteProxy(api, namespace, name);
      await waitForProxyGone(api, namespace, name);
    }
    expect(worker.proc.exitCode).toBeNull();
    expect(worker.output()).not.toMatch(/unhandled/i);
    expect(connections).toBe(0);
  });
});
