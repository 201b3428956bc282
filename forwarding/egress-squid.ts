/**
 * The egress policy as Squid directives, for every squid.conf the product
 * writes: the same ranges and ports the gateway enforces
 * (forwarding/egress-policy.ts), so a crawler that reaches a proxy directly
 * (a lease from the lease API) is held to what the gateway holds it to.
 *
 * Squid's `dst` ACL judges the addresses Squid itself resolved for the name
 * and connects to, so a name that resolves inward is refused there too.
 * Squid keeps IPv4 addresses in IPv4-mapped form internally, so the IPv4
 * ranges cover `::ffff:a.b.c.d`; the NAT64 forms (`64:ff9b::/96`) of the
 * IPv4 ranges are listed explicitly.
 */
import ipaddr from 'ipaddr.js';
import { createEgressPolicy, isAllowedException, type EgressPolicySpec } from './egress-policy.js';

export interface SquidEgressRules {
  /** `acl` lines, before any `http_access`. */
  acls: string[];
  /**
   * `http_access` lines that refuse what the policy denies, and let the
   * allowed exceptions through for `clientsAcl`; to go after the cache
   * manager's deny and before the clients' allow.
   */
  access: string[];
}

export function squidEgressRules(spec: EgressPolicySpec, clientsAcl: string): SquidEgressRules {
  const policy = createEgressPolicy(spec);
  const denied = withNat64(policy.deniedCidrs);
  const ports = spec.allowPorts.map(([from, to]) => (from === to ? `${from}` : `${from}-${to}`));
  const acls = [
    `acl egress_denied dst ${denied.join(' ')}`,
    `acl egress_loopback dst 127.0.0.0/8 ::1/128`,
    `acl egress_ports port ${ports.join(' ')}`,
  ];
  // ::1 goes with an allowance of 127.0.0.1, as in the gateway.
  const allowed = isAllowedException(policy, '::1')
    ? [...policy.allowedCidrs, '::1/128']
    : policy.allowedCidrs;
  if (allowed.length > 0) acls.push(`acl egress_allowed dst ${[...new Set(allowed)].join(' ')}`);
  const access: string[] = [];
  // An allowance opens the loopback only when it names it (as the gateway does).
  if (!policy.allowsLoopback) access.push('http_access deny egress_loopback');
  // An allowance opens its range on every port; everything else on the allowed ports only.
  if (policy.allowedCidrs.length > 0) access.push(`http_access allow ${clientsAcl} egress_allowed`);
  access.push('http_access deny !egress_ports', 'http_access deny egress_denied');
  return { acls, access };
}

/** The ranges, and after them the NAT64 (64:ff9b::/96) form of each IPv4 range. */
function withNat64(cidrs: readonly string[]): string[] {
  const nat64: string[] = [];
  for (const cidr of cidrs) {
    const [network, prefix] = ipaddr.parseCIDR(cidr);
    if (network.kind() !== 'ipv4') continue;
    const bytes = [0x00, 0x64, 0xff, 0x9b, ...new Array<number>(8).fill(0), ...network.toByteArray()];
    nat64.push(`${ipaddr.fromByteArray(bytes).toString()}/${96 + prefix}`);
  }
  return [...cidrs, ...nat64];
}
