/**
 * A guest's address, by the seed's order of sources: the host's ARP table
 * (matched by the domain's MACs), then the guest agent, then the bridge's
 * DHCP leases when the host names its lease file (a guest without the
 * agent, on a bridge the host has no address on). The same rule for one
 * domain (`get`) and for a host's listing, which gathers the three sources
 * in one round trip.
 */
import { routableIPv4 } from '../shared/ipv4.js';
import { macAddresses } from './domain-xml.js';
import { tolerate, type HostHandle, type Hosts } from './hosts.js';
import { shellQuote } from './virsh.js';

/** `/proc/net/arp` → addresses for the given MACs, in the table's order. */
export function arpLookup(table: string, macs: string[]): string[] {
  const want = new Set(macs.map((m) => m.toLowerCase()));
  const out: string[] = [];
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // flags 0x0 is an incomplete entry
    if (f.length >= 4 && want.has(f[3]!.toLowerCase()) && f[2] !== '0x0') out.push(f[0]!);
  }
  return out;
}

/**
 * A dnsmasq lease file (`<expiry> <mac> <ip> <hostname> <client-id>` per
 * line) → the IPv4 addresses leased to the given MACs, the latest expiry
 * first (a guest that renewed has one line; one re-leased keeps the newest).
 */
export function dnsmasqLeaseLookup(text: string, macs: string[]): string[] {
  const want = new Set(macs.map((m) => m.toLowerCase()));
  const found: Array<{ expiry: number; ip: string }> = [];
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 3 || !want.has(f[1]!.toLowerCase()) || !/^\d{1,3}(?:\.\d{1,3}){3}$/.test(f[2]!)) continue;
    found.push({ expiry: Number(f[0]) || 0, ip: f[2]! });
  }
  return found.sort((a, b) => b.expiry - a.expiry).map((l) => l.ip);
}

/** `virsh domifaddr` output → IPv4 addresses. */
export function parseDomIfAddr(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/\bipv4\s+(\d{1,3}(?:\.\d{1,3}){3})\/\d+/g)) out.push(m[1]!);
  return out;
}

/** The address from a host listing's ARP table, the domain's agent answer and the leases. */
export function listedAddress(xml: string, arp: string, agent: string, leases: string): string | undefined {
  const macs = macAddresses(xml);
  return (
    routableIPv4(arpLookup(arp, macs)) ??
    routableIPv4(parseDomIfAddr(agent)) ??
    routableIPv4(dnsmasqLeaseLookup(leases, macs))
  );
}

/** One running domain's address, asking each source in turn (each a call to the host). */
export async function domainAddress(
  hosts: Hosts,
  h: HostHandle,
  domain: string,
  xml: string,
  signal: AbortSignal,
): Promise<string | undefined> {
  const arp = await hosts.read(h, 'cat /proc/net/arp', 'cat /proc/net/arp', signal);
  const fromArp = routableIPv4(arpLookup(arp, macAddresses(xml)));
  if (fromArp !== undefined) return fromArp;
  const agent = await tolerate(
    hosts.virsh(h, ['domifaddr', domain, '--source', 'agent'], signal),
    ['other', 'not-running', 'invalid'],
    '',
  );
  const fromAgent = routableIPv4(parseDomIfAddr(agent));
  const leasesFile = h.config.dhcpLeasesFile;
  if (fromAgent !== undefined || leasesFile === undefined) return fromAgent;
  const leases = await hosts.read(h, `cat ${shellQuote(leasesFile)}`, 'cat dhcpLeasesFile', signal);
  // A missing file is no lease yet (dnsmasq writes it at the first one), not an error.
  return routableIPv4(dnsmasqLeaseLookup(leases, macAddresses(xml)));
}
