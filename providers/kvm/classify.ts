/**
 * What the kvm provider's failures mean: the contract's error class of
 * anything an SSH link or virsh throws, and the check reason of a failed
 * host check (the seed's reasons, chosen by where the check broke).
 */
import type { Classification } from '../shared/operation.js';
import type { ProviderOperation } from '../types.js';
import { ExecEnded, SshError } from './ssh.js';
import { VirshError } from './virsh.js';

/** Why this error has this class. Also used by tests. */
export function classify(err: unknown, operation: ProviderOperation): Classification {
  if (err instanceof ExecEnded) return { errorClass: 'Transient', summary: err.message };
  if (err instanceof SshError) {
    switch (err.stage) {
      case 'material-invalid':
      case 'host-key':
      case 'auth':
        return { errorClass: 'Permanent', summary: err.message };
      default:
        return { errorClass: 'Transient', summary: err.message };
    }
  }
  if (err instanceof VirshError) {
    const what = `virsh ${err.subcommand}`;
    switch (err.kind) {
      case 'no-domain':
      case 'no-volume':
        // Something vanished mid-create (a concurrent delete): retry, never "gone".
        return {
          errorClass: operation === 'create' ? 'Transient' : 'NotFound',
          summary: `${what}: not found`,
        };
      case 'no-pool':
        return { errorClass: 'Permanent', summary: `${what}: storage pool not found` };
      case 'invalid':
        return { errorClass: 'Permanent', summary: `${what}: rejected as invalid or unsupported` };
      case 'auth':
        return { errorClass: 'Permanent', summary: `${what}: libvirt denied access` };
      case 'no-space':
        return { errorClass: 'QuotaExceeded', summary: `${what}: no space left in the storage pool` };
      case 'no-memory':
        return { errorClass: 'QuotaExceeded', summary: `${what}: the host has not enough memory` };
      case 'connect':
        return { errorClass: 'Transient', summary: `${what}: cannot connect to libvirtd` };
      default:
        return { errorClass: 'Transient', summary: `${what} failed (exit ${err.exitCode})` };
    }
  }
  return { errorClass: 'Transient', summary: 'unexpected failure' };
}

/** The seed's check reasons, chosen by where the check broke. */
export function checkReason(err: unknown): string {
  if (err instanceof SshError) {
    switch (err.stage) {
      case 'material-missing':
      case 'material-invalid':
        return 'SSHMaterialUnavailable';
      case 'host-key':
      case 'auth':
        return 'SSHHandshakeFailed';
      case 'timeout':
        return 'Timeout';
      default:
        return 'Unreachable';
    }
  }
  if (err instanceof ExecEnded) return 'Timeout';
  if (err instanceof VirshError) {
    if (err.kind === 'connect') return 'LibvirtConnectFailed';
    if (err.kind === 'no-pool') return 'PoolNotFound';
    return 'LibvirtError';
  }
  return 'Unreachable';
}
