/**
 * The kvm provider's pure parts: config validation (the seed's block), ids
 * and volume names, domain and volume XML with the marks, the in-process
 * ISO 9660 NoCloud seed, shell quoting, known_hosts matching, and the
 * mapping tables (libvirt state, errors, ARP).
 */
import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseProvidersConfig, ProvidersConfigError } from '../../providers/config.js';
import { kvmConfigSchema, parseAddress } from '../../providers/kvm/config.js';
import {
  buildDomainXml,
  buildOverlayVolumeXml,
  macAddresses,
  marksElement,
  parseMarks,
  type DomainSpec,
} from '../../providers/kvm/domain-xml.js';
import {
  baseVolume,
  domainOfVolume,
  formatProviderId,
  marksVolume,
  overlayVolume,
  parseProviderId,
  seedVolume,
  urlImageKey,
} from '../../providers/kvm/ids.js';
import { buildIso9660, readIso9660 } from '../../providers/shared/iso9660.js';
import { hostKeyAccepted, hostKeyAlgorithms, parseKnownHosts } from '../../providers/kvm/known-hosts.js';
import { arpLookup, dnsmasqLeaseLookup, parseDomIfAddr } from '../../providers/kvm/addresses.js';
import { checkReason, classify } from '../../providers/kvm/classify.js';
import { domainSize, mapState, parseNodeInfo, parseNodeMemStats } from '../../providers/kvm/domains.js';
import { parseBaseMarker } from '../../providers/kvm/images.js';
import { parsePoolInfo } from '../../providers/kvm/volumes.js';
import { routableIPv4 } from '../../providers/shared/ipv4.js';
import { buildSeedIso, buildVendorData, GUEST_AGENT_SCRIPT } from '../../providers/shared/seed.js';
import { SshError } from '../../providers/kvm/ssh.js';
import { shellQuote, virshCommand, VirshError, virshErrorKind } from '../../providers/kvm/virsh.js';

/** The seed's kvm-home entry, verbatim (files/config/samples/providers-config.yaml). */
const SEED_KVM_HOME = `providers:
  - name: kvm-home
    type: kvm
    kvm:
      sshKeyFile: /etc/proxy-operator/kvm/id_ed25519
      knownHostsFile: /etc/proxy-operator/kvm/known_hosts
      # insecureIgnoreHostKey: true
      images:
        debian-13:
          url: https://cloud.debian.org/images/cloud/trixie/latest/debian-13-generic-amd64.qcow2
        ubuntu-24.04:
          url: https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img
      machineTypes:
        small:  {vcpus: 1, memoryMiB: 1024}
        medium: {vcpus: 2, memoryMiB: 2048}
      hosts:
        - name: beelink
          address: beelink:22
          user: novakj
          bridge: br0
`;

function issuesOf(yaml: string): string[] {
  try {
    parseProvidersConfig(yaml, 't');
  } catch (err) {
    expect(err).toBeInstanceOf(ProvidersConfigError);
    return (err as ProvidersConfigError).issues;
  }
  throw new Error('expected a config error');
}

