/**
 * The `local` provider: every instance is a real forward proxy (CONNECT and
 * absolute-form HTTP, `startForwardProxy`) listening on its own loopback
 * address 127.x.y.z on the Proxy's `spec.port`, like a VM with its own IP.
 *
 * Backend: one JSON record per instance under `stateDir` (see store.ts), the
 * listeners in this process (listeners.ts). Profile (contract §4): readiness
 * provisioning-window (`startDelaySeconds`, default 0 so immediate);
 * create-return submit (binds and returns); delete-return waits; ip-source
 * assigned-at-create; gc-mark native-labels (record labels, written in the
 * same atomic write that creates the record); created-at written-at-create;
 * list-partial: one unreadable record skipped and logged; quota detected
 * (address range exhausted) plus `failureMode`; not-found status-404 style
 * (ENOENT of the record); primary-key name-is-key (`local/<name>`);
 * provisioning-state marker (`readyAt`); async-ops none; secondary-resources
 * none; timeouts per-call (`operationTimeoutSeconds`, on each whole
 * operation by the operation frame: the work checks the signal between
 * steps and leaves no half-made instance, a record being written last,
 * atomically).
 *
 * Listeners live in the process that owns the state directory (owner lock).
 * Construction does nothing (contract §7); the first call, or `start()`,
 * takes the lock and re-opens a listener for every persisted running
 * instance, so instances survive a control-plane restart.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { KeyedMutex, mapLimit } from '../concurrency.js';
import { foreignOwner, parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Classification, type Operations } from '../shared/operation.js';
import {
  MARK_INSTALLATION,
  MARK_MANAGED,
  MARK_MANAGED_VALUE,
  MARK_UID,
  type CreateRequest,
  type Instance,
  type Provider,
  type ProviderOperation,
  type TargetStatus,
} from '../types.js';
import { checkLocal } from './check.js';
import { parseLoopbackCidr, type LocalConfig, type LoopbackRange } from './config.js';
import { formatLocalProviderId, NAME_RE, parseLocalProviderId, toInstance } from './instance.js';
import { Listeners } from './listeners.js';
import { credentialsDigest } from '../../credentials/proxy-credentials.js';
import {
  acquireOwnerLock,
  ensureStateDir,
  listRecordNames,
  LockHeldError,
  readRecord,
  releaseOwnerLock,
  removeRecord,
  removeStaleTempFiles,
  RECORD_SCHEMA_VERSION,
  writeRecord,
  type LocalInstanceRecord,
} from './store.js';

export { formatLocalProviderId, parseLocalProviderId } from './instance.js';

export const LOCAL_PROVIDER_TYPE = 'local';
/** Records read or listeners opened at once during resume and listByTag. */
const IO_CONCURRENCY = 32;

export interface LocalProviderOptions {
  /** The configured name. */
  name: string;
  config: LocalConfig;
  /** Resolved state directory (the config's `stateDir`, or a default under the state root). */
  stateDir: string;
  logger: Logger;
}

export interface LocalProvider extends Provider {
  readonly stateDir: string;
  /**
   * Takes the owner lock and re-opens listeners for persisted instances.
   * Idempotent; every method calls it first, so calling it is optional
   * (`dev` calls it at startup so instances forward before the first poll).
   */
  start(signal?: AbortSignal): Promise<void>;
  /** Closes every listener and releases the owner lock. Records stay: a later start re-adopts them. */
  close(): Promise<void>;
}

/** Every failure of the local backend is its state directory's (or its owner lock's): Transient. */
function classify(err: unknown): Classification {
  if (err instanceof LockHeldError)
    return { errorClass: 'Transient', summary: `${err.message}; one process per state directory` };
  return { errorClass: 'Transient', summary: 'state directory I/O failed' };
}

export function createLocalProvider(options: LocalProviderOptions): LocalProvider {
  const { name: providerName, config, stateDir } = options;
  const range = parseLoopbackCidr(config.addressRange);
  if (typeof range === 'string') throw new Error(`local provider "${providerName}": addressRange: ${range}`);
  const ops = providerOperations({
    name: providerName,
    type: LOCAL_PROVIDER_TYPE,
    logger: options.logger,
    classify,
    operationTimeoutMs: Math.round(config.operationTimeoutSeconds * 1000),
  });
  if (config.allowNonLoopbackEgress) {
    ops.log.warn('allowNonLoopbackEgress is on: local instances will dial targets off this machine');
  }
  return new LocalProviderImpl(providerName, config, stateDir, range, ops);
}

