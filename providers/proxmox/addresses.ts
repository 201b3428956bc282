/**
 * A VM's address: what the guest agent reports for net0's NIC, and the
 * `egress-ip-` tag that records it so one listByTag call (the cluster list,
 * no agent calls) can tell the drift sweep a VM's address.
 */
import type { Logger } from 'pino';
import { routableIPv4 } from '../shared/ipv4.js';
import { classify, isAgentNotRunning } from './classify.js';
import type { ProxmoxClient } from './client.js';
import { withIpTag } from './marks.js';
import { str, vmPath } from './vms.js';

/** net0's MAC (`virtio=BC:24:11:00:00:01,bridge=vmbr0` or `macaddr=...`), lowercase. */
export function net0Mac(net0: string | undefined): string | undefined {
  const m = /(?:^|,)(?:[a-z0-9-]+|macaddr)=([0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5})(?:,|$)/.exec(net0 ?? '');
  return m?.[1]?.toLowerCase();
}

/** The agent's interfaces → the routable IPv4 of the NIC with `mac`. */
export function agentAddress(result: unknown, mac: string | undefined): string | undefined {
  if (mac === undefined) return undefined;
  const list = (result as { result?: unknown } | null)?.result;
  if (!Array.isArray(list)) return undefined;
  for (const nic of list as Array<Record<string, unknown>>) {
    if (str(nic['hardware-address']).toLowerCase() !== mac) continue;
    const addrs = Array.isArray(nic['ip-addresses'])
      ? (nic['ip-addresses'] as Array<Record<string, unknown>>)
      : [];
    const ip = routableIPv4(
      addrs.filter((a) => a['ip-address-type'] === 'ipv4').map((a) => str(a['ip-address'])),
    );
    if (ip !== undefined) return ip;
  }
  return undefined;
}

export class AgentAddresses {
  constructor(
    private readonly client: ProxmoxClient,
    private readonly log: Logger,
  ) {}

  /** The agent's answer for the NIC with `mac`; `answered` false when no agent runs (booting, not installed). */
  async read(
    node: string,
    vmid: number,
    mac: string | undefined,
    signal: AbortSignal,
  ): Promise<{ answered: boolean; ip?: string }> {
    try {
      const result = await this.client.get<unknown>(
        '/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces',
        `${vmPath(node, vmid)}/agent/network-get-interfaces`,
        {},
        signal,
      );
      const ip = agentAddress(result, mac);
      return { answered: true, ...(ip === undefined ? {} : { ip }) };
    } catch (err) {
      // No agent yet (booting, not installed): no address, not an error.
      if (isAgentNotRunning(err)) return { answered: false };
      throw err;
    }
  }

  /**
   * Writes the agent's answer into the `egress-ip-` tag. Best effort: a
   * refusal (a lock, say) only delays it to the next get.
   */
  async record(
    node: string,
    vmid: number,
    tags: string | undefined,
    ip: string | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    try {
      await this.client.call(
        'PUT',
        '/nodes/{node}/qemu/{vmid}/config',
        `${vmPath(node, vmid)}/config`,
        { tags: withIpTag(tags, ip) },
        signal,
      );
    } catch (err) {
      if (signal.aborted) throw err;
      this.log.debug(
        { vmid, error: classify(err).summary },
        'recording the address tag failed; next get retries',
      );
    }
  }
}