describe('kvm config', () => {
  it("parses the seed's kvm-home entry with the seed's defaults", () => {
    const entry = parseProvidersConfig(SEED_KVM_HOME, 'seed').providers[0]!;
    expect(entry.type).toBe('kvm');
    const c = entry.config as ReturnType<typeof kvmConfigSchema.parse>;
    expect(c.diskSizeGb).toBe(10);
    expect(c.installGuestAgent).toBe(true);
    expect(c.insecureIgnoreHostKey).toBe(false);
    expect(c.images['debian-13']).toMatchObject({ format: 'qcow2', firmware: 'uefi' });
    expect(c.hosts[0]).toMatchObject({
      socket: '/var/run/libvirt/libvirt-sock',
      pool: 'default',
      bridge: 'br0',
      domainType: 'kvm',
      network: 'bridge',
    });
  });

  it('names every bad field', () => {
    expect(
      issuesOf(SEED_KVM_HOME.replace('knownHostsFile: /etc/proxy-operator/kvm/known_hosts\n', '')),
    ).toEqual(['providers[0].kvm.knownHostsFile: is required unless insecureIgnoreHostKey is true']);
    const bad = SEED_KVM_HOME.replace('debian-13:', 'debian/13:')
      .replace('name: beelink', 'name: bee link')
      .replace('memoryMiB: 2048', 'memoryMiB: 0')
      .replace('bridge: br0', 'bridge: "br0; rm -rf /"');
    const issues = issuesOf(bad);
    expect(issues.join('\n')).toMatch(/kvm\.images\.debian\/13/);
    expect(issues.join('\n')).toMatch(/kvm\.hosts\[0\]\.name: .*providerID/);
    expect(issues.join('\n')).toMatch(/kvm\.machineTypes\.medium\.memoryMiB/);
    expect(issues.join('\n')).toMatch(/kvm\.hosts\[0\]\.bridge/);
  });

  it('rejects duplicate hosts, a missing bridge, a bad sha256 and an unknown field', () => {
    const base = {
      sshKeyFile: '/k',
      insecureIgnoreHostKey: true,
      machineTypes: { s: { vcpus: 1, memoryMiB: 64 } },
      hosts: [
        { name: 'a', address: 'a:22', user: 'u', bridge: 'br0' },
        { name: 'a', address: 'b:22', user: 'u' },
      ],
      images: { x: { url: 'https://x/y', sha256: 'abc' } },
      surprise: 1,
    };
    const r = kvmConfigSchema.safeParse(base);
    expect(r.success).toBe(false);
    const paths = r.error!.issues.map((i) => i.path.join('.'));
    expect(paths).toEqual(expect.arrayContaining(['hosts.1.bridge', 'images.x.sha256', 'hosts.1.name', '']));
    const { surprise: _ignored, ...valid } = base;
    expect(kvmConfigSchema.safeParse({ ...valid, hosts: [base.hosts[0]], images: {} }).success).toBe(true);
  });

  it("host-key algorithms follow the key types known_hosts lists for the host, in the file's order", () => {
    const entries = parseKnownHosts(`[nas1]:2222 ecdsa-sha2-nistp256 AAAA
[nas1]:2222 ssh-rsa BBBB
other ssh-ed25519 CCCC
@revoked [nas1]:2222 ssh-ed25519 DDDD
`);
    expect(hostKeyAlgorithms(entries, 'nas1', 2222)).toEqual([
      'ecdsa-sha2-nistp256',
      'rsa-sha2-512',
      'rsa-sha2-256',
      'ssh-rsa',
    ]);
    expect(hostKeyAlgorithms(entries, 'other', 22)).toEqual(['ssh-ed25519']);
    expect(hostKeyAlgorithms(entries, 'unknown', 22)).toBeUndefined();
  });

  it('dhcpLeasesFile is an absolute path of plain characters', () => {
    const host = { name: 'a', address: 'a:22', user: 'u', bridge: 'br0' };
    const cfg = (dhcpLeasesFile: string) =>
      kvmConfigSchema.safeParse({
        sshKeyFile: '/k',
        insecureIgnoreHostKey: true,
        machineTypes: { s: { vcpus: 1, memoryMiB: 64 } },
        hosts: [{ ...host, dhcpLeasesFile }],
      });
    expect(cfg('/var/lib/misc/dnsmasq.br0.leases').success).toBe(true);
    for (const bad of ['relative.leases', '/x; reboot', "/x'y"]) {
      const r = cfg(bad);
      expect(r.success).toBe(false);
      expect(r.error!.issues[0]!.path.join('.')).toBe('hosts.0.dhcpLeasesFile');
    }
  });

  it('addresses are host:port', () => {
    expect(parseAddress('nas1.lan:22')).toEqual({ host: 'nas1.lan', port: 22 });
    expect(parseAddress('[::1]:2222')).toEqual({ host: '::1', port: 2222 });
    for (const bad of ['nas1', 'nas1:0', 'a b:22', "x';reboot;':22"])
      expect(parseAddress(bad)).toBeUndefined();
  });
});

describe('kvm ids and volume names', () => {
  it('round-trips the providerID and refuses anything else', () => {
    expect(parseProviderId(formatProviderId('nas1', 'proxy-abcdefghijklmnop'))).toEqual({
      host: 'nas1',
      domain: 'proxy-abcdefghijklmnop',
    });
    for (const bad of [
      '',
      'hosts/nas1/domains',
      'hosts/a/b/domains/c',
      'hosts/../domains/x',
      'hosts/a/domains/X;y',
    ])
      expect(parseProviderId(bad)).toBeUndefined();
  });

  it('names volumes after the instance and finds the instance back', () => {
    const d = 'proxy-abcdefghijklmnop';
    expect([overlayVolume(d), seedVolume(d), marksVolume(d)]).toEqual([
      `${d}.qcow2`,
      `${d}-seed.iso`,
      `${d}.marks`,
    ]);
    for (const v of [overlayVolume(d), seedVolume(d), marksVolume(d)]) expect(domainOfVolume(v)).toBe(d);
    expect(domainOfVolume(baseVolume('debian-13', 'qcow2'))).toBeUndefined();
    expect(urlImageKey('https://x/y')).toMatch(/^url-[0-9a-f]{16}$/);
    expect(urlImageKey('https://x/y')).toBe(urlImageKey('https://x/y'));
  });
});

