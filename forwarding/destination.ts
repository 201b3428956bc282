/**
 * Where traffic through the product may go: a destination's name resolved
 * here, every address it got and the port judged by the egress policy
 * (egress-policy.ts), and the address judged handed on, so nobody resolves
 * the name a second time (DNS rebinding) and odd spellings of an address are
 * judged as the address they are. Used by the gateway before it leases and
 * by the `local` provider's forward proxies before they dial.
 */
import { promises as dns } from 'node:dns';
import { isIP } from 'node:net';
import {
  checkDestination as checkPolicy,
  dialAddress,
  ipLiteralOf,
  isLocalhostName,
  type EgressPolicy,
} from './egress-policy.js';

/** A destination the policy allowed: the address to connect to, checked. */
export interface CheckedDestination {
  /** An IP literal (IPv6 without brackets). */
  address: string;
  port: number;
  /** `address:port`, IPv6 in brackets: what an upstream CONNECT carries. */
  authority: string;
}

export interface DestinationResolver {
  /** Every address `name` resolves to; rejects with the resolver's error code when it cannot. */
  resolve(name: string): Promise<string[]>;
}

/**
 * Why a destination was refused: `forbidden` (the message names the rule,
 * never the address a name resolved to) or `unresolved`.
 */
export class DestinationRefusedError extends Error {
  override name = 'DestinationRefusedError';
  constructor(
    readonly kind: 'forbidden' | 'unresolved',
    message: string,
  ) {
    super(message);
  }
}

/**
 * The system's resolver (getaddrinfo: /etc/hosts, then DNS), or the DNS
 * server at `server` (`host:port`) alone when one is given.
 */
export function createDestinationResolver(server: string | undefined): DestinationResolver {
  if (server === undefined) {
    return {
      async resolve(name) {
        const found = await dns.lookup(name, { all: true, verbatim: true });
        return found.map((a) => a.address);
      },
    };
  }
  const resolver = new dns.Resolver({ timeout: 2_000, tries: 2 });
  resolver.setServers([server]);
  return {
    async resolve(name) {
      const answers = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
      const addresses = answers.flatMap((a) => (a.status === 'fulfilled' ? a.value : []));
      if (addresses.length > 0) return addresses;
      const failed = answers.find((a) => a.status === 'rejected');
      throw failed?.reason ?? new Error(`no address for ${name}`);
    },
  };
}

/**
 * The checked destination of `hostname` (a URL hostname, already normalised
 * by the WHATWG parser) and `port`; throws DestinationRefusedError.
 */
export async function resolveAndCheck(
  policy: EgressPolicy,
  resolver: DestinationResolver,
  hostname: string,
  port: number,
): Promise<CheckedDestination> {
  const literal = ipLiteralOf(hostname);
  let addresses: string[];
  if (literal !== undefined) addresses = [literal];
  else if (isLocalhostName(hostname)) addresses = ['127.0.0.1'];
  else {
    try {
      addresses = await resolver.resolve(hostname.replace(/\.$/, ''));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? 'no answer';
      throw new DestinationRefusedError('unresolved', `cannot resolve ${hostname} (${code})`);
    }
    addresses = addresses.filter((a) => isIP(a) !== 0);
    if (addresses.length === 0)
      throw new DestinationRefusedError('unresolved', `cannot resolve ${hostname} (no address)`);
  }
  // A name is refused when any of its addresses is: which one a client would
  // get is the resolver's choice, and a mixed answer is a rebinding attempt's mark.
  for (const address of addresses) {
    const verdict = checkPolicy(policy, address, port);
    if (!verdict.allowed)
      throw new DestinationRefusedError('forbidden', `refused by the egress policy: ${verdict.rule}`);
  }
  const address = dialAddress(addresses[0]!);
  return { address, port, authority: address.includes(':') ? `[${address}]:${port}` : `${address}:${port}` };
}
