/**
 * PVE answers → the contract's error classes (docs/providers/proxmox.md,
 * section 13). PVE answers 500 for not-found, locks and almost everything
 * else, so the message decides; the messages matched here are the ones the
 * research notes quote from qemu-server, pve-manager and pve-storage.
 * Summaries are fixed text: PVE's own text never reaches a ProviderError.
 */
import { CallEnded } from '../shared/bounded-call.js';
import type { ErrorClass } from '../types.js';
import { PveHttpError, PveTaskError, PveTaskTimeout, PveTransportError, TLS_TRUST_CODES } from './client.js';

/** Storage full, as qemu-img, LVM and ZFS word it inside PVE's task and API errors. */
const NO_SPACE =
  /No space left on device|not enough space|insufficient free space|insufficient space|out of space/i;

export interface Classification {
  errorClass: ErrorClass;
  summary: string;
}

function text(err: PveHttpError | PveTaskError): string {
  if (err instanceof PveHttpError) return [err.reason, ...Object.values(err.errors)].join('\n');
  return [err.exitStatus, ...err.logTail].join('\n');
}

/** `Configuration file 'nodes/<n>/qemu-server/<id>.conf' does not exist`: the VM is not on that node. */
export function isConfigMissing(err: unknown): boolean {
  return (
    err instanceof PveHttpError &&
    err.status === 500 &&
    /qemu-server\/\d+\.conf' does not exist/.test(err.reason)
  );
}

/** The VMID is taken: a collision to answer with the next candidate. */
export function isVmidTaken(err: unknown): boolean {
  if (err instanceof PveHttpError)
    return (
      (err.status === 400 && /already exists/.test(err.errors.vmid ?? err.errors.newid ?? '')) ||
      (err.status === 500 && /unable to create VM \d+: config file already exists/.test(err.reason))
    );
  if (err instanceof PveTaskError)
    return /can't lock file '\/var\/lock\/qemu-server\/lock-\d+\.conf' - got timeout/.test(text(err));
  return false;
}

export function isAgentNotRunning(err: unknown): boolean {
  return (
    err instanceof PveHttpError &&
    err.status === 500 &&
    /guest agent is not running|QEMU guest agent is not running|VM \d+ is not running/.test(err.reason)
  );
}

/** `VM is locked (clone)`, storage and cluster-fs lock timeouts: contention, retried. */
export function isLockContention(err: unknown): boolean {
  if (!(err instanceof PveHttpError) && !(err instanceof PveTaskError)) return false;
  return /VM is locked|can't lock file .* got timeout|cfs-lock .* timeout|got lock request timeout/.test(
    text(err),
  );
}

export function isAlreadyRunning(err: unknown): boolean {
  return err instanceof PveTaskError && /VM \d+ already running/.test(text(err));
}

/** Why this error has this class. Also the table test's subject. */
export function classify(err: unknown): Classification {
  if (err instanceof CallEnded)
    return { errorClass: 'Transient', summary: err.by === 'caller' ? 'aborted by the caller' : err.message };
  if (err instanceof PveTransportError) {
    if (TLS_TRUST_CODES.has(err.code))
      return {
        errorClass: 'Permanent',
        summary:
          err.code === 'ERR_PVE_FINGERPRINT_MISMATCH'
            ? 'the server certificate does not match the configured fingerprint'
            : 'the server certificate is not trusted by caFile',
      };
    return { errorClass: 'Transient', summary: `PVE API unreachable (${err.code})` };
  }
  if (err instanceof PveTaskTimeout)
    return { errorClass: 'Transient', summary: `PVE task ${err.taskType} did not finish in time` };
  if (err instanceof PveTaskError) {
    if (NO_SPACE.test(text(err)))
      return { errorClass: 'QuotaExceeded', summary: `PVE task ${err.taskType}: storage full` };
    if (isLockContention(err))
      return { errorClass: 'Transient', summary: `PVE task ${err.taskType}: lock timeout; retried` };
    return { errorClass: 'Transient', summary: `PVE task ${err.taskType} failed` };
  }
  if (err instanceof PveHttpError) {
    const where = `${err.method} ${err.template}`;
    if (err.status === 401)
      return {
        errorClass: 'Permanent',
        summary: `${where}: authentication failed (check tokenId and its secret)`,
      };
    if (err.status === 403)
      return {
        errorClass: 'Permanent',
        summary: `${where}: permission check failed (the token lacks a privilege)`,
      };
    if (err.status === 400) {
      const fields = Object.keys(err.errors).filter((k) => /^[a-z0-9_[\]-]{1,40}$/i.test(k));
      return {
        errorClass: 'Permanent',
        summary: `${where}: parameter verification failed${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`,
      };
    }
    if (err.status === 501)
      return { errorClass: 'Permanent', summary: `${where}: no such API path (PVE version?)` };
    if (err.status === 595 || err.status === 596)
      return {
        errorClass: 'Transient',
        summary: `${where}: a node could not reach another (HTTP ${err.status})`,
      };
    if (isConfigMissing(err))
      // NotFound only after /cluster/resources agrees: the provider checks that itself.
      return { errorClass: 'Transient', summary: `${where}: VM not on that node` };
    if (isLockContention(err)) return { errorClass: 'Transient', summary: `${where}: VM or storage locked` };
    if (NO_SPACE.test(err.reason)) return { errorClass: 'QuotaExceeded', summary: `${where}: storage full` };
    return { errorClass: 'Transient', summary: `${where}: HTTP ${err.status}` };
  }
  return { errorClass: 'Transient', summary: 'unexpected failure' };
}