class LocalProviderImpl implements LocalProvider {
  readonly type = LOCAL_PROVIDER_TYPE;
  /** listByTag is one read of the record directory. */
  readonly capabilities = { cheapListByTag: true, quickCreate: true };
  private readonly mutex = new KeyedMutex();
  private readonly listeners: Listeners;
  private readonly lockToken = randomUUID();
  private starting: Promise<void> | undefined;

  constructor(
    readonly name: string,
    private readonly config: LocalConfig,
    readonly stateDir: string,
    private readonly range: LoopbackRange,
    private readonly ops: Operations,
  ) {
    this.listeners = new Listeners(ops, config, stateDir, range);
  }

  private checkNotAborted(signal: AbortSignal, operation: ProviderOperation, instance: string): void {
    if (signal.aborted) throw this.ops.fail('Transient', operation, instance, 'aborted');
  }

  start(signal: AbortSignal = new AbortController().signal): Promise<void> {
    this.starting ??= this.resume().catch((err: unknown) => {
      this.starting = undefined;
      throw err;
    });
    if (signal.aborted)
      return Promise.reject(this.ops.fail('Transient', 'check', '', 'aborted by the caller'));
    return this.starting;
  }

  private async resume(): Promise<void> {
    await ensureStateDir(this.stateDir);
    await acquireOwnerLock(this.stateDir, this.lockToken);
    const removed = await removeStaleTempFiles(this.stateDir);
    const names = await listRecordNames(this.stateDir);
    let opened = 0;
    await mapLimit(names, IO_CONCURRENCY, async (name) => {
      const read = await readRecord(this.stateDir, name);
      if (read.kind !== 'ok') return;
      this.listeners.note(read.record.address, name);
      if (read.record.state === 'running' && read.record.address !== '') {
        if (await this.listeners.reopen(read.record)) opened++;
      }
    });
    this.ops.log.info(
      { records: names.length, listeners: opened, staleTempFiles: removed, stateDir: this.stateDir },
      'local provider resumed',
    );
  }

