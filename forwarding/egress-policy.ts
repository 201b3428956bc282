/**
 * The egress policy: which destinations traffic sent through the product may
 * reach. One pure module, so the gateway's check and every proxy
 * configuration the product writes say the same thing.
 *
 * Denied by default: every range that is not the public internet (loopback,
 * private, carrier-grade NAT, link-local with the clouds' metadata service,
 * benchmarking, multicast, reserved; their IPv6 counterparts), plus whatever
 * `denyCidrs` adds (the cluster's own ranges). `allowCidrs` carves exceptions,
 * but the loopback opens only to an allowance that names a loopback range
 * itself: `0.0.0.0/0` does not open 127.0.0.1, and one that opens 127.0.0.1
 * opens ::1, the same host in IPv6. IPv6 spellings of an IPv4
 * address (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, the old
 * IPv4-compatible `::a.b.c.d`) are judged as that IPv4 address.
 *
 * Ports: 80 and 443 by default; any other is refused, except inside an
 * allowance (`allowCidrs`), which opens its range on every port.
 */
import ipaddr from 'ipaddr.js';

export const DEFAULT_DENIED_CIDRS: readonly string[] = [
  '0.0.0.0/8',
  '127.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/4',
  '240.0.0.0/4',
  '::/128',
  '::1/128',
  'fc00::/7',
  'fe80::/10',
  'ff00::/8',
];

export const DEFAULT_ALLOWED_PORTS: readonly number[] = [80, 443];

export interface EgressPolicySpec {
  /** Ranges denied on top of the defaults (the cluster's pod and service CIDRs). */
  denyCidrs: readonly string[];
  /** Exceptions to the denied ranges. */
  allowCidrs: readonly string[];
  /** Destination ports allowed: ranges `[from, to]`, inclusive. */
  allowPorts: ReadonlyArray<readonly [number, number]>;
}

export const DEFAULT_EGRESS_POLICY: EgressPolicySpec = {
  denyCidrs: [],
  allowCidrs: [],
  allowPorts: DEFAULT_ALLOWED_PORTS.map((p) => [p, p] as const),
};

export class EgressPolicyError extends Error {
  override name = 'EgressPolicyError';
}

type Address = ipaddr.IPv4 | ipaddr.IPv6;

interface Range {
  /** As written in the policy (normalised), named in refusals. */
  text: string;
  network: Address;
  prefix: number;
}

export interface EgressPolicy {
  readonly spec: EgressPolicySpec;
  /** Every denied range, defaults first, as CIDR text. */
  readonly deniedCidrs: readonly string[];
  /** Every allowed range, as CIDR text. */
  readonly allowedCidrs: readonly string[];
  /** Whether the policy lets anything reach the loopback (some allowance names it). */
  readonly allowsLoopback: boolean;
}

export type Verdict = { allowed: true } | { allowed: false; rule: string };

const IPV4_LOOPBACK = ipaddr.parseCIDR('127.0.0.0/8');
const IPV6_LOOPBACK = ipaddr.parseCIDR('::1/128');
const LOOPBACK_HOST = ipaddr.parse('127.0.0.1');
const NAT64 = ipaddr.parseCIDR('64:ff9b::/96');
const IPV4_COMPATIBLE = ipaddr.parseCIDR('::/96');

/** Parses and checks a policy spec once; throws EgressPolicyError naming what is wrong. */
export function createEgressPolicy(spec: EgressPolicySpec): EgressPolicy {
  const denied = [...DEFAULT_DENIED_CIDRS, ...spec.denyCidrs].map((c) => parseRange(c, 'deny'));
  const allowed = spec.allowCidrs.map((c) => parseRange(c, 'allow'));
  for (const [from, to] of spec.allowPorts) {
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 1 || to > 65535 || from > to)
      throw new EgressPolicyError(`allowed ports: ${from}-${to} is not a port range within 1-65535`);
  }
  const policy: EgressPolicy & { denied: Range[]; allowed: Range[] } = {
    spec,
    denied,
    allowed,
    deniedCidrs: unique(denied.map((r) => r.text)),
    allowedCidrs: unique(allowed.map((r) => r.text)),
    allowsLoopback: allowed.some(namesLoopback),
  };
  return policy;
}