describe('kvm domain XML', () => {
  const spec: DomainSpec = {
    name: 'proxy-abcdefghijklmnop',
    domainType: 'kvm',
    vcpus: 2,
    memoryMiB: 1024,
    firmware: 'uefi',
    overlayPath: '/pool/proxy-abcdefghijklmnop.qcow2',
    seedPath: '/pool/proxy-abcdefghijklmnop-seed.iso',
    network: { kind: 'bridge', bridge: 'br0' },
    marks: {
      managed: true,
      uid: 'u<&>"1',
      installation: 'inst',
      createdAt: new Date('2026-01-02T03:04:05Z'),
    },
  };

  it('carries the marks in <metadata>, escaped, and reads them back', () => {
    const xml = buildDomainXml(spec);
    expect(xml).toContain('u&lt;&amp;&gt;&quot;1');
    expect(parseMarks(xml)).toEqual(spec.marks);
    // libvirt returns the element with another prefix or none
    expect(parseMarks(marksElement(spec.marks).replace(/egress:/g, 'ns0:'))?.uid).toBe('u<&>"1');
    expect(parseMarks('<instance><managed>true</managed><uid/></instance>')).toMatchObject({
      managed: true,
      uid: '',
    });
    expect(parseMarks('<domain><name>x</name></domain>')).toBeUndefined();
  });

  it('UEFI without secure boot by default, SeaBIOS for bios; bridge or user networking; host CPU only under KVM', () => {
    const uefi = buildDomainXml(spec);
    expect(uefi).toContain('<os firmware="efi">');
    expect(uefi).toContain('<feature enabled="no" name="secure-boot"/>');
    expect(uefi).toContain('<source bridge="br0"/>');
    expect(uefi).toContain('host-passthrough');
    const bios = buildDomainXml({ ...spec, firmware: 'bios', domainType: 'qemu', network: { kind: 'user' } });
    expect(bios).not.toContain('firmware="efi"');
    expect(bios).toContain('<domain type="qemu">');
    expect(bios).toContain('<interface type="user">');
    expect(bios).not.toContain('host-passthrough');
    expect(bios).toContain('org.qemu.guest_agent.0');
    // The seed on virtio-scsi: kernels without AHCI (Debian's cloud kernel) still see it.
    expect(bios).toContain('<controller type="scsi" model="virtio-scsi"/>');
    expect(bios).toContain('<target dev="sda" bus="scsi"/>');
  });

  it('overlay volume: qcow2 backed by the base, capacity in bytes', () => {
    const v = buildOverlayVolumeXml({
      name: 'p.qcow2',
      capacityBytes: 10 * 1024 ** 3,
      basePath: '/b',
      baseFormat: 'raw',
    });
    expect(v).toContain('<capacity unit="bytes">10737418240</capacity>');
    expect(v).toContain('<backingStore><path>/b</path><format type="raw"/></backingStore>');
  });

  it('finds MAC addresses in a dumped domain', () => {
    expect(macAddresses(`<interface type='user'><mac address='52:54:00:AA:bb:cc'/></interface>`)).toEqual([
      '52:54:00:aa:bb:cc',
    ]);
  });
});

