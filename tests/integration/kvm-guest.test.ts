/**
 * A real guest on the `kvm` provider (issue 28): the Debian image built here
 * by infra/scripts/build-kvm-guest.sh, served over HTTP and configured the
 * way users configure one (an `images:` entry with its sha256), booted by the
 * real libvirtd reached through the real sshd, on a bridge of the test's own
 * with dnsmasq (tests/helpers/guest-net.ts). A Proxy whose cloud-init comes
 * from a Secret and configures Squid goes Ready with the guest's real
 * address: the real `api` process's prober sends its CONNECT through the
 * guest to an HTTPS target inside the test's namespace. Squid asks for the
 * Proxy's credentials (issue 51): the provider's user-data writes their
 * htpasswd (root:proxy, 0640) where the Secret's Squid config reads it, so a
 * CONNECT without them is answered 407, with them 200, and the prober,
 * which sends them, finds the Proxy Ready. A lease is granted; a
 * spec edit replaces the VM; with the guest agent stopped, the address comes
 * from the bridge's DHCP leases (and does not, with no lease file
 * configured); delete removes the domain and every volume of it; GC lists
 * nothing of this run's installation.
 *
 * `domainType: kvm` when KVM here runs the firmware the domain boots (see
 * kvmRunsFirmware), software emulation otherwise, with a longer deadline.
 * One guest runs at a time; the replacement's guest serves the DHCP phase.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGcActivities } from '../../activities/gc-activities.js';
import { kvmConfigSchema } from '../../providers/kvm/config.js';
import { formatProviderId } from '../../providers/kvm/ids.js';
import { createKvmProvider } from '../../providers/kvm/provider.js';
import { VM_HTPASSWD_PATH } from '../../providers/shared/cloud-init-credentials.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { Provider } from '../../providers/types.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { createGuestNetwork, type GuestNetwork } from '../helpers/guest-net.js';
import { generatedCredentials, proxyCondition, waitForProxy, waitForProxyGone } from '../helpers/kube.js';
import { connectThrough } from '../helpers/net.js';
import { createProxy, deleteProxy, editProxySpec, getProxy } from '../helpers/kube-objects.js';
import { proxyAuthorization } from '../../credentials/proxy-credentials.js';
import {
  createPool,
  domainMacs,
  guestRun,
  kvmRunsFirmware,
  serveFile,
  tempRoot,
  virsh,
  type TestPool,
} from '../helpers/libvirt.js';
import { ensureLibvirt, guestImage, startSshd, type TestSshd } from '../../local-servers/libvirt.js';
import { eventually } from '../helpers/temporal.js';

const HOST = 'lab';
const PROVIDER = 'kvm-lab';

/**
 * Squid as the Proxy's user-data configures it: only the test's link may use
 * it, and only with the Proxy's credentials (checked against the htpasswd the
 * provider writes; docs/providers/kvm.md's template); CONNECT to any port.
 */
function userData(version: string, clients: string): string {
  return `#cloud-config
write_files:
  - path: /etc/squid/squid.conf
    content: |
      # egress-proxies kvm e2e, ${version}
      http_port 3128
      auth_param basic program /usr/lib/squid/basic_ncsa_auth ${VM_HTPASSWD_PATH}
      auth_param basic realm egress-proxies
      auth_param basic casesensitive on
      acl egress_clients src ${clients}
      acl authenticated proxy_auth REQUIRED
      http_access deny !egress_clients
      http_access allow authenticated
      http_access deny all
      via off
      forwarded_for delete
      cache deny all
      visible_hostname egress-proxy
runcmd:
  # The image leaves Squid off until its configuration is here.
  - systemctl enable --now squid
`;
}

