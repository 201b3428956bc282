/**
 * The `local` provider's backend on disk: one JSON record per instance under
 * `<stateDir>/instances/<name>.json`, written atomically (temp file, fsync,
 * rename), and an owner lock `<stateDir>/owner.lock` naming the one process
 * whose listeners serve those instances.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

export const RECORD_SCHEMA_VERSION = 1;

/**
 * What the "backend" knows about an instance. `labels` carry the GC marks
 * like a cloud's native labels; `state` is the backend's own vocabulary
 * (`running`, `stopped`, `terminated`; anything else reads as Stopped).
 */
export const localRecordSchema = z.looseObject({
  schema: z.literal(RECORD_SCHEMA_VERSION),
  name: z.string(),
  labels: z.record(z.string(), z.string()),
  createdAt: z.string(),
  /** Until then `get` answers Provisioning (config startDelaySeconds at create time). */
  readyAt: z.string(),
  address: z.string(),
  port: z.number().int(),
  state: z.string(),
  /** Set with state `stopped` when the listener could not be re-opened. */
  stoppedReason: z.string().optional(),
  /** The only trace of cloud-init: its size. The text itself is never stored. */
  cloudInitBytes: z.number().int().optional(),
  /**
   * `credentialsDigest` of the credentials the proxy requires (so a
   * re-opened listener asks for the same); the credentials themselves are
   * never stored. Absent: it requires none.
   */
  credentialsSha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});
export type LocalInstanceRecord = z.output<typeof localRecordSchema>;

export function instancesDir(stateDir: string): string {
  return join(stateDir, 'instances');
}

export function instanceRecordPath(stateDir: string, name: string): string {
  return join(instancesDir(stateDir), `${name}.json`);
}

export type ReadResult =
  { kind: 'missing' } | { kind: 'unreadable'; reason: string } | { kind: 'ok'; record: LocalInstanceRecord };

export async function readRecord(stateDir: string, name: string, signal?: AbortSignal): Promise<ReadResult> {
  let text: string;
  try {
    text = await readFile(instanceRecordPath(stateDir, name), { encoding: 'utf8', signal });
  } catch (err) {
    if ((err as { code?: unknown }).code === 'ENOENT') return { kind: 'missing' };
    throw err;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { kind: 'unreadable', reason: 'not JSON' };
  }
  const parsed = localRecordSchema.safeParse(json);
  if (!parsed.success)
    return { kind: 'unreadable', reason: `bad record (${parsed.error.issues[0]?.path.join('.') ?? '?'})` };
  return { kind: 'ok', record: parsed.data };
}

/** Writes `data` as `<dir>/<file>` so a reader sees the old file or the whole new one, never a part. */
export async function writeJsonAtomic(dir: string, file: string, data: unknown): Promise<void> {
  const tmp = join(dir, `.${file}.${randomBytes(6).toString('hex')}.tmp`);
  const fh = await open(tmp, 'wx', 0o600);
  try {
    await fh.writeFile(JSON.stringify(data, null, 2) + '\n', 'utf8');
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, join(dir, file));
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

export async function writeRecord(stateDir: string, record: LocalInstanceRecord): Promise<void> {
  await writeJsonAtomic(instancesDir(stateDir), `${record.name}.json`, record);
}

export async function removeRecord(stateDir: string, name: string): Promise<void> {
  await rm(instanceRecordPath(stateDir, name), { force: true });
}

/** Names of all records (leftover temp files from a crash are not records). */
export async function listRecordNames(stateDir: string): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(instancesDir(stateDir));
  } catch (err) {
    if ((err as { code?: unknown }).code === 'ENOENT') return [];
    throw err;
  }
  return entries
    .filter((f) => f.endsWith('.json') && !f.startsWith('.'))
    .map((f) => f.slice(0, -'.json'.length))
    .sort();
}

export async function removeStaleTempFiles(stateDir: string): Promise<number> {
  const entries = await readdir(instancesDir(stateDir));
  const stale = entries.filter((f) => f.startsWith('.') && f.endsWith('.tmp'));
  await Promise.all(stale.map((f) => rm(join(instancesDir(stateDir), f), { force: true })));
  return stale.length;
}

// ---------------------------------------------------------------------------
// Owner lock

export interface OwnerLock {
  pid: number;
  token: string;
  acquiredAt: string;
}

export class LockHeldError extends Error {
  override readonly name = 'LockHeldError';
  constructor(readonly holderPid: number) {
    super(`state directory is served by another live process (pid ${holderPid})`);
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: unknown }).code === 'EPERM';
  }
}

/**
 * Takes `<stateDir>/owner.lock`. A lock whose process is gone (a killed
 * worker) is taken over; a lock held by a live process, or by another
 * provider object in this process, is refused. Not guarded: two processes
 * taking over the same stale lock in the same instant.
 */
export async function acquireOwnerLock(stateDir: string, token: string): Promise<void> {
  const path = join(stateDir, 'owner.lock');
  const mine: OwnerLock = { pid: process.pid, token, acquiredAt: new Date().toISOString() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o600);
      try {
        await fh.writeFile(JSON.stringify(mine) + '\n', 'utf8');
      } finally {
        await fh.close();
      }
      return;
    } catch (err) {
      if ((err as { code?: unknown }).code !== 'EEXIST') throw err;
    }
    let holder: Partial<OwnerLock> = {};
    try {
      holder = JSON.parse(await readFile(path, 'utf8')) as Partial<OwnerLock>;
    } catch {
      // unreadable: a crash while writing it; take it over
    }
    if (holder.token === token) return;
    if (typeof holder.pid === 'number' && pidAlive(holder.pid)) throw new LockHeldError(holder.pid);
    await rm(path, { force: true });
  }
  throw new Error('could not take the owner lock');
}

export async function releaseOwnerLock(stateDir: string, token: string): Promise<void> {
  const path = join(stateDir, 'owner.lock');
  try {
    const holder = JSON.parse(await readFile(path, 'utf8')) as Partial<OwnerLock>;
    if (holder.token === token) await rm(path, { force: true });
  } catch {
    // gone or unreadable: nothing of ours to release
  }
}

export async function ensureStateDir(stateDir: string): Promise<void> {
  await mkdir(instancesDir(stateDir), { recursive: true, mode: 0o700 });
}
