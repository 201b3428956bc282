/**
 * The `kubernetes` provider on a real node (issue 29): a kubelet 1.36 on
 * Debian's containerd and runc, kube-scheduler, a CNI bridge, and a Squid
 * image built here from Debian's squid package and imported into the node
 * (tests/helpers/kube-node.ts). Nobody plays the kubelet: the pod is
 * scheduled, its container runs the command and config the provider
 * writes, the readiness and the pod IP the provider reads are the
 * kubelet's, and the real `api` process's prober sends its CONNECT through
 * the pod IP to an HTTPS target on the node's gateway (the host side of the
 * pod network).
 *
 * The provider reaches the node's cluster through its `kubeconfig:`
 * setting; the Proxies live on the suite's apiserver, as they would in a
 * management cluster.
 *
 * Also on the real node, each failure the kubelet or the scheduler reports
 * ends in the contract's class with their reason, not in an endless
 * Provisioning: an image the registry does not have (a registry of the
 * test's own on the loopback), a container that crashes (an image without
 * squid), one killed for its memory limit, requests no node can hold, and a
 * registry that cannot be reached (Transient).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { instanceNameFromUid } from '../../providers/names.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { generatedCredentials, proxyCondition, waitForProxy, waitForProxyGone } from '../helpers/kube.js';
import { startGatewayCli } from './gateway-helpers.js';
import { createProxy, deleteProxy, editProxySpec } from '../helpers/kube-objects.js';
import { startNodeCluster, type NodeCluster } from '../../local-servers/kube-node.js';
import { connectThrough } from '../helpers/net.js';
import { selfSignedCert, startProbeTarget, type ProbeTarget } from '../helpers/prober-fixtures.js';
import { eventually } from '../helpers/temporal.js';

const POD_NAMESPACE = 'proxies';

/** Host-wide tunables a kubelet sets at start; a test node must leave the machine's as they were. */
function hostTunables(): Record<string, string> {
  const paths = ['vm/overcommit_memory', 'vm/panic_on_oom', 'kernel/panic', 'kernel/panic_on_oops'];
  return Object.fromEntries(
    paths
      .filter((p) => existsSync(`/proc/sys/${p}`))
      .map((p) => [p, readFileSync(`/proc/sys/${p}`, 'utf8').trim()]),
  );
}
const READY_DEADLINE_MS = 120_000;

