/**
 * The `local` provider: every instance is a real forward proxy (CONNECT and
 * absolute-form HTTP, `startForwardProxy`) listening on its own loopback
 * address 127.x.y.z on the Proxy's `spec.port`, like a VM with its own IP.
 *
 * Backend: one JSON record per instance under `stateDir` (see store.ts), the
 * listeners in this process. Profile (contract §4): readiness
 * provisioning-window (`startDelaySeconds`, default 0 so immediate);
 * create-return submit (binds and returns); delete-return waits; ip-source
 * assigned-at-create; gc-mark native-labels (record labels, written in the
 * same atomic write that creates the record); created-at written-at-create;
 * list-partial: one unreadable record skipped and logged; quota detected
 * (address range exhausted) plus `failureMode`; not-found status-404 style
 * (ENOENT of the record); primary-key name-is-key (`local/<name>`);
 * provisioning-state marker (`readyAt`); async-ops none; secondary-resources
 * none; timeouts per-call (`operationTimeoutSeconds`).
 *
 * Listeners live in the process that owns the state directory (owner lock).
 * Construction does nothing (contract §7); the first call, or `start()`,
 * takes the lock and re-opens a listener for every persisted running
 * instance, so instances survive a control-plane restart.
 */
import { randomUUID } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { KeyedMutex, mapLimit } from '../concurrency.js';
import type { Logger } from 'pino';
import { ProviderError } from '../errors.js';
import {
  MARK_INSTALLATION,
  MARK_MANAGED,
  MARK_MANAGED_VALUE,
  MARK_UID,
  type CreateRequest,
  type Instance,
  type InstanceState,
  type Provider,
  type ProviderOperation,
  type TargetStatus,
} from '../types.js';
import {
  candidateAddresses,
  formatIPv4,
  parseLoopbackCidr,
  type LocalConfig,
  type LoopbackRange,
} from './config.js';
import { startForwardProxy, type ForwardProxy } from './forward-proxy.js';
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
import { providerCall } from '../../tracing/seam.js';
import { cloudInitContentHash, specHash } from '../spec-hash.js';
import { operations, type Operations } from '../operation.js';
import { timeoutSignal } from '../timeout-signal.js';

export const LOCAL_PROVIDER_TYPE = 'local';
const ID_PREFIX = 'local/';
const NAME_RE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** EADDRINUSE on this many candidate addresses in one create: give up (Transient). */
const MAX_BIND_ATTEMPTS = 16;
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

export function formatLocalProviderId(name: string): string {
  return ID_PREFIX + name;
}

/** The instance name in a providerID, or undefined when the ID is malformed. */
export function parseLocalProviderId(id: string): string | undefined {
  if (!id.startsWith(ID_PREFIX)) return undefined;
  const name = id.slice(ID_PREFIX.length);
  return NAME_RE.test(name) ? name : undefined;
}

function errCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * A listen failure on one of our addresses. EADDRINUSE: someone else holds
 * that address and port; another address may be free. EADDRNOTAVAIL, EACCES,
 * EINVAL: the range cannot be bound on this machine (not Linux, or not a
 * loopback range, or a privileged port): a config problem, Permanent.
 * Anything else (EMFILE...) may pass: Transient.
 */
function listenFailure(err: unknown): 'in-use' | 'Permanent' | 'Transient' {
  const code = errCode(err);
  if (code === 'EADDRINUSE') return 'in-use';
  if (code === 'EADDRNOTAVAIL' || code === 'EACCES' || code === 'EINVAL') return 'Permanent';
  return 'Transient';
}

export function createLocalProvider(options: LocalProviderOptions): LocalProvider {
  const { name: providerName, config, stateDir } = options;
  const range = parseLoopbackCidr(config.addressRange);
  if (typeof range === 'string') throw new Error(`local provider "${providerName}": addressRange: ${range}`);
  const log = options.logger.child({ provider: providerName, providerType: LOCAL_PROVIDER_TYPE });
  if (config.allowNonLoopbackEgress) {
    log.warn('allowNonLoopbackEgress is on: local instances will dial targets off this machine');
  }
  return new LocalProviderImpl(providerName, config, stateDir, range, log);
}

interface Listener {
  proxy: ForwardProxy;
  address: string;
  port: number;
}

class LocalProviderImpl implements LocalProvider {
  readonly type = LOCAL_PROVIDER_TYPE;
  /** listByTag is one read of the record directory. */
  readonly capabilities = { cheapListByTag: true, quickCreate: true };
  private readonly mutex = new KeyedMutex();
  private readonly listeners = new Map<string, Listener>();
  /** Addresses held by records this process knows about: the allocator's index. */
  private readonly addressOwner = new Map<string, string>();
  private readonly lockToken = randomUUID();
  private starting: Promise<void> | undefined;