/**
 * Parses `a,b,c` lists of CIDRs or addresses (a bare address is its /32 or
 * /128); empty items are ignored. Throws naming the item and the flag.
 */
export function parseCidrList(text: string, flag: string): string[] {
  const out: string[] = [];
  for (const raw of text.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    try {
      out.push(parseRange(item, flag).text);
    } catch {
      throw new EgressPolicyError(
        `${flag}: ${JSON.stringify(item)} is not a CIDR (like 10.0.0.0/8 or fd00::/8)`,
      );
    }
  }
  return out;
}

/** Parses `80,443,8000-8999` (or `any`); throws naming the item and the flag. */
export function parsePortList(text: string, flag: string): Array<[number, number]> {
  if (text.trim() === 'any') return [[1, 65535]];
  const out: Array<[number, number]> = [];
  for (const raw of text.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(item);
    const from = m ? Number(m[1]) : NaN;
    const to = m ? Number(m[2] ?? m[1]) : NaN;
    if (!m || from < 1 || to > 65535 || from > to)
      throw new EgressPolicyError(
        `${flag}: ${JSON.stringify(item)} is not a port or a range of ports (like 443 or 8000-8999, or any)`,
      );
    out.push([from, to]);
  }
  if (out.length === 0) throw new EgressPolicyError(`${flag}: no port given (like 80,443, or any)`);
  return out;
}

/** Whether the policy lets traffic reach `address` (an IP literal); the refusing rule otherwise. */
export function checkAddress(policy: EgressPolicy, address: string): Verdict {
  return judge(policy, address).verdict;
}

/**
 * Whether a connection to `address`:`port` may go: inside an allowance
 * (an exception the operator named, so on any port: an internal service is
 * rarely on 80 or 443), or outside every denied range and on an allowed
 * port. The address's rule is named before the port's.
 */
export function checkDestination(policy: EgressPolicy, address: string, port: number): Verdict {
  const { exception, verdict } = judge(policy, address);
  if (exception || !verdict.allowed) return verdict;
  return checkPort(policy, port);
}

/** Whether `address` lies in an allowance that applies to it (a loopback address only in one naming the loopback). */
export function isAllowedException(policy: EgressPolicy, address: string): boolean {
  return judge(policy, address).exception;
}

/**
 * The address judged once, in every form it has (an IPv6 spelling of an
 * IPv4 address as that address too; ::1 as 127.0.0.1, the same host, for
 * the allowances): an allowance that applies to it, else the first denied
 * range it falls in.
 */
function judge(policy: EgressPolicy, address: string): { exception: boolean; verdict: Verdict } {
  const internal = policy as EgressPolicy & { denied: Range[]; allowed: Range[] };
  let parsed: Address;
  try {
    parsed = ipaddr.parse(address);
  } catch {
    return { exception: false, verdict: { allowed: false, rule: 'not an IP address' } };
  }
  const forms: Address[] = [parsed];
  const embedded = embeddedIPv4(parsed);
  if (embedded) forms.push(embedded);
  if (parsed.kind() === 'ipv6' && parsed.match(IPV6_LOOPBACK)) forms.push(LOOPBACK_HOST);
  const loopback = forms.some(isLoopback);
  if (internal.allowed.some((r) => forms.some((f) => contains(r, f)) && (!loopback || namesLoopback(r))))
    return { exception: true, verdict: { allowed: true } };
  for (const form of forms) {
    const denial = internal.denied.find((r) => contains(r, form));
    if (denial)
      return { exception: false, verdict: { allowed: false, rule: `destination in ${denial.text}` } };
  }
  return { exception: false, verdict: { allowed: true } };
}

export function checkPort(policy: EgressPolicy, port: number): Verdict {
  if (policy.spec.allowPorts.some(([from, to]) => port >= from && port <= to)) return { allowed: true };
  return {
    allowed: false,
    rule: `port ${port} is not allowed (allowed: ${describePorts(policy.spec.allowPorts)})`,
  };
}

