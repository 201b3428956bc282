/**
 * The configured hypervisors: one SSH link (ssh.ts) and its virsh
 * (virsh.ts) per host, and the one way every part of the provider runs a
 * command on one, bounded by `callTimeoutSeconds` unless told otherwise.
 */
import type { Readable } from 'node:stream';
import type { Operations } from '../shared/operation.js';
import type { ProviderOperation } from '../types.js';
import type { KvmConfig, KvmHost } from './config.js';
import { HostLink } from './ssh.js';
import { Virsh, VirshError, type VirshErrorKind } from './virsh.js';

export interface HostHandle {
  config: KvmHost;
  link: HostLink;
  virsh: Virsh;
}

export class Hosts {
  private readonly byName = new Map<string, HostHandle>();
  /** The bound of one remote command. */
  readonly callMs: number;

  constructor(
    config: KvmConfig,
    provider: { type: string; name: string },
    private readonly ops: Operations,
  ) {
    this.callMs = config.callTimeoutSeconds * 1000;
    for (const h of config.hosts) {
      const link = new HostLink({
        address: h.address,
        user: h.user,
        keyFile: config.sshKeyFile,
        ...(config.knownHostsFile === undefined ? {} : { knownHostsFile: config.knownHostsFile }),
        insecureIgnoreHostKey: config.insecureIgnoreHostKey,
        dialTimeoutMs: this.callMs,
        provider,
        hostName: h.name,
      });
      this.byName.set(h.name, { config: h, link, virsh: new Virsh(link, h.socket) });
    }
  }

  /** Every host, in config order. */
  all(): HostHandle[] {
    return [...this.byName.values()];
  }

  find(name: string): HostHandle | undefined {
    return this.byName.get(name);
  }

  /** The host an instance is on; Permanent when the config does not name it. */
  require(operation: ProviderOperation, instance: string, name: string): HostHandle {
    const h = this.byName.get(name);
    if (h === undefined)
      throw this.ops.fail('Permanent', operation, instance, `host "${name}" is not configured`);
    return h;
  }

  /** One virsh subcommand on `h`: its stdout, or a VirshError. */
  virsh(
    h: HostHandle,
    args: string[],
    signal: AbortSignal,
    stdin?: Buffer | Readable,
    timeoutMs?: number,
  ): Promise<string> {
    return h.virsh.run(args, {
      signal,
      timeoutMs: timeoutMs ?? this.callMs,
      ...(stdin === undefined ? {} : { stdin }),
    });
  }

  /** A fixed read-only command on `h` (`cat` of a host file): its stdout as text, whatever it exits with. */
  async read(h: HostHandle, command: string, label: string, signal: AbortSignal): Promise<string> {
    const res = await h.link.exec(command, { signal, timeoutMs: this.callMs, label });
    return res.stdout.toString('utf8');
  }

  close(): void {
    for (const h of this.byName.values()) h.link.close();
  }
}

/** `p`, except that a VirshError of one of `kinds` resolves to `fallback`. */
export async function tolerate<T>(p: Promise<T>, kinds: readonly VirshErrorKind[], fallback: T): Promise<T> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof VirshError && kinds.includes(err.kind)) return fallback;
    throw err;
  }
}
