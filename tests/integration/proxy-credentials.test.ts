/**
 * Proxy credentials end to end (issue 51): a real worker and bridge (this
 * file's control plane, logging at debug into memory), a real `api` and a
 * real `gateway` process (debug logs captured), one tenants file.
 *
 * - An External Proxy at a loopback forward proxy that asks for basic auth,
 *   with `credentialsSecretRef`: Ready (the prober sends them); a wrong
 *   password in the Secret turns it Unhealthy `AuthFailed`; the Secret gone,
 *   `CredentialsUnavailable` naming it; restored, Ready again.
 * - A Managed `local` Proxy: its proxy answers 407 without the Secret's
 *   credentials, and is Ready (the prober authenticates).
 * - Leases: `proxyURL` with the credentials for a tenant allowed the proxy
 *   (and it works as a proxy URL); a tenant whose scope excludes it gets no
 *   lease of it, so no credentials.
 * - The gateway: a CONNECT and a plain request reach the target; the
 *   upstream proxy sees the Proxy's credentials, never the crawler's token.
 * - Both passwords are sentinels, found in no log (worker, bridge, api,
 *   gateway), no Temporal history of either Proxy, no `/metrics`, no Event
 *   and no Proxy status.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createTcpServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, EventsV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromProxyUrl } from '../../cli/egress-ip.js';
import { credentialsDigest, proxyAuthorization } from '../../credentials/proxy-credentials.js';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import {
  createProxy,
  deleteProxy,
  getProxy,
  proxyCondition,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { getThroughConnect, getThroughProxy, startTarget } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';
import { curlThrough, startGatewayCli } from './gateway-helpers.js';

const SENTINEL_EXTERNAL = `sentinel-ext-${randomBytes(9).toString('hex')}`;
const SENTINEL_MANAGED = `sentinel-mgd-${randomBytes(9).toString('hex')}`;
const TOKEN_ALL = `all-${randomBytes(12).toString('hex')}`;
const TOKEN_ELSEWHERE = `elsewhere-${randomBytes(12).toString('hex')}`;
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const LABELLED = { 'crawl.example.com/proxy-credentials': 'true' };

/** A TCP relay in front of a proxy that keeps the head of every request it relays. */
async function startSniffer(
  upstreamPort: number,
): Promise<{ port: number; heads: string[]; close(): Promise<void> }> {
  const heads: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createTcpServer((client) => {
    sockets.add(client);
    client.once('close', () => sockets.delete(client));
    client.on('error', () => client.destroy());
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end < 0) return;
      client.off('data', onData);
      heads.push(buffered.subarray(0, end).toString('latin1'));
      const upstream = connect(upstreamPort, '127.0.0.1');
      sockets.add(upstream);
      upstream.once('close', () => sockets.delete(upstream));
      upstream.on('error', () => client.destroy());
      upstream.write(buffered);
      client.pipe(upstream);
      upstream.pipe(client);
    };
    client.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    heads,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Every text in a value, and each string's base64 reading too: a history's
 * payloads are base64 JSON, so a secret inside one is only seen decoded.
 */
function everyText(value: unknown, out: string[] = []): string[] {
  if (typeof value === 'string') {
    out.push(value, Buffer.from(value, 'base64').toString('utf8'));
  } else if (value instanceof Uint8Array) {
    out.push(Buffer.from(value).toString('utf8'));
  } else if (value && typeof value === 'object') {
    for (const v of Object.values(value)) everyText(v, out);
  }
  return out;
}

const authorizationIn = (head: string) => /^proxy-authorization: (.*)$/im.exec(head)?.[1]?.trim();

describe('proxy credentials end to end', () => {
  const logs: string[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'ep-creds-'));
  const external = { username: 'vendor-user', password: SENTINEL_EXTERNAL };
  let cp: ControlPlane;
  let vendor: ForwardProxy;
  let sniffer: Awaited<ReturnType<typeof startSniffer>>;
  let target: Awaited<ReturnType<typeof startTarget>>;
  let api: CliProcess;
  let apiUrl = '';
  let gateway: { cli: CliProcess; url: string };
  let core: CoreV1Api;

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test, { timeoutMs: 90_000 });
  const healthReason = (p: Proxy) => proxyCondition(p, 'Healthy')?.reason;
  const putSecret = async (name: string, data: Record<string, string>) => {
    const body = { metadata: { name, namespace: cp.namespace, labels: LABELLED }, stringData: data };
    await core.deleteNamespacedSecret({ namespace: cp.namespace, name }).catch(() => undefined);
    await eventually(`Secret ${name} made`, async () => {
      try {
        await core.createNamespacedSecret({ namespace: cp.namespace, body });
        return true;
      } catch {
        return undefined;
      }
    });
  };
  const lease = async (token: string, selector: Record<string, string>) => {
    const res = await fetch(`${apiUrl}/v1/leases`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ selector, ttlSeconds: 60 }),
    });
    return { status: res.status, text: await res.text() };
  };

  beforeAll(async () => {
    cp = await startControlPlane({
      prefix: 'creds',
      logger: pino({ level: 'debug' }, { write: (line: string) => void logs.push(line) }),
    });
    core = cp.kc.makeApiClient(CoreV1Api);
    vendor = await startForwardProxy({
      host: '127.0.0.1',
      port: 0,
      credentialsSha256: credentialsDigest(external),
    });
    sniffer = await startSniffer(vendor.port);
    target = await startTarget('reached with credentials');
    const tenantsFile = join(dir, 'tenants.yaml');
    writeFileSync(
      tenantsFile,
      [
        'tenants:',
        `  - name: all`,
        `    tokenSha256: ${sha256(TOKEN_ALL)}`,
        `  - name: elsewhere`,
        `    tokenSha256: ${sha256(TOKEN_ELSEWHERE)}`,
        '    selector: {geo: nowhere}',
        '',
      ].join('\n'),
    );
    api = startCli([
      'api',
      '--discovery-addr',
      '127.0.0.1:0',
      ...testServerArgs(),
      '--watch-namespaces',
      cp.namespace,
      '--tenants-file',
      tenantsFile,
      '--log-level',
      'debug',
    ]);
    apiUrl = await leaseApiUrl(api, 150_000);
    gateway = await startGatewayCli(cp.namespace, ['--tenants-file', tenantsFile, '--log-level', 'debug']);
  }, 240_000);

  afterAll(async () => {
    for (const name of ['vendor', 'managed'])
      await deleteProxy(cp.api, cp.namespace, name).catch(() => undefined);
    await waitForProxyGone(cp.api, cp.namespace, 'managed').catch(() => undefined);
    await gateway?.cli.stop();
    await api?.stop();
    await cp?.close();
    await sniffer?.close();
    await vendor?.close();
    await target?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('an External Proxy with credentialsSecretRef: Ready; AuthFailed with a wrong password; CredentialsUnavailable naming a missing Secret', async () => {
    await putSecret('vendor-auth', external);
    await createProxy(cp.api, cp.namespace, 'vendor', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: sniffer.port, credentialsSecretRef: { name: 'vendor-auth' } },
      attributes: { kind: 'vendor' },
      healthCheck: {
        probeURL: `http://127.0.0.1:${target.port}/`,
        intervalSeconds: 1,
        timeoutSeconds: 2,
        expectedStatusCodes: [200],
      },
    });
    await waitFor('vendor', 'Ready', (p) => proxyCondition(p, 'Ready')?.status === 'True');
    // The prober sent the Secret's pair.
    expect(sniffer.heads.map(authorizationIn)).toContain(proxyAuthorization(external));

    await putSecret('vendor-auth', { username: 'vendor-user', password: 'not-the-password' });
    const refused = await waitFor('vendor', 'Unhealthy AuthFailed', (p) => healthReason(p) === 'AuthFailed');
    expect(proxyCondition(refused, 'Healthy')?.message).toMatch(/refused the Proxy's credentials \(407/);

    await core.deleteNamespacedSecret({ namespace: cp.namespace, name: 'vendor-auth' });
    const missing = await waitFor(
      'vendor',
      'Unhealthy CredentialsUnavailable',
      (p) => healthReason(p) === 'CredentialsUnavailable',
    );
    expect(proxyCondition(missing, 'Healthy')?.message).toBe(
      `Secret ${cp.namespace}/vendor-auth not found (it must exist and carry the label crawl.example.com/proxy-credentials: "true")`,
    );

    await putSecret('vendor-auth', external);
    await waitFor('vendor', 'Ready again', (p) => proxyCondition(p, 'Ready')?.status === 'True');
  });

  it('a Managed local Proxy asks for its credentials and is Ready: the prober authenticates', async () => {
    // Made ahead, so its password is a sentinel: the bridge uses a labelled Secret it finds.
    await putSecret('managed-proxy-auth', { username: 'managed-user', password: SENTINEL_MANAGED });
    await createProxy(cp.api, cp.namespace, 'managed', {
      mode: 'Managed',
      provider: 'local',
      port: 3128,
      attributes: { kind: 'managed' },
      healthCheck: {
        probeURL: `http://127.0.0.1:${target.port}/`,
        intervalSeconds: 1,
        timeoutSeconds: 2,
        expectedStatusCodes: [200],
      },
    });
    const ready = await waitFor('managed', 'Ready', (p) => proxyCondition(p, 'Ready')?.status === 'True');
    const ip = ready.status!.ip!;
    expect(await getThroughProxy(ip, 3128, target.port)).toMatchObject({ status: 407 });
    const managed = proxyAuthorization({ username: 'managed-user', password: SENTINEL_MANAGED });
    expect(await getThroughConnect(ip, 3128, target.port, 5_000, '127.0.0.1', managed)).toBe(
      'reached with credentials',
    );
  });

  it("a lease carries proxyURL with the proxy's credentials to a tenant allowed it; a tenant scoped elsewhere gets no lease of it", async () => {
    const granted = await eventually('a lease of the vendor proxy', async () => {
      const r = await lease(TOKEN_ALL, { kind: 'vendor' });
      return r.status === 201
        ? (JSON.parse(r.text) as { proxy: { id: string }; proxyURL?: string })
        : undefined;
    });
    expect(granted.proxyURL).toBe(`http://vendor-user:${SENTINEL_EXTERNAL}@127.0.0.1:${sniffer.port}`);
    const managed = await eventually('a lease of the managed proxy', async () => {
      const r = await lease(TOKEN_ALL, { kind: 'managed' });
      return r.status === 201 ? (JSON.parse(r.text) as { proxyURL?: string }) : undefined;
    });
    // The URL works as it is given.
    const through = fromProxyUrl(managed.proxyURL!);
    expect(
      await getThroughConnect(
        through.host,
        through.port,
        target.port,
        5_000,
        '127.0.0.1',
        through.proxyAuthorization,
      ),
    ).toBe('reached with credentials');

    const other = await lease(TOKEN_ELSEWHERE, { kind: 'vendor' });
    expect(other.status).toBe(409);
    expect(other.text).not.toContain(SENTINEL_EXTERNAL);
    expect(other.text).not.toContain('proxyURL');
  });

  it("the gateway sends the proxy's own credentials upstream, never the crawler's token", async () => {
    const before = sniffer.heads.length;
    const tunnel = await curlThrough(
      gateway.url,
      'kind-vendor',
      TOKEN_ALL,
      `http://127.0.0.1:${target.port}/`,
      {
        tunnel: true,
      },
    );
    expect(tunnel).toMatchObject({ status: 200, body: 'reached with credentials' });
    const plain = await curlThrough(
      gateway.url,
      'kind-vendor',
      TOKEN_ALL,
      `http://127.0.0.1:${target.port}/`,
    );
    expect(plain).toMatchObject({ status: 200, body: 'reached with credentials' });
    const fromGateway = sniffer.heads.slice(before).filter((h) => !/egress-proxies-health/.test(h));
    expect(fromGateway.length).toBeGreaterThanOrEqual(2);
    for (const head of fromGateway) {
      expect(authorizationIn(head)).toBe(proxyAuthorization(external));
      expect(head).not.toContain(TOKEN_ALL);
      expect(head).not.toContain(Buffer.from(`kind-vendor:${TOKEN_ALL}`).toString('base64'));
    }
  });

  it('neither password is in any log, Temporal history, /metrics, Event or Proxy status', async () => {
    const gatewayMetrics = /"metrics":"(http:\/\/127\.0\.0\.1:\d+)[^"]*"[^\n]*gateway listening/.exec(
      gateway.cli.output(),
    )?.[1];
    const pages = [await (await fetch(`${apiUrl}/metrics`)).text()];
    if (gatewayMetrics) pages.push(await (await fetch(`${gatewayMetrics}/metrics`)).text());
    const histories: string[] = [];
    for (const name of ['vendor', 'managed']) {
      const proxy = await getProxy(cp.api, cp.namespace, name);
      const handle = cp.client.workflow.getHandle(
        proxyWorkflowId({ namespace: cp.namespace, name, uid: proxy.metadata.uid! }),
      );
      histories.push(everyText(await handle.fetchHistory()).join('\n'));
      histories.push(JSON.stringify(proxy.status));
    }
    const events = JSON.stringify(
      await cp.kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: cp.namespace }),
    );
    const places: Record<string, string> = {
      'worker and bridge logs': logs.join(''),
      'api log': api.output(),
      'gateway log': gateway.cli.output(),
      '/metrics': pages.join('\n'),
      'histories and statuses': histories.join('\n'),
      Events: events,
    };
    // The places are not empty: a sentinel missing from nothing proves nothing.
    expect(places['worker and bridge logs']).toContain('managed');
    expect(places['histories and statuses']).toContain('managed-proxy-auth');
    for (const [where, text] of Object.entries(places)) {
      for (const sentinel of [SENTINEL_EXTERNAL, SENTINEL_MANAGED]) {
        expect(text.includes(sentinel), `${sentinel.slice(0, 12)}... in ${where}`).toBe(false);
      }
    }
  });
});