  constructor(
    readonly name: string,
    private readonly config: LocalConfig,
    readonly stateDir: string,
    private readonly range: LoopbackRange,
    private readonly log: Logger,
  ) {
    // Failures take the common frame's shape; `run` below bounds operations itself (see there).
    this.ops = operations({
      provider: name,
      log,
      classify: (operation, instance, err) =>
        this.ops.fail('Transient', operation, instance, 'state directory I/O failed', err),
    });
  }

  private readonly ops: Operations;

  // -- plumbing -------------------------------------------------------------

  /**
   * Runs `fn` bounded by the caller's signal and by operationTimeoutSeconds.
   * The caller's promise settles as soon as either fires; the work itself
   * checks the signal between steps and leaves no half-made instance (a
   * record is written last, atomically).
   */
  private run<T>(
    operation: ProviderOperation,
    instance: string,
    signal: AbortSignal,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    if (signal.aborted)
      return Promise.reject(this.ops.fail('Transient', operation, instance, 'aborted by the caller'));
    const timeoutMs = Math.round(this.config.operationTimeoutSeconds * 1000);
    const deadline = timeoutSignal(signal, timeoutMs);
    const bounded = deadline.signal;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () =>
        reject(
          deadline.timedOut()
            ? this.ops.fail('Transient', operation, instance, `timed out after ${timeoutMs} ms`)
            : this.ops.fail('Transient', operation, instance, 'aborted by the caller'),
        );
      bounded.addEventListener('abort', onAbort, { once: true });
      fn(bounded)
        .then(resolve, (err: unknown) => {
          const wrapped =
            err instanceof ProviderError
              ? err
              : err instanceof LockHeldError
                ? this.ops.fail(
                    'Transient',
                    operation,
                    instance,
                    `${err.message}; one process per state directory`,
                  )
                : this.ops.fail('Transient', operation, instance, 'state directory I/O failed', err);
          // NotFound is an answer (polling to NotFound is normal), not a failure.
          const level = wrapped.errorClass === 'NotFound' ? 'debug' : 'warn';
          if (!bounded.aborted) this.log[level]({ error: wrapped.toJSON() }, `${operation} failed`);
          reject(wrapped);
        })
        .finally(() => {
          bounded.removeEventListener('abort', onAbort);
          deadline.clear();
        });
    });
  }

  private checkNotAborted(signal: AbortSignal, operation: ProviderOperation, instance: string): void {
    if (signal.aborted) throw this.ops.fail('Transient', operation, instance, 'aborted');
  }

  private parseId(operation: ProviderOperation, id: string): string {
    const name = parseLocalProviderId(id);
    if (name === undefined) {
      throw this.ops.fail(
        'Permanent',
        operation,
        JSON.stringify(id.slice(0, 80)),
        'malformed providerID (want local/<instance name>)',
      );
    }
    return name;
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
      this.addressOwner.set(read.record.address, name);
      if (read.record.state === 'running' && read.record.address !== '') {
        if (await this.reopen(read.record)) opened++;
      }
    });
    this.log.info(
      { records: names.length, listeners: opened, staleTempFiles: removed, stateDir: this.stateDir },
      'local provider resumed',
    );
  }

  /**
   * Re-opens the listener of a persisted running instance. When its address
   * cannot be bound any more, the instance is dead and will not recover by
   * itself: the record says `stopped`, so `get` reports Stopped and the
   * workflow replaces it (on a fresh address). Transient failures leave it
   * Provisioning; the next `get` tries again.
   */
  private async reopen(record: LocalInstanceRecord): Promise<boolean> {
    if (this.listeners.has(record.name)) return true;
    try {
      const proxy = await this.listen(record.address, record.port);
      this.listeners.set(record.name, { proxy, address: record.address, port: record.port });
      return true;
    } catch (err) {
      const kind = listenFailure(err);
      const code = errCode(err) ?? 'error';
      this.log.warn(
        { instance: record.name, address: record.address, port: record.port, code },
        'cannot re-open listener',
      );
      if (kind !== 'Transient') {
        await writeRecord(this.stateDir, { ...record, state: 'stopped', stoppedReason: `listen ${code}` });
      }
      return false;
    }
  }

  private listen(address: string, port: number): Promise<ForwardProxy> {
    return startForwardProxy({
      host: address,
      port,
      behaviour: 'forward',
      allowNonLoopback: this.config.allowNonLoopbackEgress,
    });
  }

  private toInstance(record: LocalInstanceRecord): Instance {
    const createdAt = new Date(record.createdAt);
    const readyAt = Date.parse(record.readyAt);
    let state: InstanceState;
    switch (record.state) {
      case 'running': {
        const live = this.listeners.get(record.name);
        const serving = live !== undefined && live.address === record.address && live.port === record.port;
        state = record.address !== '' && serving && !(Date.now() < readyAt) ? 'Running' : 'Provisioning';
        break;
      }
      case 'terminated':
        state = 'Terminated';
        break;
      default:
        // 'stopped' and anything this version does not recognise.
        state = 'Stopped';
    }
    const instance: Instance = {
      id: formatLocalProviderId(record.name),
      state,
      uid: record.labels[MARK_UID] ?? '',
      installation: record.labels[MARK_INSTALLATION] ?? '',
    };
    if (state === 'Running') instance.ip = record.address;
    if (!Number.isNaN(createdAt.getTime())) instance.createdAt = createdAt;
    return instance;
  }

  // -- the contract ---------------------------------------------------------

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.run('create', instance, signal, async (s) => {
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
      if (owner !== req.uid) {
        throw this.ops.fail(
          'Permanent',
          'create',
          req.name,
          `an instance with this name belongs to another owner (uid mark "${owner}", want "${req.uid}"); not adopting it`,
        );
      }
      this.log.debug({ instance: req.name }, 'create: adopted existing instance');
      return id;
    }
    // The record is gone but this process still serves it (someone removed
    // the file by hand): the instance no longer exists, so its listener and
    // address go too, or the re-create would leave the old one serving.
    const stale = this.listeners.get(req.name);
    if (stale !== undefined) {
      this.listeners.delete(req.name);
      if (this.addressOwner.get(stale.address) === req.name) this.addressOwner.delete(stale.address);
      await stale.proxy.close();
      this.log.warn(
        { instance: req.name, address: stale.address, port: stale.port },
        'create: closed the listener of an instance whose record was removed',
      );
    }

    // Bind first, record second: a crash in between leaves no listener (it
    // dies with the process) and no record, so the retry starts clean; a
    // record on disk always had its address bound once.
    const { proxy, address } = await this.mutex.run('\0allocate', () => this.bindFreshAddress(req, s));
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
    };
    try {
      if (s.aborted) throw this.ops.fail('Transient', 'create', req.name, 'aborted');
      await writeRecord(this.stateDir, record);
    } catch (err) {
      this.addressOwner.delete(address);
      await proxy.close();
      throw err;
    }
    this.listeners.set(req.name, { proxy, address, port: req.port });
    this.log.info(
      { instance: req.name, uid: req.uid, address, port: req.port, cloudInitBytes: record.cloudInitBytes },
      'created local instance',
    );
    return id;
  }

  private async bindFreshAddress(
    req: CreateRequest,
    s: AbortSignal,
  ): Promise<{ proxy: ForwardProxy; address: string }> {
    let attempts = 0;
    // The first candidate derives from the name AND the spec: a retried create
    // of one spec lands on the same address, while a replacement (a spec
    // edit) usually moves to another, as a new VM gets a new egress IP, so
    // rotation is visible on one machine.
    const slotKey = `${req.name}/${specHash({
      placement: req.placement,
      port: req.port,
      cloudInitSha256: cloudInitContentHash(req.cloudInit),
    })}`;
    for (const address of candidateAddresses(this.range, slotKey)) {
      if (this.addressOwner.has(address)) continue;
      if (attempts >= MAX_BIND_ATTEMPTS) {
        throw this.ops.fail(
          'Transient',
          'create',
          req.name,
          `${attempts} candidate addresses in ${this.config.addressRange} are in use by other processes`,
        );
      }
      if (s.aborted) throw this.ops.fail('Transient', 'create', req.name, 'aborted');
      attempts++;
      try {
        const proxy = await this.listen(address, req.port);
        this.addressOwner.set(address, req.name);
        return { proxy, address };
      } catch (err) {
        const kind = listenFailure(err);
        if (kind === 'in-use') {
          this.log.debug(
            { instance: req.name, address, port: req.port },
            'address in use, trying the next one',
          );
          continue;
        }
        throw this.ops.fail(kind, 'create', req.name, `cannot listen on ${address}:${req.port}`, err);
      }
    }
    throw this.ops.fail(
      'QuotaExceeded',
      'create',
      req.name,
      `address range ${this.config.addressRange} is exhausted`,
    );
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.run('get', id, signal, async (s) => {
      const name = this.parseId('get', id);
      await this.start();
      this.checkNotAborted(s, 'get', id);
      return this.mutex.run(name, async () => {
        const read = await readRecord(this.stateDir, name, s);
        if (read.kind === 'missing') throw this.ops.fail('NotFound', 'get', id, 'no such instance');
        if (read.kind === 'unreadable') {
          this.log.warn({ instance: name, reason: read.reason }, 'unreadable record reported as Stopped');
          return { id, state: 'Stopped', uid: '', installation: '' };
        }
        let record = read.record;
        if (record.state === 'running' && record.address !== '' && !this.listeners.has(name)) {
          if (!(await this.reopen(record))) {
            const again = await readRecord(this.stateDir, name, s);
            if (again.kind === 'ok') record = again.record;
          }
        }
        return this.toInstance(record);
      });
    });
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.run('delete', id, signal, async (s) => {
      const name = this.parseId('delete', id);
      await this.start();
      this.checkNotAborted(s, 'delete', id);
      await this.mutex.run(name, async () => {
        const live = this.listeners.get(name);
        if (live !== undefined) {
          this.listeners.delete(name);
          await live.proxy.close();
        }
        const read = await readRecord(this.stateDir, name);
        await removeRecord(this.stateDir, name);
        if (read.kind === 'ok' && this.addressOwner.get(read.record.address) === name) {
          this.addressOwner.delete(read.record.address);
        }
        if (read.kind !== 'missing') this.log.info({ instance: name }, 'deleted local instance');
      });
    });
  }

  listByTag(signal: AbortSignal): Promise<Instance[]> {
    return this.run('list', '', signal, async (s) => {
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
          this.log.warn(
            { instance: entry.name, reason: entry.read.reason },
            'listByTag: skipped an unreadable record',
          );
          continue;
        }
        if (entry.read.record.labels[MARK_MANAGED] !== MARK_MANAGED_VALUE) continue;
        out.push(this.toInstance(entry.read.record));
      }
      return out;
    });
  }

  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const firstAddress = formatIPv4(
      this.range.base + 1 === 0x7f000001 ? this.range.base + 2 : this.range.base + 1,
    );
    return [
      await this.checkTarget('state-dir', this.stateDir, signal, async () => {
        await ensureStateDir(this.stateDir);
        const probe = join(this.stateDir, `.check-${randomUUID()}.tmp`);
        await writeFile(probe, 'ok\n', { flag: 'wx' });
        await rm(probe, { force: true });
        return { instances: String((await listRecordNames(this.stateDir)).length) };
      }),
      await this.checkTarget('loopback', `${this.config.addressRange}`, signal, async () => {
        await new Promise<void>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen({ host: firstAddress, port: 0, exclusive: true }, () =>
            server.close(() => resolve()),
          );
        });
        return { listeners: String(this.listeners.size), probedAddress: firstAddress };
      }),
    ];
  }

  private async checkTarget(
    target: string,
    address: string,
    signal: AbortSignal,
    probe: () => Promise<Record<string, string>>,
  ): Promise<TargetStatus> {
    const started = Date.now();
    const base = { name: target, address };
    if (signal.aborted)
      return { ...base, ready: false, reason: 'Timeout', message: 'check aborted before it ran' };
    try {
      // create/get/delete/list are spans through buildProviders' WithTracing; a check is not an
      // operation it wraps, so the probe is a span of its own here.
      const details = await providerCall(
        this,
        'check',
        () => this.run('check', target, signal, () => probe()),
        {
          operation: 'check',
        },
      );
      return { ...base, ready: true, reason: 'Reachable', latencyMillis: Date.now() - started, details };
    } catch (err) {
      const code = err instanceof ProviderError ? err.cause?.code : errCode(err);
      const timedOut =
        signal.aborted || (err instanceof ProviderError && /timed out|aborted/.test(err.message));
      const reason = timedOut
        ? 'Timeout'
        : code === 'EACCES' || code === 'EPERM' || code === 'EROFS'
          ? 'Forbidden'
          : 'Unreachable';
      const message = timedOut
        ? 'check did not finish in time'
        : `${target} probe failed (${code ?? 'error'})`;
      return { ...base, ready: false, reason, message, latencyMillis: Date.now() - started };
    }
  }

  async close(): Promise<void> {
    const open = [...this.listeners.values()];
    this.listeners.clear();
    await Promise.allSettled(open.map((l) => l.proxy.close()));
    if (this.starting !== undefined) {
      this.starting = undefined;
      this.addressOwner.clear();
      await releaseOwnerLock(this.stateDir, this.lockToken);
    }
  }
}
