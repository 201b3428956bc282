/**
 * check() for the proxmox provider: the API (its version), the cluster's
 * quorum, each configured node, and the token's privileges.
 */
import type { TargetStatus } from '../types.js';
import { classify } from './classify.js';
import { PveHttpError, type ProxmoxClient } from './client.js';
import type { ProxmoxConfig } from './config.js';
import type { Permissions } from './permissions.js';

export async function checkCluster(
  deps: { client: ProxmoxClient; permissions: Permissions; config: Pick<ProxmoxConfig, 'url' | 'nodes'> },
  signal: AbortSignal,
): Promise<TargetStatus[]> {
  const { client, config } = deps;
  const address = config.url;
  const failed = (name: string, err: unknown, started: number): TargetStatus => {
    const c = signal.aborted ? { errorClass: 'Transient', summary: 'aborted by the caller' } : classify(err);
    let reason = 'APIError';
    if (signal.aborted) reason = 'Timeout';
    else if (err instanceof PveHttpError && err.status === 401) reason = 'Unauthorized';
    else if (err instanceof PveHttpError && err.status === 403) reason = 'Forbidden';
    else if (c.summary.includes('timed out')) reason = 'Timeout';
    else if (!(err instanceof PveHttpError)) reason = 'Unreachable';
    return { name, address, ready: false, reason, message: c.summary, latencyMillis: Date.now() - started };
  };
  const started = Date.now();
  let version: { version: string; release?: string } | undefined;
  const api: TargetStatus = await client
    .get<{ version: string; release: string }>('/version', '/version', {}, signal)
    .then((v): TargetStatus => {
      version = v;
      return {
        name: 'api',
        address,
        ready: true,
        reason: 'Reachable',
        latencyMillis: Date.now() - started,
        details: { version: v.version },
      };
    })
    .catch((err: unknown) => failed('api', err, started));
  const quorum: TargetStatus = await client
    .get<Array<{ type: string; quorate?: boolean | number }>>(
      '/cluster/status',
      '/cluster/status',
      {},
      signal,
    )
    .then((rows): TargetStatus => {
      const cluster = (rows ?? []).find((r) => r.type === 'cluster');
      // A single node without a cluster has no cluster row: it is its own quorum.
      const quorate = cluster === undefined || cluster.quorate === true || cluster.quorate === 1;
      return quorate
        ? { name: 'quorum', address, ready: true, reason: 'Reachable' }
        : {
            name: 'quorum',
            address,
            ready: false,
            reason: 'NoQuorum',
            message: 'the cluster has lost quorum: no VM can be created or changed',
          };
    })
    .catch((err: unknown) => failed('quorum', err, started));
  const nodes: TargetStatus[] = await client
    .get<Array<{ node: string; status: string }>>('/nodes', '/nodes', {}, signal)
    .then((rows) =>
      config.nodes.map((n): TargetStatus => {
        const row = (rows ?? []).find((r) => r.node === n.name);
        if (row === undefined)
          return {
            name: `node/${n.name}`,
            address,
            ready: false,
            reason: 'APIError',
            message: 'node not in the cluster (or not visible to the token)',
          };
        return row.status === 'online'
          ? { name: `node/${n.name}`, address, ready: true, reason: 'Reachable' }
          : {
              name: `node/${n.name}`,
              address,
              ready: false,
              reason: 'Unreachable',
              message: `node is ${row.status}`,
            };
      }),
    )
    .catch((err: unknown) => config.nodes.map((n) => failed(`node/${n.name}`, err, started)));
  const token = await deps.permissions
    .checkToken(Number(/^(\d+)/.exec(version?.version ?? '')?.[1] ?? 9), signal)
    .catch((err: unknown) => failed('token', err, started));
  return [api, quorum, ...nodes, token];
}
