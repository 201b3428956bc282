/**
 * The volumes a create leaves in a host's storage pool: the marks volume
 * (written first, so whatever a crash leaves stays attributable), the
 * overlay on the base image, the seed ISO; and the pool's free space,
 * checked before anything large is written (libvirt reports a full pool as
 * an ordinary error: a seed gap).
 */
import type { Operations } from '../shared/operation.js';
import { buildOverlayVolumeXml, buildRawVolumeXml, type InstanceMarks } from './domain-xml.js';
import { formatProviderId, marksVolume, overlayVolume } from './ids.js';
import { tolerate, type HostHandle, type Hosts } from './hosts.js';
import type { VirshErrorKind } from './virsh.js';

export const GiB = 1024 ** 3;

/** `virsh pool-info --bytes` → fields. */
export function parsePoolInfo(text: string): { state: string; capacity: number; available: number } {
  const field = (name: string) => new RegExp(`^${name}:\\s+(.*)$`, 'm').exec(text)?.[1]?.trim() ?? '';
  return {
    state: field('State'),
    capacity: Number(field('Capacity').split(/\s/)[0]) || 0,
    available: Number(field('Available').split(/\s/)[0]) || 0,
  };
}

/** A marks volume's JSON → marks; undefined when unreadable. */
export function parseMarksJson(text: string): InstanceMarks | undefined {
  try {
    const j = JSON.parse(text.trim()) as Record<string, unknown>;
    const created = typeof j.createdAt === 'string' ? new Date(j.createdAt) : undefined;
    return {
      managed: j.managed === true,
      uid: typeof j.uid === 'string' ? j.uid : '',
      installation: typeof j.installation === 'string' ? j.installation : '',
      ...(created !== undefined && !Number.isNaN(created.getTime()) ? { createdAt: created } : {}),
    };
  } catch {
    return undefined;
  }
}

export class Volumes {
  constructor(
    private readonly hosts: Hosts,
    private readonly ops: Operations,
    /** The overlay's size (`diskSizeGb`). */
    private readonly diskBytes: number,
  ) {}

  async poolInfo(h: HostHandle, signal: AbortSignal) {
    return parsePoolInfo(await this.hosts.virsh(h, ['pool-info', '--bytes', h.config.pool], signal));
  }

  /** QuotaExceeded when the pool cannot take `bytes` more. */
  async checkSpace(h: HostHandle, bytes: number, signal: AbortSignal, instance: string): Promise<void> {
    const info = await this.poolInfo(h, signal);
    if (info.available < bytes)
      throw this.ops.fail(
        'QuotaExceeded',
        'create',
        instance,
        `storage pool "${h.config.pool}" on host "${h.config.name}" has ${(info.available / GiB).toFixed(2)} GiB free, needs ${(bytes / GiB).toFixed(2)} GiB`,
      );
  }

  /** The volume's path; undefined when the pool has no such volume. */
  async path(h: HostHandle, vol: string, signal: AbortSignal): Promise<string | undefined> {
    const path = await tolerate(
      this.hosts.virsh(h, ['vol-path', '--pool', h.config.pool, vol], signal),
      ['no-volume'],
      undefined,
    );
    return path?.trim();
  }

  /** Removes the volume; one already gone (or, with `gone`, whatever those kinds say) is success. */
  remove(
    h: HostHandle,
    vol: string,
    signal: AbortSignal,
    gone: readonly VirshErrorKind[] = ['no-volume'],
  ): Promise<string> {
    return tolerate(this.hosts.virsh(h, ['vol-delete', '--pool', h.config.pool, vol], signal), gone, '');
  }

  /** Creates (replacing) a raw volume and streams `data` into it; returns its path. */
  async upload(h: HostHandle, vol: string, data: Buffer, signal: AbortSignal): Promise<string> {
    const pool = h.config.pool;
    await this.remove(h, vol, signal);
    await this.hosts.virsh(
      h,
      ['vol-create', '--pool', pool, '/dev/stdin'],
      signal,
      Buffer.from(buildRawVolumeXml(vol, data.length), 'utf8'),
    );
    await this.hosts.virsh(h, ['vol-upload', '--pool', pool, vol, '/dev/stdin'], signal, data);
    return (await this.hosts.virsh(h, ['vol-path', '--pool', h.config.pool, vol], signal)).trim();
  }

  /** A volume's text (`vol-download`); undefined when the pool has no such volume. */
  download(h: HostHandle, vol: string, signal: AbortSignal): Promise<string | undefined> {
    return tolerate(
      this.hosts.virsh(h, ['vol-download', '--pool', h.config.pool, vol, '/dev/stdout'], signal),
      ['no-volume'],
      undefined,
    );
  }

  /** The marks an instance's marks volume holds; undefined when there is none (or it is unreadable). */
  async readMarks(h: HostHandle, name: string, signal: AbortSignal): Promise<InstanceMarks | undefined> {
    const text = await this.download(h, marksVolume(name), signal);
    return text === undefined ? undefined : parseMarksJson(text);
  }

  /** The instance's overlay on `basePath` (reused when it exists); its path. */
  async ensureOverlay(
    h: HostHandle,
    name: string,
    basePath: string,
    baseFormat: 'qcow2' | 'raw',
    signal: AbortSignal,
  ): Promise<string> {
    const vol = overlayVolume(name);
    const path = await this.path(h, vol, signal);
    if (path !== undefined) return path;
    await this.checkSpace(h, this.diskBytes, signal, formatProviderId(h.config.name, name));
    const xml = buildOverlayVolumeXml({ name: vol, capacityBytes: this.diskBytes, basePath, baseFormat });
    await this.hosts.virsh(
      h,
      ['vol-create', '--pool', h.config.pool, '/dev/stdin'],
      signal,
      Buffer.from(xml, 'utf8'),
    );
    return (await this.hosts.virsh(h, ['vol-path', '--pool', h.config.pool, vol], signal)).trim();
  }
}
