/**
 * check() for the kvm provider: one target per host, proving the SSH link,
 * libvirtd and the storage pool (running, with its capacity in the details).
 */
import type { TargetStatus } from '../types.js';
import { checkReason } from './classify.js';
import type { HostHandle, Hosts } from './hosts.js';
import { ExecEnded } from './ssh.js';
import { VirshError } from './virsh.js';
import { GiB, type Volumes } from './volumes.js';

export async function checkHost(
  hosts: Hosts,
  volumes: Volumes,
  h: HostHandle,
  signal: AbortSignal,
): Promise<TargetStatus> {
  const ts: TargetStatus = {
    name: h.config.name,
    address: h.config.address,
    ready: false,
    reason: 'Timeout',
    details: { user: h.config.user, pool: h.config.pool },
  };
  const started = Date.now();
  try {
    if (signal.aborted) throw new ExecEnded('caller');
    const hostname = (await hosts.virsh(h, ['hostname'], signal)).trim();
    const version = /libvirt ([\d.]+)/.exec(await hosts.virsh(h, ['version', '--daemon'], signal))?.[1] ?? '';
    const pool = await volumes.poolInfo(h, signal);
    Object.assign(ts.details!, {
      hostname: hostname.slice(0, 253),
      libvirtVersion: version,
      poolState: pool.state,
      poolCapacity: (pool.capacity / GiB).toFixed(2),
      poolAvailable: (pool.available / GiB).toFixed(2),
    });
    if (pool.state !== 'running') {
      ts.reason = 'PoolNotActive';
      ts.message = `storage pool "${h.config.pool}" is ${pool.state.slice(0, 32)}`;
    } else {
      ts.ready = true;
      ts.reason = 'Reachable';
    }
  } catch (err) {
    ts.reason = checkReason(err);
    ts.message = (err instanceof VirshError ? err.firstLine() : ((err as Error).message ?? 'failed')).slice(
      0,
      1024,
    );
  }
  ts.latencyMillis = Date.now() - started;
  return ts;
}