  private instance(record: LocalInstanceRecord): Instance {
    return toInstance(record, this.listeners.serving(record));
  }

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, async (s) => {
      if (!NAME_RE.test(req.name))
        throw this.ops.fail('Permanent', 'create', instance, 'name is not a DNS-1123 label');
      if (!Number.isInteger(req.port) || req.port < 1 || req.port > 65535) {
        throw this.ops.fail('Permanent', 'create', instance, `port ${String(req.port)} is not in 1-65535`);
      }
      if (this.config.failureMode !== 'none') {
        const cls = ({ quota: 'QuotaExceeded', permanent: 'Permanent', transient: 'Transient' } as const)[
          this.config.failureMode
        ];
        throw this.ops.fail(
          cls,
          'create',
          instance,
          `simulated failure (failureMode: ${this.config.failureMode})`,
        );
      }
      await this.start();
      this.checkNotAborted(s, 'create', instance);
      return this.mutex.run(req.name, () => this.createLocked(req, s));
    });
  }

  private async createLocked(req: CreateRequest, s: AbortSignal): Promise<string> {
    const id = formatLocalProviderId(req.name);
    const existing = await readRecord(this.stateDir, req.name, s);
    if (existing.kind === 'unreadable') {
      throw this.ops.fail(
        'Permanent',
        'create',
        req.name,
        `an unreadable record holds this name (${existing.reason}); delete ${id}`,
      );
    }
    if (existing.kind === 'ok') {
      const owner = existing.record.labels[MARK_UID] ?? '';
      if (owner !== req.uid) throw foreignOwner(this.ops, req.name, 'an instance', owner, req.uid);
      this.ops.log.debug({ instance: req.name }, 'create: adopted existing instance');
      return id;
    }
    // The record is gone but this process still serves it (someone removed
    // the file by hand): the instance no longer exists, so its listener and
    // address go too, or the re-create would leave the old one serving.
    const stale = this.listeners.take(req.name);
    if (stale !== undefined) {
      this.listeners.release(stale.address, req.name);
      await stale.proxy.close();
      this.ops.log.warn(
        { instance: req.name, address: stale.address, port: stale.port },
        'create: closed the listener of an instance whose record was removed',
      );
    }

    // Bind first, record second: a crash in between leaves no listener (it
    // dies with the process) and no record, so the retry starts clean; a
    // record on disk always had its address bound once.
    const { proxy, address } = await this.listeners.bind(req, s);
    const now = new Date();
    const record: LocalInstanceRecord = {
      schema: RECORD_SCHEMA_VERSION,
      name: req.name,
      labels: {
        [MARK_MANAGED]: MARK_MANAGED_VALUE,
        [MARK_UID]: req.uid,
        [MARK_INSTALLATION]: req.installation,
      },
      createdAt: now.toISOString(),
      readyAt: new Date(now.getTime() + this.config.startDelaySeconds * 1000).toISOString(),
      address,
      port: req.port,
      state: 'running',
      cloudInitBytes: Buffer.byteLength(req.cloudInit ?? '', 'utf8'),
      ...(req.credentials ? { credentialsSha256: credentialsDigest(req.credentials) } : {}),
    };
    try {
      if (s.aborted) throw this.ops.fail('Transient', 'create', req.name, 'aborted');
      await writeRecord(this.stateDir, record);
    } catch (err) {
      this.listeners.release(address, req.name);
      await proxy.close();
      throw err;
    }
    this.listeners.serve(req.name, { proxy, address, port: req.port });
    this.ops.log.info(
      { instance: req.name, uid: req.uid, address, port: req.port, cloudInitBytes: record.cloudInitBytes },
      'created local instance',
    );
    return id;
  }

  /** `fn` on the instance `id` names, once the provider has started, under that instance's lock. */
  private async locked<T>(
    operation: 'get' | 'delete',
    id: string,
    s: AbortSignal,
    fn: (name: string) => Promise<T>,
  ): Promise<T> {
    const name = parseIdOrFail(this.ops, operation, id, parseLocalProviderId, 'local/<instance name>');
    await this.start();
    this.checkNotAborted(s, operation, id);
    return this.mutex.run(name, () => fn(name));
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', id, signal, (s) =>
      this.locked('get', id, s, async (name) => {
        const read = await readRecord(this.stateDir, name, s);
        if (read.kind === 'missing') throw this.ops.fail('NotFound', 'get', id, 'no such instance');
        if (read.kind === 'unreadable') {
          this.ops.log.warn({ instance: name, reason: read.reason }, 'unreadable record reported as Stopped');
          return { id, state: 'Stopped', uid: '', installation: '' };
        }
        let record = read.record;
        if (record.state === 'running' && record.address !== '' && !this.listeners.has(name)) {
          if (!(await this.listeners.reopen(record))) {
            const again = await readRecord(this.stateDir, name, s);
            if (again.kind === 'ok') record = again.record;
          }
        }
        return this.instance(record);
      }),
    );
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', id, signal, (s) =>
      this.locked('delete', id, s, async (name) => {
        const live = this.listeners.take(name);
        if (live !== undefined) await live.proxy.close();
        const read = await readRecord(this.stateDir, name);
        await removeRecord(this.stateDir, name);
        if (read.kind === 'ok') this.listeners.release(read.record.address, name);
        if (read.kind !== 'missing') this.ops.log.info({ instance: name }, 'deleted local instance');
      }),
    );
  }

  listByTag(signal: AbortSignal): Promise<Instance[]> {
    return this.ops.run('list', '', signal, async (s) => {
      await this.start();
      this.checkNotAborted(s, 'list', '');
      const names = await listRecordNames(this.stateDir);
      const reads = await mapLimit(names, IO_CONCURRENCY, async (name) => {
        if (s.aborted) return undefined;
        return { name, read: await readRecord(this.stateDir, name, s) };
      });
      this.checkNotAborted(s, 'list', '');
      const out: Instance[] = [];
      for (const entry of reads) {
        if (entry === undefined || entry.read.kind === 'missing') continue;
        if (entry.read.kind === 'unreadable') {
          this.ops.log.warn(
            { instance: entry.name, reason: entry.read.reason },
            'listByTag: skipped an unreadable record',
          );
          continue;
        }
        if (entry.read.record.labels[MARK_MANAGED] !== MARK_MANAGED_VALUE) continue;
        out.push(this.instance(entry.read.record));
      }
      return out;
    });
  }

  check(signal: AbortSignal): Promise<TargetStatus[]> {
    const { ops, config, stateDir, range, listeners } = this;
    return checkLocal({ provider: this, ops, config, stateDir, range, listeners }, signal);
  }

  async close(): Promise<void> {
    await this.listeners.closeAll();
    if (this.starting !== undefined) {
      this.starting = undefined;
      this.listeners.forgetAddresses();
      await releaseOwnerLock(this.stateDir, this.lockToken);
    }
  }
}