export function describePorts(ports: EgressPolicySpec['allowPorts']): string {
  if (ports.some(([from, to]) => from === 1 && to === 65535)) return 'any';
  return ports.map(([from, to]) => (from === to ? `${from}` : `${from}-${to}`)).join(',');
}

/**
 * The IP literal a URL host is, after the WHATWG URL parser's
 * normalisation (`2130706433`, `0x7f.1`, `0177.0.0.1` and `127.1` are all
 * 127.0.0.1; `[::ffff:127.0.0.1]` is `::ffff:7f00:1`), or undefined for a name.
 */
export function ipLiteralOf(urlHostname: string): string | undefined {
  const bare =
    urlHostname.startsWith('[') && urlHostname.endsWith(']') ? urlHostname.slice(1, -1) : urlHostname;
  if (ipaddr.IPv4.isValidFourPartDecimal(bare)) return bare;
  if (bare.includes(':') && ipaddr.IPv6.isValid(bare)) return ipaddr.IPv6.parse(bare).toString();
  return undefined;
}

/**
 * The address to dial for a checked one: an IPv4-mapped IPv6 address is the
 * IPv4 address it maps (what the kernel would dial anyway); others as they are.
 */
export function dialAddress(address: string): string {
  const parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress())
    return (parsed as ipaddr.IPv6).toIPv4Address().toString();
  return parsed.toString();
}

/** `localhost` and `*.localhost` are the loopback by definition (RFC 6761), whatever DNS says. */
export function isLocalhostName(name: string): boolean {
  const n = name.toLowerCase().replace(/\.$/, '');
  return n === 'localhost' || n.endsWith('.localhost');
}

function parseRange(text: string, flag: string): Range {
  let network: Address;
  let prefix: number;
  try {
    if (text.includes('/')) [network, prefix] = ipaddr.parseCIDR(text);
    else {
      network = ipaddr.parse(text);
      prefix = network.kind() === 'ipv4' ? 32 : 128;
    }
  } catch {
    throw new EgressPolicyError(
      `${flag}: ${JSON.stringify(text)} is not a CIDR (like 10.0.0.0/8 or fd00::/8)`,
    );
  }
  // The network address itself, so 10.1.2.3/8 reads back as 10.0.0.0/8.
  const base =
    network.kind() === 'ipv4'
      ? ipaddr.IPv4.networkAddressFromCIDR(`${network.toString()}/${prefix}`)
      : ipaddr.IPv6.networkAddressFromCIDR(`${network.toString()}/${prefix}`);
  return { text: `${base.toString()}/${prefix}`, network: base, prefix };
}

function contains(range: Range, address: Address): boolean {
  return range.network.kind() === address.kind() && address.match(range.network, range.prefix);
}

function embeddedIPv4(address: Address): ipaddr.IPv4 | undefined {
  if (address.kind() !== 'ipv6') return undefined;
  const v6 = address as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address();
  const bytes = v6.toByteArray();
  const tail = () => new ipaddr.IPv4(bytes.slice(12));
  if (v6.match(NAT64)) return tail();
  // ::a.b.c.d, but not :: and ::1 (their own rules).
  if (v6.match(IPV4_COMPATIBLE) && (bytes[12] ?? 0) + (bytes[13] ?? 0) > 0) return tail();
  return undefined;
}

function isLoopback(address: Address): boolean {
  return address.kind() === 'ipv4' ? address.match(IPV4_LOOPBACK) : address.match(IPV6_LOOPBACK);
}

/** An allowance names the loopback when it lies inside it (127.0.0.0/8, 127.0.0.2/32, ::1/128). */
function namesLoopback(range: Range): boolean {
  return range.network.kind() === 'ipv4'
    ? range.prefix >= 8 && range.network.match(IPV4_LOOPBACK)
    : range.prefix === 128 && range.network.match(IPV6_LOOPBACK);
}

function unique(items: string[]): string[] {
  return [...new Set(items)];
}
