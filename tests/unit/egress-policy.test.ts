/** The egress policy (forwarding/egress-policy.ts): what is refused, every spelling of it, and the exceptions. */
import { describe, expect, it } from 'vitest';
import {
  checkAddress,
  checkDestination,
  checkPort,
  createEgressPolicy,
  dialAddress,
  DEFAULT_EGRESS_POLICY,
  EgressPolicyError,
  ipLiteralOf,
  isLocalhostName,
  parseCidrList,
  parsePortList,
} from '../../forwarding/egress-policy.js';

const defaults = createEgressPolicy(DEFAULT_EGRESS_POLICY);
const verdict = (address: string, policy = defaults) => checkAddress(policy, address);

describe('the default policy', () => {
  it.each([
    ['0.0.0.0', '0.0.0.0/8'],
    ['127.0.0.1', '127.0.0.0/8'],
    ['127.255.255.254', '127.0.0.0/8'],
    ['10.1.2.3', '10.0.0.0/8'],
    ['100.64.0.1', '100.64.0.0/10'],
    ['169.254.169.254', '169.254.0.0/16'],
    ['172.16.0.1', '172.16.0.0/12'],
    ['172.31.255.255', '172.16.0.0/12'],
    ['192.0.0.8', '192.0.0.0/24'],
    ['192.168.1.1', '192.168.0.0/16'],
    ['198.18.0.1', '198.18.0.0/15'],
    ['224.0.0.251', '224.0.0.0/4'],
    ['255.255.255.255', '240.0.0.0/4'],
    ['::', '::/128'],
    ['::1', '::1/128'],
    ['fd00::1', 'fc00::/7'],
    ['fe80::1', 'fe80::/10'],
    ['ff02::1', 'ff00::/8'],
    // IPv6 spellings of IPv4 addresses are judged as the IPv4 address.
    ['::ffff:127.0.0.1', '127.0.0.0/8'],
    ['::ffff:7f00:1', '127.0.0.0/8'],
    ['::ffff:169.254.169.254', '169.254.0.0/16'],
    ['64:ff9b::10.0.0.1', '10.0.0.0/8'],
    ['64:ff9b::a9fe:a9fe', '169.254.0.0/16'],
    ['::127.0.0.1', '127.0.0.0/8'],
  ])('refuses %s (%s)', (address, range) => {
    expect(verdict(address)).toEqual({ allowed: false, rule: `destination in ${range}` });
  });

  it.each([
    '93.184.216.34',
    '8.8.8.8',
    '172.32.0.1',
    '100.128.0.1',
    '2606:4700::1111',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
  ])('allows %s', (address) => {
    expect(verdict(address)).toEqual({ allowed: true });
  });

  it('refuses what is not an address at all', () => {
    expect(verdict('example.com')).toEqual({ allowed: false, rule: 'not an IP address' });
  });

  it('allows ports 80 and 443 only', () => {
    expect(checkPort(defaults, 443)).toEqual({ allowed: true });
    expect(checkPort(defaults, 80)).toEqual({ allowed: true });
    expect(checkPort(defaults, 22)).toEqual({
      allowed: false,
      rule: 'port 22 is not allowed (allowed: 80,443)',
    });
    expect(checkPort(defaults, 8443)).toMatchObject({ allowed: false });
  });
});

describe('exceptions and additions', () => {
  it('--egress-deny-cidrs adds ranges; --egress-allow-cidrs carves exceptions out of any', () => {
    const policy = createEgressPolicy({
      denyCidrs: ['203.0.113.0/24'],
      allowCidrs: ['10.20.0.0/16', '203.0.113.7/32'],
      allowPorts: [[1, 65535]],
    });
    expect(checkAddress(policy, '203.0.113.9')).toEqual({
      allowed: false,
      rule: 'destination in 203.0.113.0/24',
    });
    expect(checkAddress(policy, '203.0.113.7')).toEqual({ allowed: true });
    expect(checkAddress(policy, '10.20.3.4')).toEqual({ allowed: true });
    expect(checkAddress(policy, '::ffff:10.20.3.4')).toEqual({ allowed: true });
    expect(checkAddress(policy, '10.21.0.1')).toMatchObject({ allowed: false });
    expect(checkPort(policy, 8443)).toEqual({ allowed: true });
  });

  it('never opens the loopback unless an allowance names it', () => {
    const wide = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['0.0.0.0/0', '::/0'] });
    expect(wide.allowsLoopback).toBe(false);
    expect(checkAddress(wide, '10.0.0.1')).toEqual({ allowed: true });
    expect(checkAddress(wide, '127.0.0.1')).toMatchObject({ allowed: false });
    expect(checkAddress(wide, '::1')).toMatchObject({ allowed: false });
    expect(checkAddress(wide, '::ffff:127.0.0.1')).toMatchObject({ allowed: false });

    const one = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['127.0.0.2/32'] });
    expect(one.allowsLoopback).toBe(true);
    expect(checkAddress(one, '127.0.0.2')).toEqual({ allowed: true });
    expect(checkAddress(one, '127.0.0.1')).toMatchObject({ allowed: false });

    const v6 = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['::1'] });
    expect(checkAddress(v6, '::1')).toEqual({ allowed: true });
  });

  it('an allowance of 127.0.0.1 is one of ::1, the same host; not the other way round for the rest of 127/8', () => {
    const v4 = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['127.0.0.0/8'] });
    expect(checkDestination(v4, '::1', 8080)).toEqual({ allowed: true });
    const two = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['127.0.0.2/32'] });
    expect(checkDestination(two, '::1', 443)).toEqual({ allowed: false, rule: 'destination in ::1/128' });
    const v6 = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['::1'] });
    expect(checkDestination(v6, '127.0.0.1', 443)).toMatchObject({ allowed: false });
  });

  it('reads lists, naming the flag and the item at fault', () => {
    expect(parseCidrList(' 10.96.0.0/12 ,, fd00::/8,192.0.2.1', '--f')).toEqual([
      '10.96.0.0/12',
      'fd00::/8',
      '192.0.2.1/32',
    ]);
    expect(parseCidrList('10.1.2.3/8', '--f')).toEqual(['10.0.0.0/8']);
    expect(() => parseCidrList('10.0.0.0/8,nope', '--f')).toThrow(
      new EgressPolicyError('--f: "nope" is not a CIDR (like 10.0.0.0/8 or fd00::/8)'),
    );
    expect(() => parseCidrList('10.0.0.0/33', '--f')).toThrow(EgressPolicyError);
    expect(parsePortList('80, 443,8000-8999', '--p')).toEqual([
      [80, 80],
      [443, 443],
      [8000, 8999],
    ]);
    expect(parsePortList('any', '--p')).toEqual([[1, 65535]]);
    expect(() => parsePortList('0', '--p')).toThrow('--p: "0" is not a port or a range of ports');
    expect(() => createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowPorts: [[0, 10]] })).toThrow(
      EgressPolicyError,
    );
  });
});