describe('kvm NoCloud seed (ISO 9660 + Joliet, built in-process)', () => {
  const cloudInit = '#cloud-config\nwrite_files: [{path: /x, content: "é ünïcode ☃"}]\n';

  it('labels it cidata and carries user-data byte for byte, in both trees', () => {
    const iso = buildSeedIso({
      instanceName: 'proxy-a',
      cloudInit,
      installGuestAgent: true,
      vendorData: undefined,
    });
    expect(iso.length % 2048).toBe(0);
    for (const joliet of [false, true]) {
      const { label, files } = readIso9660(iso, joliet);
      expect(label).toBe('cidata');
      const byName = new Map(files.map((f) => [f.name.replace(/;1$/, ''), f.data.toString('utf8')]));
      expect([...byName.keys()].sort()).toEqual(['meta-data', 'user-data', 'vendor-data']);
      expect(byName.get('user-data')).toBe(cloudInit);
      expect(byName.get('meta-data')).toContain('instance-id: proxy-a');
      expect(byName.get('vendor-data')).toBe(GUEST_AGENT_SCRIPT);
    }
  });

  it('is byte-identical for identical input, and blkid sees an iso9660 labelled cidata', () => {
    const input = { instanceName: 'proxy-a', cloudInit, installGuestAgent: false, vendorData: undefined };
    const a = buildSeedIso(input);
    expect(a.equals(buildSeedIso(input))).toBe(true);
    expect(readIso9660(a, true).files.map((f) => f.name)).toEqual(['meta-data', 'user-data']);
    const dir = mkdtempSync(join(tmpdir(), 'kvm-iso-'));
    try {
      writeFileSync(join(dir, 'seed.iso'), a);
      const out = execFileSync('blkid', ['-p', '-o', 'export', join(dir, 'seed.iso')]).toString();
      expect(out).toContain('TYPE=iso9660');
      expect(out).toContain('LABEL=cidata');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('vendor-data: the agent script, the operator document, or both as a MIME multipart', () => {
    expect(buildVendorData(false, undefined)).toBeUndefined();
    expect(buildVendorData(false, '#cloud-config\n')).toBe('#cloud-config\n');
    const both = buildVendorData(true, '#cloud-config\npackages: [htop]\n')!;
    expect(both).toMatch(/^Content-Type: multipart\/mixed; boundary=/);
    expect(both).toContain('text/x-shellscript');
    expect(both).toContain('text/cloud-config');
    expect(both).toContain('packages: [htop]');
  });

  it('refuses names and labels it cannot write', () => {
    expect(() => buildIso9660('bad label', [])).toThrow(/label/);
    expect(() => buildIso9660('x', [{ name: '../x', data: Buffer.alloc(0) }])).toThrow(/name/);
  });
});

describe('kvm remote commands', () => {
  it('quotes every argument as one literal word', () => {
    expect(shellQuote("a'b")).toBe(`'a'\\''b'`);
    const hostile = `x'; rm -rf / #$(reboot)\`id\``;
    const out = execFileSync('sh', ['-c', `printf '%s' ${shellQuote(hostile)}`]).toString();
    expect(out).toBe(hostile);
    expect(() => shellQuote('a\0b')).toThrow(/NUL/);
    expect(virshCommand('/run/libvirt/libvirt-sock', ['domstate', 'proxy-a'])).toBe(
      `'virsh' '-q' '-c' 'qemu:///system?socket=/run/libvirt/libvirt-sock' 'domstate' 'proxy-a'`,
    );
  });

  it('reads a base image marker: digest and copy, the fixed name of earlier versions, nothing else', () => {
    const d = 'ab'.repeat(32);
    expect(parseBaseMarker(`${d} base-deb.qcow2.0123abcd\n`, 'base-deb.qcow2')).toEqual({
      digest: d,
      volume: 'base-deb.qcow2.0123abcd',
    });
    expect(parseBaseMarker(`${d}\n`, 'base-deb.qcow2')).toEqual({ digest: d, volume: 'base-deb.qcow2' });
    for (const text of [
      undefined,
      '',
      // a marker created but not yet given its text
      '\0\0',
      'not-a-digest base-deb.qcow2.0123abcd',
      `${d} base-other.qcow2.0123abcd`,
      `${d} base-deb.qcow2.sha256.0123abcd`,
      `${d} ../../etc/passwd`,
      `${d} base-deb.qcow2.0123abcd extra`,
    ])
      expect(parseBaseMarker(text, 'base-deb.qcow2'), JSON.stringify(text)).toBeUndefined();
  });

  it("classifies virsh's errors", () => {
    expect(virshErrorKind("error: failed to get domain 'proxy-x'")).toBe('no-domain');
    expect(virshErrorKind('error: Storage volume not found: no storage vol with matching path')).toBe(
      'no-volume',
    );
    expect(virshErrorKind("error: Storage pool not found: no storage pool with matching name 'x'")).toBe(
      'no-pool',
    );
    expect(virshErrorKind('error: XML error: bad')).toBe('invalid');
    expect(virshErrorKind('error: Failed to connect socket to /x: No such file or directory')).toBe(
      'connect',
    );
    expect(virshErrorKind('error: cannot allocate: No space left on device')).toBe('no-space');
    // libvirt's words when vol-create-from meets a marker another worker made first.
    expect(
      virshErrorKind(
        "error: Failed to create vol from m.xml\nerror: internal error: storage volume name 'base-a.qcow2.sha256' already in use.",
      ),
    ).toBe('exists');
    const v = (stderr: string) => new VirshError('x', stderr, 1);
    expect(classify(v("failed to get domain 'p'"), 'get').errorClass).toBe('NotFound');
    expect(classify(v("failed to get domain 'p'"), 'create').errorClass).toBe('Transient');
    expect(classify(v('No space left on device'), 'create').errorClass).toBe('QuotaExceeded');
    expect(classify(v('storage pool not found'), 'create').errorClass).toBe('Permanent');
    expect(classify(v('something odd'), 'get').errorClass).toBe('Transient');
    expect(classify(new SshError('auth', 'x'), 'get').errorClass).toBe('Permanent');
    expect(classify(new SshError('host-key', 'x'), 'get').errorClass).toBe('Permanent');
    expect(classify(new SshError('material-invalid', 'x'), 'get').errorClass).toBe('Permanent');
    expect(classify(new SshError('material-missing', 'x'), 'get').errorClass).toBe('Transient');
    expect(classify(new SshError('connect', 'x'), 'get').errorClass).toBe('Transient');
    expect(checkReason(new SshError('host-key', 'x'))).toBe('SSHHandshakeFailed');
    expect(checkReason(new SshError('material-missing', 'x'))).toBe('SSHMaterialUnavailable');
    expect(checkReason(v('failed to connect to the hypervisor'))).toBe('LibvirtConnectFailed');
    expect(checkReason(v('storage pool not found'))).toBe('PoolNotFound');
    expect(checkReason(v('boom'))).toBe('LibvirtError');
  });
});

describe('kvm state, addresses and pool info', () => {
  it("maps libvirt states as the seed's table; unknown is Stopped", () => {
    expect(mapState('no state', undefined)).toBe('Provisioning');
    expect(mapState('running', undefined)).toBe('Provisioning');
    expect(mapState('running', '10.0.0.5')).toBe('Running');
    expect(mapState('idle', '10.0.0.5')).toBe('Running');
    for (const s of ['paused', 'shut off', 'crashed', 'pmsuspended', 'in shutdown', 'something new'])
      expect(mapState(s, '10.0.0.5')).toBe('Stopped');
  });

  it('ARP by MAC, agent output, and the first routable IPv4', () => {
    const arp = `IP address       HW type     Flags       HW address            Mask     Device
192.168.1.9      0x1         0x2         52:54:00:aa:bb:cc     *        br0
192.168.1.10     0x1         0x0         52:54:00:aa:bb:cc     *        br0
192.168.1.11     0x1         0x2         52:54:00:00:00:01     *        br0`;
    expect(arpLookup(arp, ['52:54:00:AA:BB:CC'])).toEqual(['192.168.1.9']);
    const agent = ` lo         00:00:00:00:00:00    ipv4         127.0.0.1/8
 eth0       52:54:00:aa:bb:cc    ipv4         169.254.1.2/16
 -          -                    ipv4         10.1.2.3/24`;
    expect(routableIPv4(parseDomIfAddr(agent))).toBe('10.1.2.3');
    expect(routableIPv4(['0.0.0.0', '127.0.0.1'])).toBeUndefined();
  });

  it("dnsmasq's lease file by MAC, the latest expiry first; other MACs and junk ignored", () => {
    const leases = `1764770000 52:54:00:aa:bb:cc 198.18.7.20 proxy-a 01:52:54:00:aa:bb:cc
1764779999 52:54:00:AA:BB:CC 198.18.7.21 proxy-a *
1764779999 52:54:00:00:00:01 198.18.7.22 * *
garbage line
1764779999 52:54:00:aa:bb:cc fe80::1 * *
`;
    expect(dnsmasqLeaseLookup(leases, ['52:54:00:aa:bb:cc'])).toEqual(['198.18.7.21', '198.18.7.20']);
    expect(dnsmasqLeaseLookup(leases, ['52:54:00:99:99:99'])).toEqual([]);
    expect(dnsmasqLeaseLookup('', ['52:54:00:aa:bb:cc'])).toEqual([]);
  });

  it("a domain's size from its XML, in MiB whatever the unit; undefined when a part is missing", () => {
    expect(
      domainSize("<domain><memory unit='KiB'>1048576</memory><vcpu placement='static'>2</vcpu></domain>"),
    ).toEqual({
      vcpus: 2,
      memoryMiB: 1024,
    });
    expect(domainSize('<domain><memory unit="GiB">4</memory><vcpu>1</vcpu></domain>')).toEqual({
      vcpus: 1,
      memoryMiB: 4096,
    });
    expect(domainSize('<domain><memory>2048</memory><vcpu>1</vcpu></domain>')).toEqual({
      vcpus: 1,
      memoryMiB: 2,
    });
    expect(domainSize('<domain><vcpu>1</vcpu></domain>')).toBeUndefined();
    expect(domainSize(undefined)).toBeUndefined();
  });

  it('nodeinfo and nodememstats: CPUs, total and available memory', () => {
    expect(
      parseNodeInfo(
        'CPU model:           x86_64\nCPU(s):              2\nMemory size:         20932424 KiB\n',
      ),
    ).toEqual({ cpus: 2, memoryKiB: 20932424 });
    expect(parseNodeInfo('garbage')).toEqual({ cpus: 0, memoryKiB: 0 });
    expect(
      parseNodeMemStats(
        'total  :  24683664 KiB\nfree   :  18709164 KiB\nbuffers:  62560 KiB\ncached :  2562544 KiB\n',
      ),
    ).toEqual({ availableKiB: 18709164 + 62560 + 2562544 });
    expect(parseNodeMemStats('')).toBeUndefined();
    expect(
      virshErrorKind(
        "error: internal error: qemu unexpectedly closed the monitor: qemu-system-x86_64: cannot set up guest memory 'pc.ram': Cannot allocate memory",
      ),
    ).toBe('no-memory');
    expect(classify(new VirshError('start', 'error: Cannot allocate memory', 1), 'create').errorClass).toBe(
      'QuotaExceeded',
    );
  });

  it('reads pool-info --bytes', () => {
    expect(
      parsePoolInfo(
        'Name:           default\nState:          running\nCapacity:       1000 bytes\nAllocation:     10\nAvailable:      990 bytes\n',
      ),
    ).toEqual({ state: 'running', capacity: 1000, available: 990 });
  });
});

describe('kvm known_hosts', () => {
  const blob = Buffer.from('host-key-blob');
  const b64 = blob.toString('base64');

  it('matches plain, port-qualified, wildcard and hashed entries; revoked keys never', () => {
    expect(hostKeyAccepted(parseKnownHosts(`nas1,nas2 ssh-ed25519 ${b64}\n`), 'nas2', 22, blob)).toBe(true);
    expect(hostKeyAccepted(parseKnownHosts(`nas1 ssh-ed25519 ${b64}\n`), 'nas1', 2222, blob)).toBe(false);
    expect(hostKeyAccepted(parseKnownHosts(`[nas1]:2222 ssh-ed25519 ${b64}\n`), 'nas1', 2222, blob)).toBe(
      true,
    );
    expect(hostKeyAccepted(parseKnownHosts(`*.lan,!bad.lan ssh-ed25519 ${b64}\n`), 'bad.lan', 22, blob)).toBe(
      false,
    );
    expect(hostKeyAccepted(parseKnownHosts(`*.lan ssh-ed25519 ${b64}\n`), 'x.lan', 22, blob)).toBe(true);
    const salt = Buffer.from('0123456789abcdef0123');
    const hash = createHmac('sha1', salt).update('nas1').digest('base64');
    const hashed = `|1|${salt.toString('base64')}|${hash} ssh-ed25519 ${b64}\n`;
    expect(hostKeyAccepted(parseKnownHosts(hashed), 'nas1', 22, blob)).toBe(true);
    expect(hostKeyAccepted(parseKnownHosts(hashed), 'nas3', 22, blob)).toBe(false);
    expect(
      hostKeyAccepted(
        parseKnownHosts(`nas1 ssh-ed25519 ${b64}\n@revoked * ssh-ed25519 ${b64}\n`),
        'nas1',
        22,
        blob,
      ),
    ).toBe(false);
    expect(hostKeyAccepted(parseKnownHosts(`nas1 ssh-ed25519 AAAA\n`), 'nas1', 22, blob)).toBe(false);
  });
});
