/**
 * Live smoke test of the gcp provider against a real project (issue 26):
 * the way a user verifies that a project, its credentials and its network
 * are ready for egress proxies. Run by hand, never by `make test`:
 *
 *   GCP_PROJECT=my-project npm run test:gcp-live
 *
 * Optional: GCP_ZONE (default europe-west1-b), GCP_MACHINE_TYPE (e2-micro),
 * GCP_IMAGE (Ubuntu 24.04), GCP_NETWORK / GCP_SUBNETWORK / GCP_NETWORK_TAG
 * (the provider's defaults), and GCP_LIVE_CLIENT_CIDR: the address range
 * this machine's traffic leaves from; with it the VM's Squid allows that
 * range and the test CONNECTs through the VM (the firewall rule for the tag
 * must allow it too); without it that step is skipped, saying why.
 * Credentials: Application Default Credentials, with the roles listed in
 * docs/providers/gcp.md ("Verifying a project").
 *
 * Steps: create, create again (same ID, nothing new), get until Running,
 * listByTag finds it, CONNECT through it (when reachable), delete, delete
 * again, get until NotFound, listByTag no longer finds it. The VM is deleted
 * in afterAll whatever happened.
 */
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { ProviderError } from '../../providers/errors.js';
import { gcpConfigSchema } from '../../providers/gcp/config.js';
import { createGcpProvider, type GcpProvider } from '../../providers/gcp/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { CreateRequest, Instance } from '../../providers/types.js';

const env = process.env;
const PROJECT = env.GCP_PROJECT;
if (!PROJECT) {
  console.log(
    'gcp-live: skipped: GCP_PROJECT is not set (GCP_PROJECT=<project> npm run test:gcp-live runs it against that project)',
  );
}
const CLIENT_CIDR = env.GCP_LIVE_CLIENT_CIDR;
const PORT = 3128;
const live = () => AbortSignal.timeout(60_000);

async function until<T>(what: string, ms: number, fn: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`gcp-live: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5_000));
  }
}

/** CONNECT through the proxy to a public HTTPS host; resolves with the status line. */
function connectThrough(ip: string, port: number, target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: ip, port, timeout: 15_000 });
    let seen = '';
    socket.on('connect', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
    socket.on('data', (d: Buffer) => {
      seen += d.toString('latin1');
      if (seen.includes('\r\n')) {
        socket.destroy();
        resolve(seen.split('\r\n')[0]!);
      }
    });
    socket.on('timeout', () => {
      socket.destroy();
      reject(new Error(`no answer from ${ip}:${port} in 15 s`));
    });
    socket.on('error', reject);
  });
}

describe.skipIf(!PROJECT)(`gcp provider against the real Compute API (project ${PROJECT ?? 'unset'})`, () => {
  const uid = randomUUID();
  const name = instanceNameFromUid(uid);
  let provider: GcpProvider;
  let id: string | undefined;

  const request = (): CreateRequest => ({
    name,
    uid,
    namespace: 'gcp-live',
    proxyName: 'smoke',
    placement: {
      zone: env.GCP_ZONE ?? 'europe-west1-b',
      machineType: env.GCP_MACHINE_TYPE ?? 'e2-micro',
      image: env.GCP_IMAGE ?? 'projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64',
    },
    cloudInit: [
      '#cloud-config',
      'packages: [squid]',
      'write_files:',
      '  - path: /etc/squid/conf.d/egress-proxies.conf',
      '    content: |',
      // Only the range the test runs from: never an open proxy.
      `      acl egress_clients src ${CLIENT_CIDR ?? '127.0.0.1/32'}`,
      '      http_access allow egress_clients',
      'runcmd: [[systemctl, restart, squid]]',
      '',
    ].join('\n'),
    port: PORT,
    installation: 'gcp-live',
  });

  afterAll(async () => {
    if (id !== undefined) await provider.delete(id, live()).catch(() => undefined);
    await provider?.close();
  });

  it('create, get until Running, list, CONNECT, delete, gone', async () => {
    provider = createGcpProvider({
      name: 'gcp-live',
      config: gcpConfigSchema.parse({
        project: PROJECT,
        ...(env.GCP_NETWORK ? { network: env.GCP_NETWORK } : {}),
        ...(env.GCP_SUBNETWORK ? { subnetwork: env.GCP_SUBNETWORK } : {}),
        ...(env.GCP_NETWORK_TAG ? { networkTag: env.GCP_NETWORK_TAG } : {}),
      }),
      logger: pino({ level: env.GCP_LIVE_LOG_LEVEL ?? 'info' }),
    });
    const [health] = await provider.check(live());
    console.log(`gcp-live: check: ${JSON.stringify(health)}`);
    expect(health).toMatchObject({ ready: true });

    id = await provider.create(request(), live());
    console.log(`gcp-live: created ${id}`);
    expect(await provider.create(request(), live())).toBe(id);

    const running: Instance = await until('Running', 10 * 60_000, async () => {
      const got = await provider.get(id!, live());
      expect(['Provisioning', 'Running']).toContain(got.state);
      return got.state === 'Running' ? got : undefined;
    });
    console.log(`gcp-live: Running at ${running.ip}`);
    expect(running.uid).toBe(uid);
    expect((await provider.listByTag(live())).map((i) => i.id)).toContain(id);

    if (CLIENT_CIDR === undefined) {
      console.log('gcp-live: CONNECT skipped: GCP_LIVE_CLIENT_CIDR is not set (the range Squid must allow)');
    } else {
      // cloud-init installs Squid after boot: retried for a few minutes.
      const status = await until('CONNECT through the VM', 8 * 60_000, () =>
        connectThrough(running.ip!, PORT, 'www.gstatic.com:443').catch((err: Error) => {
          console.log(`gcp-live: CONNECT not yet: ${err.message}`);
          return undefined;
        }),
      );
      console.log(`gcp-live: CONNECT through ${running.ip}:${PORT}: ${status}`);
      expect(status).toMatch(/^HTTP\/1\.[01] 200/);
    }

    await provider.delete(id, live());
    await provider.delete(id, live());
    await until('NotFound', 10 * 60_000, async () => {
      try {
        await provider.get(id!, live());
        await provider.delete(id!, live());
        return undefined;
      } catch (err) {
        if (err instanceof ProviderError && err.errorClass === 'NotFound') return true;
        throw err;
      }
    });
    console.log(`gcp-live: ${id} gone`);
    expect((await provider.listByTag(live())).map((i) => i.id)).not.toContain(id);
    id = undefined;
  });
});
