/**
 * What the API token may do: the privileges it needs (check() reports what
 * is missing), and the one it cannot do without, VM.Audit in its scope:
 * without it /cluster/resources silently answers an empty list, which must
 * never reach GC as "no instances".
 */
import type { Operations } from '../shared/operation.js';
import type { ProviderOperation, TargetStatus } from '../types.js';
import type { ProxmoxClient } from './client.js';
import type { ProxmoxConfig } from './config.js';

/** How long a permission answer stands for listings (check() always asks). */
const PERMISSIONS_TTL_MS = 60_000;

/** Privileges the token needs on /vms (or the pool), by PVE major version for the agent's. */
export function requiredVmPrivileges(pveMajor: number): string[] {
  return [
    'VM.Audit',
    'VM.Allocate',
    'VM.Clone',
    'VM.Config.CDROM',
    'VM.Config.CPU',
    'VM.Config.Memory',
    'VM.Config.Options',
    'VM.PowerMgmt',
    pveMajor >= 9 ? 'VM.GuestAgent.Audit' : 'VM.Monitor',
  ];
}
export const REQUIRED_STORAGE_PRIVILEGES = ['Datastore.Audit', 'Datastore.AllocateTemplate'];

export class Permissions {
  private visibility: { at: number; missing: string[] } | undefined;

  constructor(
    private readonly client: ProxmoxClient,
    private readonly ops: Operations,
    private readonly config: Pick<ProxmoxConfig, 'pool' | 'nodes' | 'url'>,
  ) {}

  /** Where the token's VM privileges are looked up: the pool, or /vms. */
  scope(): string {
    return this.config.pool === undefined ? '/vms' : `/pool/${this.config.pool}`;
  }

  private async privilegesOn(path: string, signal: AbortSignal): Promise<Set<string>> {
    const data = await this.client.get<Record<string, Record<string, number>>>(
      '/access/permissions',
      '/access/permissions',
      { path },
      signal,
    );
    const privs = data?.[path] ?? {};
    return new Set(Object.keys(privs));
  }

  /** The token can see VMs in its scope (VM.Audit). Cached for listings; refused as Permanent. */
  async requireVisibility(operation: ProviderOperation, signal: AbortSignal): Promise<void> {
    const now = Date.now();
    if (this.visibility === undefined || now - this.visibility.at > PERMISSIONS_TTL_MS) {
      const privs = await this.privilegesOn(this.scope(), signal);
      this.visibility = { at: now, missing: privs.has('VM.Audit') ? [] : ['VM.Audit'] };
    }
    if (this.visibility.missing.length > 0) {
      const missing = this.visibility.missing;
      this.visibility = undefined; // ask again next time: a fixed ACL takes effect at once
      throw this.ops.fail(
        'Permanent',
        operation,
        '',
        `the token lacks ${missing.join(', ')} on ${this.scope()}: it would see no VMs (a privilege-separated token needs its own ACL)`,
      );
    }
  }

  /** check()'s `token` target: every privilege create, get, delete and the seed uploads need. */
  async checkToken(major: number, signal: AbortSignal): Promise<TargetStatus> {
    const scope = this.scope();
    const missing: string[] = [];
    const vmPrivs = await this.privilegesOn(scope, signal);
    for (const p of requiredVmPrivileges(major)) if (!vmPrivs.has(p)) missing.push(`${p} on ${scope}`);
    for (const storage of [...new Set(this.config.nodes.map((n) => n.isoStorage))]) {
      const privs = await this.privilegesOn(`/storage/${storage}`, signal);
      for (const p of REQUIRED_STORAGE_PRIVILEGES)
        if (!privs.has(p)) missing.push(`${p} on /storage/${storage}`);
    }
    this.visibility = { at: Date.now(), missing: vmPrivs.has('VM.Audit') ? [] : ['VM.Audit'] };
    if (missing.length === 0)
      return { name: 'token', address: this.config.url, ready: true, reason: 'Reachable' };
    const blind = !vmPrivs.has('VM.Audit');
    return {
      name: 'token',
      address: this.config.url,
      ready: false,
      reason: 'Forbidden',
      message: (
        (blind
          ? `the token lacks VM.Audit on ${scope}: it sees no VMs, so orphan GC skips this provider (a privilege-separated token needs ACLs of its own). `
          : '') + `missing: ${missing.join(', ')}`
      ).slice(0, 1024),
      details: { missing: String(missing.length) },
    };
  }
}
