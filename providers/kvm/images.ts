/**
 * Base images in a host's pool: which image a create wants (a configured
 * key or an http(s) URL), and one complete, verified copy of it per host,
 * fetched through the operator and published by a marker volume so that of
 * two workers fetching at once one wins and the other uses its copy.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { Logger } from 'pino';
import { KeyedMutex } from '../concurrency.js';
import type { Operations } from '../shared/operation.js';
import { pickPlacement } from '../shared/placement.js';
import { timeoutSignal } from '../timeout-signal.js';
import { isHttpUrl, type KvmConfig } from './config.js';
import { buildRawVolumeXml } from './domain-xml.js';
import { baseVolume, markerVolume, urlImageKey } from './ids.js';
import type { HostHandle, Hosts } from './hosts.js';
import { GiB, type Volumes } from './volumes.js';
import { VirshError } from './virsh.js';

export interface ResolvedImage {
  key: string;
  url: string;
  sha256?: string | undefined;
  format: 'qcow2' | 'raw';
  firmware: 'uefi' | 'bios';
}

/** placement.image: a configured image (the only one when none is given), or an http(s) URL. */
export function resolveImage(
  ops: Operations,
  images: KvmConfig['images'],
  instance: string,
  value: string | undefined,
): ResolvedImage {
  if (value !== undefined && value !== '' && images[value] === undefined) {
    if (isHttpUrl(value))
      return { key: urlImageKey(value), url: value, format: 'qcow2', firmware: 'uefi', sha256: undefined };
    throw ops.fail(
      'Permanent',
      'create',
      instance,
      `placement.image "${value.slice(0, 64)}" is neither a configured image nor an http(s) URL`,
    );
  }
  const key = pickPlacement(ops, instance, 'image', value, Object.keys(images));
  return { key, ...images[key]! };
}

/**
 * A base image's marker: `<sha256> <volume>`, or `<sha256>` alone as earlier
 * versions wrote it (the base then has its fixed name). The volume must be
 * one of this base's copies; anything else is unreadable.
 */
export function parseBaseMarker(
  text: string | undefined,
  base: string,
): { digest: string; volume: string } | undefined {
  const words = (text ?? '').trim().split(/\s+/);
  const [digest, volume = base, ...rest] = words;
  if (digest === undefined || !/^[0-9a-f]{64}$/.test(digest) || rest.length > 0) return undefined;
  if (
    volume !== base &&
    !(volume.startsWith(`${base}.`) && /^[0-9a-f]{8}$/.test(volume.slice(base.length + 1)))
  )
    return undefined;
  return { digest, volume };
}

export class Images {
  /** In-process: one download per image per host. */
  private readonly locks = new KeyedMutex();

  constructor(
    private readonly hosts: Hosts,
    private readonly volumes: Volumes,
    private readonly ops: Operations,
    private readonly config: Pick<KvmConfig, 'downloadTimeoutSeconds' | 'diskSizeGb'>,
  ) {}

  /** The path of a complete copy of `image` in the host's pool, fetched when there is none. */
  async ensure(h: HostHandle, image: ResolvedImage, log: Logger, signal: AbortSignal): Promise<string> {
    const base = baseVolume(image.key, image.format);
    const marker = markerVolume(base);
    return this.locks.run(`${h.config.name}/${base}`, async () => {
      const published = await this.publishedBase(h, base, marker, image.sha256, signal);
      if (published !== undefined) return published;
      return this.fetch(h, image, base, marker, log, signal);
    });
  }

