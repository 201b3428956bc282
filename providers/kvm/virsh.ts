/**
 * `virsh` over SSH exec channels. The remote side is a shell, so every
 * argument is single-quoted here (a `'` becomes `'\''`) and checked for NUL;
 * values that are not identifiers (XML, cloud-init, image bytes) never go on
 * the command line at all: they travel on the channel's stdin
 * (`virsh define /dev/stdin`, `vol-upload ... /dev/stdin`).
 */
import type { Readable } from 'node:stream';
import type { HostLink } from './ssh.js';

/** POSIX-shell single quoting: the result is one literal word whatever `value` holds. */
export function shellQuote(value: string): string {
  if (value.includes('\0')) throw new Error('argument contains NUL');
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

export function libvirtUri(socket: string): string {
  return `qemu:///system?socket=${socket}`;
}

export function virshCommand(socket: string, args: readonly string[]): string {
  return ['virsh', '-q', '-c', libvirtUri(socket), ...args].map(shellQuote).join(' ');
}

/** virsh exited non-zero. `kind` is what the provider classifies on; the text stays here. */
export class VirshError extends Error {
  override readonly name = 'VirshError';
  readonly kind: VirshErrorKind;
  constructor(
    readonly subcommand: string,
    readonly stderr: string,
    readonly exitCode: number,
  ) {
    super(`virsh ${subcommand} exited ${exitCode}`);
    this.kind = virshErrorKind(stderr);
  }

  /** libvirt's first error line, for a check's message (checks never carry cloud-init). */
  firstLine(): string {
    return (this.stderr.split('\n').find((l) => l.trim() !== '') ?? '').slice(0, 300);
  }
}

export type VirshErrorKind =
  | 'no-domain'
  | 'no-volume'
  | 'no-pool'
  | 'invalid'
  | 'auth'
  | 'no-space'
  | 'no-memory'
  | 'connect'
  | 'not-running'
  | 'exists'
  | 'other';

export function virshErrorKind(stderr: string): VirshErrorKind {
  const s = stderr.toLowerCase();
  if (/domain not found|no domain with matching|failed to get domain/.test(s)) return 'no-domain';
  // vol-create(-from) of a name the pool already has: "storage volume name 'x' already in use".
  if (/storage volume name .* already in use/.test(s)) return 'exists';
  if (/storage volume not found|no storage vol with matching/.test(s)) return 'no-volume';
  if (/storage pool not found|no storage pool with matching/.test(s)) return 'no-pool';
  if (/domain is not running|not running/.test(s)) return 'not-running';
  // QEMU refusing to start: "cannot set up guest memory 'pc.ram': Cannot allocate memory".
  if (/cannot allocate memory|cannot set up guest memory|out of memory/.test(s)) return 'no-memory';
  if (/no space left|not enough space|enospc|insufficient/.test(s)) return 'no-space';
  if (/failed to connect to the hypervisor|failed to connect socket|no such file or directory.*sock/.test(s))
    return 'connect';
  if (/authentication failed|access denied|permission denied|polkit/.test(s)) return 'auth';
  if (
    /xml error|unsupported configuration|invalid argument|xml document failed to validate|operation not supported/.test(
      s,
    )
  )
    return 'invalid';
  return 'other';
}

export interface VirshCallOptions {
  stdin?: Buffer | Readable;
  timeoutMs: number;
  signal: AbortSignal;
}

export class Virsh {
  constructor(
    private readonly link: HostLink,
    private readonly socket: string,
  ) {}

  /** Runs one virsh subcommand; stdout as text; VirshError on a non-zero exit. */
  async run(args: readonly string[], options: VirshCallOptions): Promise<string> {
    const res = await this.link.exec(virshCommand(this.socket, args), {
      ...options,
      label: `virsh ${args[0] ?? ''}`,
    });
    if (res.code !== 0) throw new VirshError(args[0] ?? '', res.stderr, res.code);
    return res.stdout.toString('utf8');
  }

  /**
   * Runs a fixed script (no values interpolated) with positional arguments
   * `$1...` quoted as words: used where one round trip must cover many
   * domains (the per-host listing).
   */
  async script(script: string, args: readonly string[], options: VirshCallOptions): Promise<string> {
    const command = ['sh', '-c', script, 'sh', libvirtUri(this.socket), ...args].map(shellQuote).join(' ');
    const res = await this.link.exec(command, {
      ...options,
      maxStdoutBytes: 64 * 1024 * 1024,
      label: 'virsh script',
    });
    if (res.code !== 0) throw new VirshError('script', res.stderr, res.code);
    return res.stdout.toString('utf8');
  }
}
