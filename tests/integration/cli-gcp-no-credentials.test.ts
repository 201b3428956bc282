/**
 * The seed's own sample providers config (kubernetes, gcp-eu, kvm-home),
 * run by the real `worker` and `bridge` processes on a machine with no
 * Google credentials: the worker used to exit 1 within seconds, the
 * library's "Could not load the default credentials" escaping as an
 * unhandled rejection. Now the gcp provider fails only its own Proxies and
 * its ProviderHealth, with the credentials error, and a `local` provider
 * added to the same config serves its Proxy.
 *
 * No Google credentials and nothing sent off the machine:
 * METADATA_SERVER_DETECTION=none (no metadata server probe),
 * GOOGLE_APPLICATION_CREDENTIALS empty, HOME an empty directory (no gcloud
 * application-default file).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

const NO_CREDENTIALS = 'no Google credentials found: Application Default Credentials are not set up';

describe("the seed's providers config on a machine with no Google credentials", () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-gcp-nocreds-'));
  const home = join(dir, 'home');
  const installation = `nocreds-${randomBytes(3).toString('hex')}`;
  const api = proxyClient();
  const healths = providerHealthClient();
  const children: CliProcess[] = [];
  let namespace: string;
  let worker: CliProcess;

  beforeAll(async () => {
    mkdirSync(home);
    namespace = await createNamespace(kubeConfig(), 'gcp-nocreds');
    // The seed's file as it is, plus one local provider.
    const seed = parseYaml(readFileSync(join(ROOT, 'tests/fixtures/seed-providers-config.yaml'), 'utf8')) as {
      providers: Record<string, unknown>[];
    };
    expect(seed.providers.map((p) => p.name)).toEqual(['kubernetes', 'gcp-eu', 'kvm-home']);
    const config = join(dir, 'providers.yaml');
    writeFileSync(
      config,
      stringifyYaml({
        providers: [
          ...seed.providers,
          {
            name: 'local',
            type: 'local',
            local: { stateDir: join(dir, 'local'), addressRange: '127.77.26.0/24' },
          },
        ],
      }),
    );
    const taskQueue = uniqueTaskQueue('gcp-nocreds');
    const common = [...testServerArgs(), '--task-queue', taskQueue, '--watch-namespaces', namespace];
    const env = {
      METADATA_SERVER_DETECTION: 'none',
      GOOGLE_APPLICATION_CREDENTIALS: '',
      GCE_METADATA_HOST: '',
      GCE_METADATA_IP: '',
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
    await deleteProviderHealth(healths, 'gcp-eu').catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps serving: gcp-eu fails its own Proxy and ProviderHealth with the credentials error, local works', async () => {
    const gcpSample = parseYaml(readFileSync(join(ROOT, 'infra/samples/proxy-gcp.yaml'), 'utf8')) as {
      spec: Record<string, unknown>;
    };
    expect(gcpSample.spec.provider).toBe('gcp-eu');
    await createProxy(api, namespace, 'cloud', gcpSample.spec as ProxySpecInput);
    await createProxy(api, namespace, 'fine', { mode: 'Managed', provider: 'local', port: 18261 });

    // The worker must not die meanwhile (it used to exit 1 within seconds): every wait checks it first.
    const alive = () => {
      if (worker.proc.exitCode !== null || worker.proc.signalCode !== null) {
        throw new Error(
          `the worker exited (${worker.proc.exitCode ?? worker.proc.signalCode}):\n${worker.output()}`,
        );
      }
    };
    // The gcp Proxy shows the credentials error, retried (Transient: credentials mounted later are picked up).
    const cloud = await waitForProxy(api, namespace, 'cloud', 'the credentials error', (p) => {
      alive();
      return Boolean(proxyCondition(p, 'Provisioned')?.message?.includes(NO_CREDENTIALS));
    });
    expect(proxyCondition(cloud, 'Provisioned')).toMatchObject({ status: 'False', reason: 'TransientError' });
    expect(cloud.status?.phase).not.toBe('Failed');

    // The local Proxy, in the same worker, is provisioned.
    await waitForProxy(api, namespace, 'fine', 'Running', (p) => {
      alive();
      return isProvisioned(p);
    });

    // gcp-eu's ProviderHealth: its project target not ready, Unauthorized, with the same words.
    const ph = await eventually(
      'the gcp-eu ProviderHealth with the credentials error',
      async () => {
        alive();
        const obj = await healths.get('gcp-eu').catch(() => undefined);
        const target = obj?.status?.targets?.find((t) => t.name === 'my-project');
        return target?.message?.includes(NO_CREDENTIALS) ? { obj: obj!, target } : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    expect(ph.obj.metadata.labels?.['crawl.example.com/installation']).toBe(installation);
    expect(ph.target).toMatchObject({ ready: false, reason: 'Unauthorized' });

    // Still running, and nothing went unobserved.
    expect(worker.proc.exitCode).toBeNull();
    const out = worker.output();
    expect(out).not.toMatch(/unhandled/i);
    expect(out).not.toContain('Could not load the default credentials');
    expect(out).toContain(NO_CREDENTIALS);

    for (const name of ['fine', 'cloud']) {
      await deleteProxy(api, namespace, name);
      await waitForProxyGone(api, namespace, name);
    }
    expect(worker.proc.exitCode).toBeNull();
    expect(worker.output()).not.toMatch(/unhandled/i);
  });
});