  /**
   * No complete copy: fetch, streaming through the operator, into a volume
   * of this call's own; nothing another worker may be writing is touched.
   */
  private async fetch(
    h: HostHandle,
    image: ResolvedImage,
    base: string,
    marker: string,
    log: Logger,
    signal: AbortSignal,
  ): Promise<string> {
    const pool = h.config.pool;
    const downloadMs = this.config.downloadTimeoutSeconds * 1000;
    const copy = `${base}.${randomBytes(4).toString('hex')}`;
    const started = Date.now();
    log.info({ image: image.key }, 'fetching base image into host pool');
    const download = timeoutSignal(signal, downloadMs);
    const bound = download.signal;
    try {
      let res: Response;
      try {
        res = await fetch(image.url, { signal: bound });
      } catch (err) {
        throw this.ops.fail('Transient', 'create', image.key, 'image download failed', err);
      }
      if (!res.ok || res.body === null) {
        void res.body?.cancel();
        throw this.ops.fail(
          res.status >= 400 && res.status < 500 && res.status !== 429 ? 'Permanent' : 'Transient',
          'create',
          image.key,
          `image download answered HTTP ${res.status}`,
        );
      }
      const length = Number(res.headers.get('content-length') ?? '0') || 0;
      const need = length + this.config.diskSizeGb * GiB;
      try {
        await this.volumes.checkSpace(h, need, signal, image.key);
      } catch (err) {
        void res.body.cancel();
        throw err;
      }
      await this.hosts.virsh(
        h,
        ['vol-create', '--pool', pool, '/dev/stdin'],
        signal,
        Buffer.from(buildRawVolumeXml(copy, 0), 'utf8'),
      );
      const dropCopy = () => this.volumes.remove(h, copy, signal);
      const hash = createHash('sha256');
      let bytes = 0;
      const hashing = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          hash.update(chunk);
          bytes += chunk.length;
          cb(null, chunk);
        },
      });
      const body = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>).pipe(hashing);
      try {
        await this.hosts.virsh(
          h,
          ['vol-upload', '--pool', pool, copy, '/dev/stdin'],
          bound,
          body,
          downloadMs,
        );
      } catch (err) {
        await dropCopy().catch(() => undefined);
        throw err;
      }
      const got = hash.digest('hex');
      if (image.sha256 !== undefined && got !== image.sha256) {
        await dropCopy();
        throw this.ops.fail(
          'Permanent',
          'create',
          image.key,
          `downloaded image sha256 ${got} does not match the configured sha256`,
        );
      }
      const path = await this.publish(h, base, marker, copy, got, signal, image.key);
      if (path === undefined) {
        // Another worker published first: use its copy, drop ours.
        await dropCopy();
        const theirs = await this.publishedBase(h, base, marker, image.sha256, signal);
        if (theirs !== undefined) return theirs;
        throw this.ops.fail(
          'Transient',
          'create',
          image.key,
          'another worker is publishing this base image; retried',
        );
      }
      log.info({ image: image.key, bytes, durationMs: Date.now() - started }, 'base image cached');
      return path;
    } finally {
      download.clear();
    }
  }

  /**
   * The path of the base image the marker names, when the marker is complete
   * and its digest is the one wanted. A marker holds `<sha256> <volume>`, or
   * only `<sha256>` when an earlier version wrote it (the base then has the
   * fixed name).
   */
  private async publishedBase(
    h: HostHandle,
    base: string,
    marker: string,
    sha256: string | undefined,
    signal: AbortSignal,
  ): Promise<string | undefined> {
    const named = parseBaseMarker(await this.volumes.download(h, marker, signal), base);
    if (named === undefined || (sha256 !== undefined && sha256 !== named.digest)) return undefined;
    return this.volumes.path(h, named.volume, signal);
  }

  /**
   * Publishes `copy` as the base by creating the marker: libvirt refuses a
   * second volume of one name, so of two workers that fetched the same image
   * one wins and the other uses the winner's copy. Only libvirt calls, no
   * file operations: the SSH user needs no write access to the pool's
   * directory (a user in the `libvirt` group has none on a stock host). The
   * marker is made whole with its text by cloning a volume of this call's own
   * that already holds it. Returns the copy's path, or undefined when the
   * marker was there first (a marker left unreadable by a worker that died
   * between its creation and its text is removed, so the next try publishes).
   */
  private async publish(
    h: HostHandle,
    base: string,
    marker: string,
    copy: string,
    digest: string,
    signal: AbortSignal,
    imageKey: string,
  ): Promise<string | undefined> {
    const pool = h.config.pool;
    const candidate = `${marker}.${randomBytes(4).toString('hex')}`;
    await this.volumes.upload(h, candidate, Buffer.from(`${digest} ${copy}\n`, 'utf8'), signal);
    const createMarker = () =>
      this.hosts
        .virsh(
          h,
          ['vol-create-from', '--pool', pool, '--inputpool', pool, '/dev/stdin', candidate],
          signal,
          Buffer.from(buildRawVolumeXml(marker, 0), 'utf8'),
        )
        .then(
          () => true,
          (err: unknown) => {
            if (err instanceof VirshError && err.kind === 'exists') return false;
            throw err;
          },
        );
    const dropMarker = () => this.volumes.remove(h, marker, signal);
    try {
      if (!(await createMarker())) {
        const theirs = parseBaseMarker(await this.volumes.download(h, marker, signal), base);
        if (theirs?.digest === digest) return undefined;
        if (theirs === undefined) {
          // Unreadable: a worker died between the marker's creation and its text (or is in it now).
          this.ops.log.warn({ image: imageKey }, 'base image marker unreadable; removed for the next try');
          await dropMarker();
          return undefined;
        }
        // A marker for other bytes: the image under this key changed. The old
        // copy stays (overlays made from it still read it); the marker moves on.
        this.ops.log.info({ image: imageKey }, 'base image changed; publishing the new one');
        await dropMarker();
        if (!(await createMarker())) return undefined;
      }
    } finally {
      await this.volumes.remove(h, candidate, signal, ['no-volume', 'other']).catch(() => undefined);
    }
    return (await this.hosts.virsh(h, ['vol-path', '--pool', pool, copy], signal)).trim();
  }
}