describe('kvm: a real guest boots, serves CONNECT, is replaced and deleted', () => {
  let root: string;
  let sshd: TestSshd;
  let pool: TestPool;
  let net: GuestNetwork;
  let image: { path: string; sha256: string; seconds: number };
  let files: Awaited<ReturnType<typeof serveFile>>;
  let domainType: 'kvm' | 'qemu';
  let cp: ControlPlane;
  let provider: Provider;
  let api: CliProcess;
  let apiUrl: string;
  const installation = `kvm-guest-${randomBytes(3).toString('hex')}`;
  const tag = `kvm-e2e-${randomBytes(3).toString('hex')}`;
  /** Under software emulation a boot takes minutes on a busy 2-core machine. */
  let bootDeadlineMs: number;

  const config = (dhcpLeasesFile: string | undefined) =>
    kvmConfigSchema.parse({
      sshKeyFile: sshd.keyFile,
      knownHostsFile: sshd.knownHostsFile,
      diskSizeGb: 2,
      images: { 'debian-12': { url: files.url, sha256: image.sha256, format: 'qcow2', firmware: 'uefi' } },
      machineTypes: { small: { vcpus: 1, memoryMiB: 512 } },
      hosts: [
        {
          name: HOST,
          address: sshd.address,
          user: 'root',
          pool: pool.name,
          bridge: net.bridge,
          domainType,
          ...(dhcpLeasesFile === undefined ? {} : { dhcpLeasesFile }),
        },
      ],
    });

  beforeAll(async () => {
    await ensureLibvirt();
    image = await guestImage();
    console.log(`issue 28: guest image ready in ${image.seconds.toFixed(1)} s (${image.path})`);
    root = await tempRoot();
    sshd = await startSshd(root);
    pool = await createPool(root);
    net = await createGuestNetwork(root);
    files = await serveFile(image.path);
    const kvm = await kvmRunsFirmware(root);
    domainType = kvm.usable ? 'kvm' : 'qemu';
    bootDeadlineMs = kvm.usable ? 180_000 : 480_000;
    console.log(`issue 28: domainType ${domainType} (${kvm.why})`);
    cp = await startControlPlane({
      prefix: 'kvm-guest',
      installation,
      // One SSH round trip set per poll: every 2 s is plenty for a boot of a minute or more.
      timing: { provisioningPollMs: 2_000, driftPollMs: 5_000, deletionPollMs: 1_000 },
    });
    provider = createKvmProvider({ name: PROVIDER, config: config(net.leasesFile), logger: cp.logger });
    cp.registry.add(provider);
    api = startCli(
      ['api', '--discovery-addr', '127.0.0.1:0', ...testServerArgs(), '--watch-namespaces', cp.namespace],
      // The probe target's certificate is its own CA: trusted by this process alone.
      { env: { NODE_EXTRA_CA_CERTS: net.caFile } },
    );
    apiUrl = await leaseApiUrl(api, 150_000);
    const core = cp.kc.makeApiClient(CoreV1Api);
    // Squid lets in only the test's link into the namespace (the prober's and this test's source).
    for (const v of ['v1', 'v2'])
      await core.createNamespacedSecret({
        namespace: cp.namespace,
        body: {
          metadata: { name: `squid-${v}`, labels: { 'crawl.example.com/cloud-init': 'true' } },
          stringData: { userdata: userData(v, '198.19.0.0/16') },
        },
      });
  }, 1_900_000);

  afterAll(async () => {
    await api?.stop(30_000).catch(() => undefined);
    await cp?.close();
    await pool?.destroy();
    await net?.destroy();
    await files?.close();
    await sshd?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it('Ready with the guest address, CONNECT through it, a lease, a replacement, DHCP leases, delete, GC clean', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'kvm-e2e', {
      mode: 'Managed',
      provider: PROVIDER,
      placement: { zone: HOST, machineType: 'small', image: 'debian-12' },
      port: 3128,
      cloudInit: { secretRef: { name: 'squid-v1' } },
      attributes: { purpose: tag },
      healthCheck: { probeURL: net.targetUrl, intervalSeconds: 2, timeoutSeconds: 5 },
      drainTimeoutSeconds: 5,
    } as never);
    const domain = instanceNameFromUid(created.metadata.uid!);
    const id = formatProviderId(HOST, domain);
    const started = Date.now();
    const running = await waitForProxy(
      cp.api,
      cp.namespace,
      'kvm-e2e',
      'Running with an IP',
      (p) => Boolean(p.status?.ip),
      {
        timeoutMs: bootDeadlineMs,
        intervalMs: 1_000,
      },
    );
    const bootSeconds = (Date.now() - started) / 1000;
    const ready = await waitForProxy(
      cp.api,
      cp.namespace,
      'kvm-e2e',
      'Ready',
      (p) => proxyCondition(p, 'Ready')?.status === 'True',
      { timeoutMs: bootDeadlineMs, intervalMs: 1_000 },
    );
    const readySeconds = (Date.now() - started) / 1000;
    const ip = running.status!.ip!;
    expect(running.status?.providerID).toBe(id);
    expect(ip.startsWith(net.gateway.replace(/\.1$/, '.'))).toBe(true);
    expect(ready.status?.ip).toBe(ip);
    // The address is the guest's own: the agent reports it and dnsmasq leased it to the domain's NIC.
    const [mac] = await domainMacs(domain);
    expect(await net.leaseOf(mac!)).toBe(ip);
    expect(await virsh('domifaddr', domain, '--source', 'agent')).toContain(ip);
    // Squid runs the Secret's config: Debian's default would refuse CONNECT to a port that is not 443.
    // It asks for the Proxy's credentials (the bridge's generated Secret): 407 without, 200 with.
    const { authorization, credentials } = await generatedCredentials(cp.kc, cp.namespace, 'kvm-e2e');
    const target = new URL(net.targetUrl);
    const anonymous = await connectThrough({ host: ip, port: 3128 }, target, net.ca);
    const through = await connectThrough({ host: ip, port: 3128 }, target, net.ca, authorization);
    const wrong = await connectThrough(
      { host: ip, port: 3128 },
      target,
      net.ca,
      proxyAuthorization({ ...credentials, password: `${credentials.password}x` }),
    );
    console.log(
      `issue 28: ${domainType} guest Running with ${ip} ${bootSeconds.toFixed(1)} s after the Proxy was created, Ready after ${readySeconds.toFixed(1)} s; CONNECT without credentials ${anonymous.connect}, with a wrong password ${wrong.connect}, with the Proxy's ${through.connect}, GET through the tunnel ${through.get}`,
    );
    expect(anonymous).toEqual({ connect: 407, get: 0 });
    expect(wrong).toEqual({ connect: 407, get: 0 });
    expect(through).toEqual({ connect: 200, get: 204 });
    // The htpasswd as the provider wrote it: Squid's helpers (group proxy) read it, nobody else.
    expect(await guestRun(domain, ['/usr/bin/stat', '-c', '%U:%G %a', VM_HTPASSWD_PATH])).toBe(
      'root:proxy 640\n',
    );

    // A lease on it.
    const granted = await fetch(`${apiUrl}/v1/leases`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ selector: { purpose: tag } }),
    });
    const lease = (await granted.json()) as { leaseID: string; proxy: { id: string } };
    expect(granted.status).toBe(201);
    expect(lease.proxy.id).toBe(`${cp.namespace}/kvm-e2e`);
    expect((await fetch(`${apiUrl}/v1/leases/${lease.leaseID}`, { method: 'DELETE' })).status).toBeLessThan(
      300,
    );

    // A spec edit replaces the VM: same name (from the UID), a new domain with a new NIC.
    const hashBefore = ready.status?.specHash;
    const replacedAt = Date.now();
    await editProxySpec(cp.api, cp.namespace, 'kvm-e2e', (spec) => ({
      ...spec,
      cloudInit: { secretRef: { name: 'squid-v2' } },
    }));
    const replaced = await waitForProxy(
      cp.api,
      cp.namespace,
      'kvm-e2e',
      'Ready on the replacement',
      (p) =>
        p.status?.specHash !== undefined &&
        p.status.specHash !== hashBefore &&
        Boolean(p.status.ip) &&
        proxyCondition(p, 'Ready')?.status === 'True',
      { timeoutMs: bootDeadlineMs, intervalMs: 1_000 },
    );
    const [mac2] = await domainMacs(domain);
    expect(mac2).not.toBe(mac);
    const ip2 = replaced.status!.ip!;
    expect(await net.leaseOf(mac2!)).toBe(ip2);
    // The replacement asks for the same credentials (the Secret outlives the VM).
    expect((await connectThrough({ host: ip2, port: 3128 }, target, net.ca)).connect).toBe(407);
    expect(await connectThrough({ host: ip2, port: 3128 }, target, net.ca, authorization)).toEqual({
      connect: 200,
      get: 204,
    });
    console.log(
      `issue 28: replacement Ready with ${ip2} ${((Date.now() - replacedAt) / 1000).toFixed(1)} s after the edit`,
    );

    // The agent goes away inside the guest (masked, then stopped, through the agent itself).
    const plain = createKvmProvider({ name: 'kvm-no-leases', config: config(undefined), logger: cp.logger });
    try {
      expect(await plain.get(id, AbortSignal.timeout(60_000))).toMatchObject({ state: 'Running', ip: ip2 });
      await virsh(
        'qemu-agent-command',
        domain,
        JSON.stringify({
          execute: 'guest-exec',
          arguments: {
            path: '/bin/sh',
            arg: ['-c', 'systemctl mask qemu-guest-agent.service; systemctl stop qemu-guest-agent.service'],
          },
        }),
      );
      await eventually(
        'the guest agent is gone',
        () =>
          virsh('domifaddr', domain, '--source', 'agent').then(
            () => undefined,
            () => true,
          ),
        { timeoutMs: 60_000, intervalMs: 1_000 },
      );
      // Without a lease file the provider has no way to the address; with it, the lease gives it.
      expect(await plain.get(id, AbortSignal.timeout(60_000))).toMatchObject({ state: 'Provisioning' });
      expect(await provider.get(id, AbortSignal.timeout(60_000))).toMatchObject({
        state: 'Running',
        ip: ip2,
      });
      const listed = (await provider.listByTag(AbortSignal.timeout(60_000))).find((i) => i.id === id);
      expect(listed).toMatchObject({ state: 'Running', ip: ip2, installation });
    } finally {
      await plain.close?.();
    }

    // Delete: the domain and every volume of it go; GC finds nothing of this installation.
    await deleteProxy(cp.api, cp.namespace, 'kvm-e2e');
    await waitForProxyGone(cp.api, cp.namespace, 'kvm-e2e', { timeoutMs: 120_000, intervalMs: 500 });
    expect(await virsh('list', '--all', '--name')).not.toContain(domain);
    const vols = (await virsh('vol-list', '--pool', pool.name))
      .split('\n')
      .map((l) => l.trim().split(/\s+/)[0])
      .filter((v) => v !== undefined && v !== '');
    expect(vols.filter((v) => v!.includes(domain))).toEqual([]);
    const gc = createGcActivities({
      registry: cp.registry,
      kubeConfig: cp.kc,
      installation,
      logger: cp.logger,
      namespaces: [cp.namespace],
    });
    const left = await gc.gcListInstances({ provider: PROVIDER, timeoutMs: 60_000 });
    expect(left.filter((i) => i.installation === installation)).toEqual([]);
    await expect(getProxy(cp.api, cp.namespace, 'kvm-e2e')).rejects.toThrow();
  }, 1_800_000);
});