describe('hosts as a URL parser normalises them', () => {
  // What the WHATWG URL parser (the gateway's, and every browser's) makes of
  // a host, then whether that is an IP literal: odd spellings land on the
  // address they mean, and the policy judges that address.
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['2130706433', '127.0.0.1'],
    ['0x7f000001', '127.0.0.1'],
    ['0x7f.1', '127.0.0.1'],
    ['0177.0.0.1', '127.0.0.1'],
    ['127.1', '127.0.0.1'],
    ['127.0.0.1.', '127.0.0.1'],
    ['010.0.0.1', '8.0.0.1'],
    ['[::1]', '::1'],
    ['[::ffff:127.0.0.1]', '::ffff:7f00:1'],
    ['[0:0:0:0:0:0:0:1]', '::1'],
  ])('%s is the address %s', (host, address) => {
    const literal = ipLiteralOf(new URL(`http://${host}/`).hostname);
    expect(literal).toBe(address);
  });

  it('a name is no literal; localhost and *.localhost are the loopback by name', () => {
    expect(ipLiteralOf(new URL('http://example.com/').hostname)).toBeUndefined();
    expect(ipLiteralOf(new URL('http://1.2.3.4.example/').hostname)).toBeUndefined();
    expect(isLocalhostName('localhost')).toBe(true);
    expect(isLocalhostName('LOCALHOST.')).toBe(true);
    expect(isLocalhostName('api.localhost')).toBe(true);
    expect(isLocalhostName('localhost.example.com')).toBe(false);
  });
});

describe('dialAddress', () => {
  it('dials an IPv4-mapped address as its IPv4 address, others as written canonically', () => {
    expect(dialAddress('::ffff:7f00:1')).toBe('127.0.0.1');
    expect(dialAddress('::ffff:8.8.8.8')).toBe('8.8.8.8');
    expect(dialAddress('0:0:0:0:0:0:0:1')).toBe('::1');
    expect(dialAddress('93.184.216.34')).toBe('93.184.216.34');
  });
});

describe('checkDestination', () => {
  it('an allowance opens its range on every port; elsewhere the address, then the port, must pass', () => {
    const policy = createEgressPolicy({
      denyCidrs: [],
      allowCidrs: ['10.20.0.0/16', '127.0.0.2/32'],
      allowPorts: [[443, 443]],
    });
    expect(checkDestination(policy, '10.20.1.1', 5432)).toEqual({ allowed: true });
    expect(checkDestination(policy, '127.0.0.2', 8080)).toEqual({ allowed: true });
    expect(checkDestination(policy, '8.8.8.8', 443)).toEqual({ allowed: true });
    expect(checkDestination(policy, '8.8.8.8', 80)).toEqual({
      allowed: false,
      rule: 'port 80 is not allowed (allowed: 443)',
    });
    // The address's rule is named first.
    expect(checkDestination(policy, '127.0.0.1', 22)).toEqual({
      allowed: false,
      rule: 'destination in 127.0.0.0/8',
    });
    expect(checkDestination(policy, '10.21.0.1', 443)).toEqual({
      allowed: false,
      rule: 'destination in 10.0.0.0/8',
    });
  });

  it('an allowance that does not name the loopback opens no loopback port', () => {
    const wide = createEgressPolicy({ ...DEFAULT_EGRESS_POLICY, allowCidrs: ['0.0.0.0/0'] });
    expect(checkDestination(wide, '127.0.0.1', 443)).toEqual({
      allowed: false,
      rule: 'destination in 127.0.0.0/8',
    });
    expect(checkDestination(wide, '10.0.0.1', 22)).toEqual({ allowed: true });
  });
});
