/**
 * The address a guest is reached at, from what a hypervisor reports (ARP,
 * the guest agent, DHCP leases): the first IPv4 that can be routed to,
 * not loopback (127/8), "this network" (0/8), link-local (169.254/16), or
 * multicast and reserved (224/4 and up).
 */
export function routableIPv4(candidates: readonly string[]): string | undefined {
  for (const c of candidates) {
    const m = /^(\d{1,3})\.(\d{1,3})\.\d{1,3}\.\d{1,3}$/.exec(c);
    if (m === null) continue;
    const [a, b] = [Number(m[1]), Number(m[2])];
    if (a === 127 || a === 0 || a >= 224 || (a === 169 && b === 254)) continue;
    return c;
  }
  return undefined;
}
