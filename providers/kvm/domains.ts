/**
 * Libvirt domains on a host: their state in the contract's terms, whether a
 * machine type fits the host, starting one, and removing one with every
 * volume it owns.
 */
import type { Operations } from '../shared/operation.js';
import type { Instance, InstanceState } from '../types.js';
import type { InstanceMarks } from './domain-xml.js';
import { formatProviderId, marksVolume, overlayVolume, seedVolume } from './ids.js';
import { tolerate, type HostHandle, type Hosts } from './hosts.js';
import type { Volumes } from './volumes.js';
import { VirshError } from './virsh.js';

/** Maps a libvirt state (virsh's words) and an address to ours: the seed's table. */
export function mapState(state: string, ip: string | undefined): InstanceState {
  const s = state.trim().toLowerCase();
  if (s === 'no state' || s === 'nostate') return 'Provisioning';
  if (s === 'running' || s === 'idle' || s === 'blocked') return ip ? 'Running' : 'Provisioning';
  return 'Stopped';
}

/** Whether a domain in this libvirt state would be Running once it has an address. */
export function isUp(state: string): boolean {
  return mapState(state, '1.1.1.1') === 'Running';
}

/** A domain's vCPUs and memory from its XML (`<vcpu>`, `<memory unit=…>`); undefined when either is missing. */
export function domainSize(xml: string | undefined): { vcpus: number; memoryMiB: number } | undefined {
  if (!xml) return undefined;
  const vcpus = Number(/<vcpu\b[^>]*>\s*(\d+)\s*<\/vcpu>/.exec(xml)?.[1] ?? NaN);
  const memory = /<memory\b(?:[^>]*\bunit=['"](\w+)['"])?[^>]*>\s*(\d+)\s*<\/memory>/.exec(xml);
  if (!memory || !Number.isFinite(vcpus)) return undefined;
  const perMiB: Record<string, number> = { KiB: 1 / 1024, k: 1 / 1024, MiB: 1, M: 1, GiB: 1024, G: 1024 };
  const factor = perMiB[memory[1] ?? 'KiB'];
  if (factor === undefined) return undefined;
  return { vcpus, memoryMiB: Math.ceil(Number(memory[2]) * factor) };
}

/** `virsh nodeinfo` → CPUs and total memory (0 when a field is missing). */
export function parseNodeInfo(text: string): { cpus: number; memoryKiB: number } {
  const cpus = Number(/^CPU\(s\):\s+(\d+)/m.exec(text)?.[1] ?? 0);
  const memoryKiB = Number(/^Memory size:\s+(\d+)\s*KiB/m.exec(text)?.[1] ?? 0);
  return { cpus, memoryKiB };
}

/** `virsh nodememstats` → memory a new guest can have now (free + buffers + cached), or undefined. */
export function parseNodeMemStats(text: string): { availableKiB: number } | undefined {
  const values = new Map<string, number>();
  for (const m of text.matchAll(/^\s*(\w+)\s*:\s*(\d+)\s*KiB/gm)) values.set(m[1]!, Number(m[2]));
  if (!values.has('free')) return undefined;
  return {
    availableKiB: (values.get('free') ?? 0) + (values.get('buffers') ?? 0) + (values.get('cached') ?? 0),
  };
}

/** The contract's instance, its marks read back from the domain (or its marks volume). */
export function toInstance(
  id: string,
  state: InstanceState,
  ip: string | undefined,
  marks: InstanceMarks | undefined,
): Instance {
  return {
    id,
    state,
    ...(state === 'Running' && ip !== undefined ? { ip } : {}),
    uid: marks?.uid ?? '',
    installation: marks?.installation ?? '',
    ...(marks?.createdAt === undefined ? {} : { createdAt: marks.createdAt }),
  };
}

export class Domains {
  constructor(
    private readonly hosts: Hosts,
    private readonly volumes: Volumes,
    private readonly ops: Operations,
  ) {}

  /** The domain's XML; undefined when the host has no such domain. */
  xml(h: HostHandle, name: string, signal: AbortSignal): Promise<string | undefined> {
    return tolerate(this.hosts.virsh(h, ['dumpxml', name], signal), ['no-domain'], undefined);
  }

  state(h: HostHandle, name: string, signal: AbortSignal): Promise<string> {
    return this.hosts.virsh(h, ['domstate', name], signal);
  }

  define(h: HostHandle, xml: string, signal: AbortSignal): Promise<string> {
    return this.hosts.virsh(h, ['define', '/dev/stdin'], signal, Buffer.from(xml, 'utf8'));
  }

  async ensureRunning(h: HostHandle, name: string, signal: AbortSignal): Promise<void> {
    const id = formatProviderId(h.config.name, name);
    const state = (await this.state(h, name, signal)).trim();
    if (state === 'running' || state === 'idle' || state === 'blocked') return;
    let refusal: VirshError | undefined;
    try {
      await this.hosts.virsh(h, ['start', name], signal);
    } catch (err) {
      // A start refused for memory is the host's capacity, not a passing fault (the seed retried it forever).
      if (err instanceof VirshError && err.kind === 'no-memory')
        throw this.ops.fail(
          'QuotaExceeded',
          'create',
          id,
          `host "${h.config.name}" has not enough memory to start the domain`,
          err,
        );
      if (!(err instanceof VirshError && err.kind === 'other')) throw err;
      refusal = err;
    }
    const after = (await this.state(h, name, signal)).trim();
    if (after === 'running' || after === 'idle' || after === 'blocked') return;
    // libvirt sometimes loses QEMU's reason ("process exited while connecting
    // to monitor", on a loaded host): a domain bigger than the host can give
    // is still the host's capacity, not a passing fault.
    const size = domainSize(await this.xml(h, name, signal).catch(() => undefined));
    if (size) await this.checkCapacity(h, size, signal, id);
    throw this.ops.fail(
      'Transient',
      'create',
      id,
      // virsh's own line says why (QEMU's refusal): the operator's first question.
      `domain did not start (state "${after.slice(0, 32)}")${refusal ? `: ${refusal.firstLine()}` : ''}`,
    );
  }

  /**
   * QuotaExceeded, naming the host, when the machine type cannot run there:
   * more vCPUs than the host has, more memory than it has in all, or more
   * than it has free now (free, buffers and page cache; `virsh nodememstats`).
   */
  async checkCapacity(
    h: HostHandle,
    machine: { vcpus: number; memoryMiB: number },
    signal: AbortSignal,
    instance: string,
  ): Promise<void> {
    const node = parseNodeInfo(await this.hosts.virsh(h, ['nodeinfo'], signal));
    const stats = parseNodeMemStats(
      await tolerate(this.hosts.virsh(h, ['nodememstats'], signal), ['other', 'invalid'], ''),
    );
    const wantKiB = machine.memoryMiB * 1024;
    const host = `host "${h.config.name}"`;
    let problem: string | undefined;
    if (node.cpus > 0 && machine.vcpus > node.cpus)
      problem = `${host} has ${node.cpus} CPUs, the machine type asks for ${machine.vcpus} vCPUs`;
    else if (node.memoryKiB > 0 && wantKiB > node.memoryKiB)
      problem = `${host} has ${Math.floor(node.memoryKiB / 1024)} MiB of memory, the machine type asks for ${machine.memoryMiB} MiB`;
    else if (stats !== undefined && wantKiB > stats.availableKiB)
      problem = `${host} has ${Math.floor(stats.availableKiB / 1024)} MiB of memory free, the machine type asks for ${machine.memoryMiB} MiB`;
    if (problem !== undefined) throw this.ops.fail('QuotaExceeded', 'create', instance, problem);
  }

  /** The domain stopped and undefined, and its volumes removed; each step finds itself done on a retry. */
  async remove(h: HostHandle, domain: string, id: string, signal: AbortSignal): Promise<void> {
    await tolerate(
      this.hosts.virsh(h, ['destroy', domain], signal),
      ['no-domain', 'not-running', 'other'],
      '',
    );
    // A managed-save image or snapshot metadata makes a bare undefine fail for ever.
    await tolerate(
      this.hosts.virsh(h, ['undefine', domain, '--nvram', '--managed-save', '--snapshots-metadata'], signal),
      ['no-domain'],
      '',
    );
    for (const vol of [overlayVolume(domain), seedVolume(domain), marksVolume(domain)])
      await this.volumes.remove(h, vol, signal, ['no-volume', 'no-pool']);
    // destroy may have failed for a reason other than "not running": make sure it is gone.
    const still = await tolerate(this.state(h, domain, signal), ['no-domain'], undefined);
    if (still !== undefined)
      throw this.ops.fail('Transient', 'delete', id, 'domain still exists after undefine');
  }
}