/** A registry that has no image at all: every manifest is MANIFEST_UNKNOWN, as a registry answers for a tag never pushed. */
async function startEmptyRegistry(): Promise<{ host: string; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    if (req.url === '/v2/' || req.url === '/v2') {
      res.writeHead(200, {
        'content-type': 'application/json',
        'docker-distribution-api-version': 'registry/2.0',
      });
      res.end('{}');
      return;
    }
    res.writeHead(404, {
      'content-type': 'application/json',
      'docker-distribution-api-version': 'registry/2.0',
    });
    res.end(
      JSON.stringify({
        errors: [{ code: 'MANIFEST_UNKNOWN', message: 'manifest unknown', detail: req.url }],
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    host: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe.concurrent('kubernetes provider on a real node', () => {
  let cluster: NodeCluster;
  let target: ProbeTarget;
  let ca: string;
  let registry: Awaited<ReturnType<typeof startEmptyRegistry>>;
  let cp: ControlPlane;
  let api: CliProcess;
  let apiUrl: string;
  let gateway: { cli: CliProcess; url: string } | undefined;
  let gatewayAddress: { host: string; port: number };
  let caDir: string | undefined;
  let tunablesBefore: Record<string, string>;

  beforeAll(async () => {
    tunablesBefore = hostTunables();
    cluster = await startNodeCluster();
    const { node } = cluster;
    console.log(
      `issue 29: node ${node.name} Ready in ${cluster.seconds.node.toFixed(1)} s (images imported in ${node.importSeconds.toFixed(1)} s), ` +
        `its apiserver in ${cluster.seconds.apiserver.toFixed(1)} s; tools ${cluster.seconds.binaries.toFixed(1)} s, images ${cluster.seconds.images.toFixed(1)} s (0 when cached); pod network ${node.podCidr}`,
    );
    await cluster.core.createNamespace({ body: { metadata: { name: POD_NAMESPACE } } });
    const cert = await selfSignedCert(node.gateway);
    ca = cert.cert;
    caDir = mkdtempSync(join(tmpdir(), 'ep-node-ca-'));
    writeFileSync(join(caDir, 'ca.pem'), ca);
    // On the gateway: the host side of the pod network, the one host address a pod reaches.
    target = await startProbeTarget({ tls: cert, host: node.gateway });
    registry = await startEmptyRegistry();
    const entry = (name: string, extra: string) =>
      `  - name: ${name}\n    type: kubernetes\n    kubernetes:\n      kubeconfig: ${cluster.kubeconfigPath}\n      namespace: ${POD_NAMESPACE}\n      operationTimeoutSeconds: 10\n${extra}`;
    cp = await startControlPlane({
      prefix: 'kube-node',
      providersYaml: () =>
        'providers:\n' +
        // Its pods may reach the probe target on the node's gateway, and nothing else internal.
        entry(
          'k8s-node',
          `      image: ${node.images.squid}\n      egress: { allowCidrs: [${node.gateway}/32] }\n`,
        ) +
        entry('k8s-absent', `      image: ${registry.host}/egress-proxies/squid:never-pushed\n`) +
        // A registry nobody listens for (port 1 on the loopback): it may come back.
        entry('k8s-unreachable', '      image: 127.0.0.1:1/egress-proxies/squid:any\n') +
        entry('k8s-crash', `      image: ${node.images.nosquid}\n`) +
        // Below what Squid needs to start (it peaks near 8 MiB): the kernel kills it at start, every time.
        entry(
          'k8s-oom',
          `      image: ${node.images.squid}\n      resources: { memoryLimit: 5Mi, memoryRequest: 5Mi }\n`,
        ) +
        entry('k8s-huge', `      image: ${node.images.squid}\n      resources: { cpuRequest: '64' }\n`),
    });
    api = startCli(
      ['api', '--discovery-addr', '127.0.0.1:0', ...testServerArgs(), '--watch-namespaces', cp.namespace],
      // The target's certificate is its own CA: trusted by the api's prober alone.
      { env: { NODE_EXTRA_CA_CERTS: join(caDir, 'ca.pem') } },
    );
    apiUrl = await leaseApiUrl(api, 150_000);
    // The probe target sits on the node's gateway, a private address: allowed to this gateway alone.
    gateway = await startGatewayCli(cp.namespace, ['--egress-allow-cidrs', `${node.gateway}/32`]);
    const { hostname, port } = new URL(gateway.url);
    gatewayAddress = { host: hostname, port: Number(port) };
  }, 600_000);

  afterAll(async () => {
    await gateway?.cli.stop(30_000).catch(() => undefined);
    await api?.stop(30_000).catch(() => undefined);
    await cp?.close();
    await target?.close();
    await registry?.close();
    await cluster?.stop();
    if (caDir) rmSync(caDir, { recursive: true, force: true });
  });

  const proxySpec = (provider: string, port = 3128) =>
    ({
      mode: 'Managed',
      provider,
      placement: {},
      port,
      attributes: { purpose: `node-${provider}` },
      healthCheck: { probeURL: target.url, intervalSeconds: 2, timeoutSeconds: 5 },
      drainTimeoutSeconds: 2,
    }) as never;

  const podOf = (uid: string) =>
    cluster.core.readNamespacedPod({ namespace: POD_NAMESPACE, name: instanceNameFromUid(uid) });

  it('a Squid pod scheduled on the node goes Ready, serves CONNECT and a lease, is replaced, and is deleted', async () => {
    const { node, core } = cluster;
    // The kubelet wrote its tunables into its own mount namespace, not the machine's.
    expect(hostTunables()).toEqual(tunablesBefore);
    // The node's reaper waits for this process to die, whatever kills it.
    const record = JSON.parse(readFileSync(join(node.logDir, 'node.json'), 'utf8')) as { reaperPid?: number };
    expect(record.reaperPid).toBeGreaterThan(0);
    expect(readFileSync(`/proc/${record.reaperPid}/cmdline`, 'utf8')).toContain('node-reaper');
    const started = Date.now();
    const created = await createProxy(cp.api, cp.namespace, 'squid', proxySpec('k8s-node'));
    const uid = created.metadata.uid!;
    const ready = await waitForProxy(
      cp.api,
      cp.namespace,
      'squid',
      'Ready',
      (p) => proxyCondition(p, 'Ready')?.status === 'True',
      { timeoutMs: READY_DEADLINE_MS, intervalMs: 250 },
    );
    const readySeconds = (Date.now() - started) / 1000;

    // Everything the provider read came from the kubelet: scheduled here, Running, ready, its IP on the pod network.
    const pod = await podOf(uid);
    expect(pod.spec?.nodeName).toBe(node.name);
    expect(pod.status?.phase).toBe('Running');
    expect(pod.status?.containerStatuses?.[0]?.ready).toBe(true);
    expect(pod.status?.containerStatuses?.[0]?.imageID).toMatch(/sha256:/);
    const ip = pod.status!.podIP!;
    expect(ready.status?.ip).toBe(ip);
    expect(ip.startsWith(node.gateway.replace(/\.1$/, '.'))).toBe(true);
    // The prober's request reached the target through the pod (Squid rewrites nothing in the tunnel).
    expect(target.requests.length).toBeGreaterThan(0);
    // Squid asks for the Proxy's credentials (its generated Secret): 407 without, 200 with.
    const { authorization, credentials } = await generatedCredentials(cp.kc, cp.namespace, 'squid');
    const bare = await connectThrough({ host: ip, port: 3128 }, new URL(target.url), ca);
    expect(bare).toEqual({ connect: 407, get: 0 });
    const wrong = `Basic ${Buffer.from(`${credentials.username}:not-it`).toString('base64')}`;
    expect(await connectThrough({ host: ip, port: 3128 }, new URL(target.url), ca, wrong)).toEqual({
      connect: 407,
      get: 0,
    });
    const through = await connectThrough({ host: ip, port: 3128 }, new URL(target.url), ca, authorization);
    console.log(
      `issue 29: Proxy Ready on the node ${readySeconds.toFixed(1)} s after it was created; pod ${ip}; CONNECT ${through.connect}, GET through the tunnel ${through.get} (without credentials ${bare.connect})`,
    );
    expect(through).toEqual({ connect: 200, get: 204 });
    // The egress policy in the pod's Squid: the pod network (the pod's own
    // address, on the probe target's port) is a denied range, refused 403, credentials or not.
    const inward = await connectThrough(
      { host: ip, port: 3128 },
      new URL(`https://${ip}:${new URL(target.url).port}/`),
      ca,
      authorization,
    );
    expect(inward).toEqual({ connect: 403, get: 0 });
    // Through the gateway (a crawler's password, not the proxy's): it reaches the target, so the
    // gateway sent the Proxy's own credentials upstream (Squid takes no other).
    const crawler = `Basic ${Buffer.from('session-node:crawler-password').toString('base64')}`;
    expect(await connectThrough(gatewayAddress, new URL(target.url), ca, crawler)).toEqual({
      connect: 200,
      get: 204,
    });

    const granted = await fetch(`${apiUrl}/v1/leases`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ selector: { purpose: 'node-k8s-node' } }),
    });
    const lease = (await granted.json()) as {
      leaseID: string;
      proxy: { id: string; address?: string };
      proxyURL?: string;
    };
    expect(granted.status).toBe(201);
    expect(lease.proxy.id).toBe(`${cp.namespace}/squid`);
    // The lease carries the proxy with its credentials, for a crawler that goes direct.
    expect(lease.proxyURL).toBe(`http://${credentials.username}:${credentials.password}@${ip}:3128`);
    expect((await fetch(`${apiUrl}/v1/leases/${lease.leaseID}`, { method: 'DELETE' })).status).toBeLessThan(
      300,
    );

    // A pod deleted by hand (kubectl delete pod): noticed, and a new one runs under the same name.
    const firstPodUid = pod.metadata!.uid!;
    await core.deleteNamespacedPod({ namespace: POD_NAMESPACE, name: pod.metadata!.name! });
    const recreated = await eventually(
      'a new pod Running and the Proxy Ready on it',
      async () => {
        const p = await podOf(uid).catch(() => undefined);
        if (!p || p.metadata?.uid === firstPodUid || p.status?.phase !== 'Running') return undefined;
        const proxy = await cp.api.get(cp.namespace, 'squid');
        return proxyCondition(proxy!, 'Ready')?.status === 'True' && proxy?.status?.ip === p.status.podIP
          ? p
          : undefined;
      },
      { timeoutMs: READY_DEADLINE_MS, intervalMs: 250 },
    );
    expect(recreated.spec?.nodeName).toBe(node.name);

    // A spec edit replaces the pod: Squid listens on the new port.
    const hashBefore = (await cp.api.get(cp.namespace, 'squid'))!.status?.specHash;
    await editProxySpec(cp.api, cp.namespace, 'squid', (spec) => ({ ...spec, port: 3129 }));
    const replaced = await waitForProxy(
      cp.api,
      cp.namespace,
      'squid',
      'Ready on the replacement',
      (p) =>
        p.status?.specHash !== undefined &&
        p.status.specHash !== hashBefore &&
        Boolean(p.status.ip) &&
        proxyCondition(p, 'Ready')?.status === 'True',
      { timeoutMs: READY_DEADLINE_MS, intervalMs: 250 },
    );
    const replacement = await podOf(uid);
    expect(replacement.spec?.containers[0]?.ports?.[0]?.containerPort).toBe(3129);
    expect(replacement.status?.podIP).toBe(replaced.status?.ip);
    expect(
      (
        await connectThrough(
          { host: replaced.status!.ip!, port: 3129 },
          new URL(target.url),
          ca,
          authorization,
        )
      ).connect,
    ).toBe(200);

    // Deleted: the pod goes, and the provider lists nothing of this Proxy.
    await deleteProxy(cp.api, cp.namespace, 'squid');
    await waitForProxyGone(cp.api, cp.namespace, 'squid', { timeoutMs: 60_000 });
    await expect(podOf(uid)).rejects.toMatchObject({ code: 404 });
    expect(await cp.instancesOf(uid, 'k8s-node')).toEqual([]);
  });

  /** Waits for the Proxy's Provisioned condition to carry this reason, and returns its message. */
  const failureOf = async (name: string, reason: string): Promise<string> => {
    const p = await waitForProxy(
      cp.api,
      cp.namespace,
      name,
      `Provisioned=False (${reason})`,
      (x) => proxyCondition(x, 'Provisioned')?.reason === reason,
      { timeoutMs: READY_DEADLINE_MS, intervalMs: 250 },
    );
    return proxyCondition(p, 'Provisioned')?.message ?? '';
  };

  it('an image the registry does not have is a PermanentError naming it', async () => {
    await createProxy(cp.api, cp.namespace, 'absent', proxySpec('k8s-absent'));
    const message = await failureOf('absent', 'PermanentError');
    expect(message).toMatch(/ErrImagePull|ImagePullBackOff/);
    expect(message).toContain('never-pushed');
    // The kubelet did ask the registry (containerd resolving the tag), and was told no.
    expect(registry.requests.some((r) => r.includes('/manifests/never-pushed'))).toBe(true);
  });

  it('a registry that cannot be reached is a TransientError with containerd’s error', async () => {
    await createProxy(cp.api, cp.namespace, 'unreachable', proxySpec('k8s-unreachable'));
    const message = await failureOf('unreachable', 'TransientError');
    expect(message).toMatch(/ErrImagePull|ImagePullBackOff/);
    // containerd's own words (the quote is cut at 300 characters, before its `connection refused`).
    expect(message).toContain('failed to resolve reference "127.0.0.1:1/egress-proxies/squid:any"');
  });

  it('a container that crashes on start is a PermanentError with its exit, not an endless Provisioning', async () => {
    await createProxy(cp.api, cp.namespace, 'crash', proxySpec('k8s-crash'));
    const message = await failureOf('crash', 'PermanentError');
    expect(message).toContain('keeps crashing');
    // sh: squid: not found.
    expect(message).toContain('exited 127');
  });

  it('a container killed for its memory limit is a PermanentError naming the limit', async () => {
    await createProxy(cp.api, cp.namespace, 'oom', proxySpec('k8s-oom'));
    const message = await failureOf('oom', 'PermanentError');
    // OOMKilled; or Error with exit 137 when containerd misses the OOM event of a kill right after start
    // (containerd#8180); or RunContainerError when the kill lands between the task's create and its start.
    expect(message).toMatch(/OOMKilled|exited 137 .*OOM killer|cannot start a stopped process.*OOM killer/);
    expect(message).toContain('5Mi');
    expect(message).toContain('memoryLimit');
  });

  it('requests no node can hold are QuotaExceeded with the scheduler’s reason', async () => {
    await createProxy(cp.api, cp.namespace, 'huge', proxySpec('k8s-huge'));
    const message = await failureOf('huge', 'QuotaExceeded');
    expect(message).toContain('Insufficient cpu');
  });
});
