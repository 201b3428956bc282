/**
 * The `proxmox` provider's pure parts: identifiers and marks in PVE's tag
 * grammar, the classify table (PVE's messages as the research notes quote
 * them from qemu-server, pve-manager, pve-storage and users' reports), the
 * agent-address filter, and the config block's validation.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseProvidersConfig } from '../../providers/config.js';
import { CallEnded } from '../../providers/shared/bounded-call.js';
import {
  classify,
  isAgentNotRunning,
  isConfigMissing,
  isVmidTaken,
} from '../../providers/proxmox/classify.js';
import {
  PveHttpError,
  PveTaskError,
  PveTaskTimeout,
  PveTransportError,
} from '../../providers/proxmox/client.js';
import { proxmoxConfigSchema } from '../../providers/proxmox/config.js';
import {
  candidateVmids,
  descriptionMark,
  formatProviderId,
  ipFromTags,
  markTags,
  marksFromDescription,
  marksFromTags,
  mergeTags,
  parseProviderId,
  PVE_TAG,
  taggable,
  withIpTag,
} from '../../providers/proxmox/marks.js';
import { agentAddress, net0Mac } from '../../providers/proxmox/addresses.js';

const http = (status: number, reason: string, errors: Record<string, string> = {}) =>
  new PveHttpError(status, 'POST', '/nodes/{node}/qemu/{vmid}/clone', reason, errors);
const task = (exit: string, log: string[] = []) => new PveTaskError('qmclone', exit, log);

describe('proxmox ids and marks', () => {
  it('providerIDs round-trip and anything else is refused', () => {
    const id = formatProviderId(100234, 'proxy-abcdefghijklmnop');
    expect(parseProviderId(id)).toEqual({ vmid: 100234, name: 'proxy-abcdefghijklmnop' });
    for (const bad of [
      '',
      'qemu/99/proxy-abcdefghijklmnop',
      'qemu/0100/proxy-abcdefghijklmnop',
      'qemu/100/x',
      'lxc/100/proxy-abcdefghijklmnop',
      'qemu/100/proxy-abcdefghijklmnop/x',
      42,
    ])
      expect(parseProviderId(bad)).toBeUndefined();
  });

  it('the VMID walk is deterministic per name, inside the range, without repeats', () => {
    const range = { min: 100_000, max: 100_999 };
    const a = candidateVmids('proxy-aaaaaaaaaaaaaaaa', range, 16);
    expect(a).toEqual(candidateVmids('proxy-aaaaaaaaaaaaaaaa', range, 16));
    expect(new Set(a).size).toBe(16);
    for (const v of a) expect(v >= range.min && v <= range.max).toBe(true);
    expect(candidateVmids('proxy-bbbbbbbbbbbbbbbb', range, 16)).not.toEqual(a);
    expect(candidateVmids('proxy-aaaaaaaaaaaaaaaa', { min: 100, max: 102 }, 16)).toHaveLength(3);
  });

  it('marks are valid PVE tags and read back after PVE lowercases and sorts them', () => {
    const createdAt = new Date('2026-12-03T10:00:00Z');
    const uid = '6f1c2a9e-3b1d-4c55-9a57-0c9e8a1b2c3d';
    const tags = markTags({ uid, installation: 'cluster-0123456789abcdef', createdAt });
    for (const t of tags) expect(PVE_TAG.test(t)).toBe(true);
    const stored = [...tags, 'base-image']
      .map((t) => t.toLowerCase())
      .sort()
      .join(';');
    expect(marksFromTags(stored)).toEqual({
      managed: true,
      uid,
      installation: 'cluster-0123456789abcdef',
      createdAt,
    });
    expect(marksFromTags('web,prod other')).toEqual({ managed: false, uid: '', installation: '' });
    expect(taggable(uid)).toBe(true);
    for (const bad of ['UPPER', 'has:colon', 'a=b', 'sp ace', '']) expect(taggable(bad)).toBe(false);
  });

  it('writing marks drops a template copy of ours and keeps the VM own tags', () => {
    const marks = markTags({ uid: 'u1', installation: 'i1', createdAt: new Date(1_000_000) });
    expect(mergeTags('base-image;egress-uid-stale;egress-managed', marks).split(';')).toEqual([
      'base-image',
      'egress-managed',
      'egress-uid-u1',
      'egress-inst-i1',
      'egress-ct-1000',
    ]);
  });

  it('the address tag is set, replaced and removed without touching the other tags', () => {
    const t = withIpTag('base-image;egress-managed;egress-uid-u1', '10.0.0.7');
    expect(ipFromTags(t)).toBe('10.0.0.7');
    for (const tag of t.split(';')) expect(PVE_TAG.test(tag)).toBe(true);
    expect(withIpTag(t, '10.0.0.8')).toBe('base-image;egress-managed;egress-uid-u1;egress-ip-10.0.0.8');
    expect(withIpTag(t, undefined)).toBe('base-image;egress-managed;egress-uid-u1');
    expect(ipFromTags('egress-ip-not.an.ip')).toBeUndefined();
  });

  it('the description mark carries the same facts for a VM without tags yet', () => {
    const m = { uid: 'u-1', installation: 'inst', createdAt: new Date(1_700_000_000_000) };
    expect(marksFromDescription(`Debian\n${descriptionMark(m)}`)).toEqual({ managed: true, ...m });
    expect(marksFromDescription('Debian 12 cloud image')).toBeUndefined();
  });
});

describe('proxmox classify: PVE messages to classes', () => {
  const cases: Array<[string, unknown, string]> = [
    ['401 bad token', new PveHttpError(401, 'GET', '/version', 'authentication failure', {}), 'Permanent'],
    ['403 privilege', http(403, 'Permission check failed (/vms/100, VM.Clone)'), 'Permanent'],
    ['400 parameters', http(400, 'Parameter verification failed.', { tags: 'invalid format' }), 'Permanent'],
    ['501 no such uri', http(501, "Method 'GET /nodes/x/y' not implemented"), 'Permanent'],
    ['595 node unreachable', http(595, 'Connection timed out'), 'Transient'],
    ['596 proxy failure', http(596, 'Broken pipe'), 'Transient'],
    [
      '500 config missing',
      http(500, "Configuration file 'nodes/pve1/qemu-server/218.conf' does not exist"),
      'Transient',
    ],
    ['500 locked', http(500, 'VM is locked (clone)'), 'Transient'],
    ['500 other', http(500, 'got unexpected control message'), 'Transient'],
    [
      'task storage lock',
      task("clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"),
      'Transient',
    ],
    [
      'task cfs lock',
      task("clone failed: cfs-lock 'storage-drbd' error: got lock request timeout"),
      'Transient',
    ],
    [
      'task no space',
      task('clone failed: lvcreate: Volume group "pve" has insufficient free space (0 extents)'),
      'QuotaExceeded',
    ],
    ['task ENOSPC', task('unable to create image: No space left on device'), 'QuotaExceeded'],
    ['task other', task('start failed: QEMU exited with code 1'), 'Transient'],
    ['task timeout', new PveTaskTimeout('qmclone', 600_000), 'Transient'],
    ['refused', new PveTransportError('ECONNREFUSED', 'GET', '/version'), 'Transient'],
    [
      'untrusted cert',
      new PveTransportError('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'GET', '/version'),
      'Permanent',
    ],
    ['pin mismatch', new PveTransportError('ERR_PVE_FINGERPRINT_MISMATCH', 'GET', '/version'), 'Permanent'],
    ['caller abort', new CallEnded('caller', 30_000, 'x'), 'Transient'],
    ['own timeout', new CallEnded('timeout', 30_000, 'x'), 'Transient'],
  ];
  it.each(cases)('%s', (_name, err, cls) => {
    const c = classify(err);
    expect(c.errorClass).toBe(cls);
    // Fixed summaries: none of PVE's text is copied.
    expect(c.summary).not.toMatch(/pve-storage-local-lvm|QEMU exited|Volume group|218\.conf/);
  });

  it('recognises the VMID collision in its three forms, the missing config and the absent agent', () => {
    expect(
      isVmidTaken(
        new PveHttpError(400, 'GET', '/cluster/nextid', 'Parameter verification failed.', {
          vmid: 'VM 218 already exists',
        }),
      ),
    ).toBe(true);
    expect(isVmidTaken(http(500, 'unable to create VM 218: config file already exists'))).toBe(true);
    expect(isVmidTaken(task("can't lock file '/var/lock/qemu-server/lock-218.conf' - got timeout"))).toBe(
      true,
    );
    expect(isVmidTaken(http(500, 'VM is locked (clone)'))).toBe(false);
    expect(
      isConfigMissing(http(500, "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist")),
    ).toBe(true);
    expect(isAgentNotRunning(http(500, 'QEMU guest agent is not running'))).toBe(true);
  });
});

describe('proxmox agent address', () => {
  const mac = net0Mac('virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1');
  it('reads net0 MAC', () => {
    expect(mac).toBe('bc:24:11:aa:bb:cc');
    expect(net0Mac('model=virtio,macaddr=BC:24:11:00:00:01,bridge=vmbr0')).toBe('bc:24:11:00:00:01');
  });
  it('takes the routable IPv4 of net0 NIC only, never docker0, loopback or link-local', () => {
    const nic = (hw: string, ...ips: string[]) => ({
      'hardware-address': hw,
      'ip-addresses': ips.map((a) => ({
        'ip-address-type': a.includes(':') ? 'ipv6' : 'ipv4',
        'ip-address': a,
      })),
    });
    const result = {
      result: [
        nic('00:00:00:00:00:00', '127.0.0.1'),
        nic('02:42:ac:11:00:01', '172.17.0.1'),
        nic('BC:24:11:AA:BB:CC', 'fe80::1', '169.254.1.1', '10.0.0.7'),
        nic('02:00:00:00:00:99', '192.168.1.5'),
      ],
    };
    expect(agentAddress(result, mac)).toBe('10.0.0.7');
    expect(agentAddress({ result: [nic('BC:24:11:AA:BB:CC', '169.254.1.1')] }, mac)).toBeUndefined();
    expect(agentAddress(result, undefined)).toBeUndefined();
  });
});

describe('proxmox config block', () => {
  const base = {
    url: 'https://pve1.lan:8006',
    tokenId: 'egress@pve!proxies',
    tokenSecretFile: '/s/token',
    caFile: '/s/ca.pem',
    machineTypes: { small: { cores: 1, memoryMiB: 1024 } },
    nodes: [{ name: 'pve1', templates: { 'debian-12': 9000 }, isoStorage: 'local' }],
  };
  it('the sample config (infra/samples/providers-proxmox.yaml) is valid', () => {
    const file = 'infra/samples/providers-proxmox.yaml';
    const parsed = parseProvidersConfig(readFileSync(file, 'utf8'), file);
    expect(parsed.providers[0]).toMatchObject({ name: 'homelab', type: 'proxmox' });
  });

  it('fills the defaults', () => {
    const c = proxmoxConfigSchema.parse(base);
    expect(c.vmidRange).toEqual({ min: 100_000, max: 199_999 });
    expect(c.seedDrive).toBe('ide3');
    expect(c.nodes[0]!.maxConcurrentClones).toBe(2);
    expect(proxmoxConfigSchema.parse({ ...base, fingerprint: 'ab:'.repeat(31) + 'ab' }).fingerprint).toBe(
      'AB'.repeat(32),
    );
  });
  it.each([
    [{ url: 'http://pve1:8006' }, 'url'],
    [{ url: 'https://pve1:8006/api2/json' }, 'url'],
    [{ tokenId: 'egress@pve' }, 'tokenId'],
    [{ fingerprint: 'abc' }, 'fingerprint'],
    [{ vmidRange: { min: 5, max: 10 } }, 'vmidRange'],
    [{ seedDrive: 'virtio0' }, 'seedDrive'],
    [{ nodes: [{ name: 'pve 1', templates: { a: 9000 }, isoStorage: 'local' }] }, 'nodes'],
    [{ nodes: [base.nodes[0], base.nodes[0]] }, 'nodes'],
    [{ insecure: true }, ''],
  ])('refuses %j naming %s', (patch, field) => {
    const r = proxmoxConfigSchema.safeParse({ ...base, ...patch });
    expect(r.success).toBe(false);
    if (field !== '') expect(r.error!.issues.some((i) => i.path[0] === field)).toBe(true);
  });
});
