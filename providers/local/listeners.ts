/**
 * The forward proxies this process serves, one per running instance on its
 * own loopback address, and the allocator of those addresses: a fresh one
 * for each create, an old one re-opened for a persisted instance.
 */
import { KeyedMutex } from '../concurrency.js';
import type { Operations } from '../shared/operation.js';
import { cloudInitContentHash, specHash } from '../spec-hash.js';
import type { CreateRequest } from '../types.js';
import { credentialsDigest } from '../../credentials/proxy-credentials.js';
import { candidateAddresses, type LocalConfig, type LoopbackRange } from './config.js';
import { createEgressPolicy, type EgressPolicy } from '../../forwarding/egress-policy.js';
import { startForwardProxy, type ForwardProxy } from './forward-proxy.js';
import { writeRecord, type LocalInstanceRecord } from './store.js';

/** EADDRINUSE on this many candidate addresses in one create: give up (Transient). */
const MAX_BIND_ATTEMPTS = 16;

export interface Listener {
  proxy: ForwardProxy;
  address: string;
  port: number;
}

export function errCode(err: unknown): string | undefined {
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

export class Listeners {
  private readonly open = new Map<string, Listener>();
  /** Addresses held by records this process knows about: the allocator's index. */
  private readonly addressOwner = new Map<string, string>();
  /** One allocation at a time. */
  private readonly allocating = new KeyedMutex();
  /** Where instances may go off the loopback (with allowNonLoopbackEgress), one policy for all. */
  private readonly egress: EgressPolicy;

  constructor(
    private readonly ops: Operations,
    private readonly config: LocalConfig,
    private readonly stateDir: string,
    private readonly range: LoopbackRange,
  ) {
    this.egress = createEgressPolicy(config.egress);
  }

  get size(): number {
    return this.open.size;
  }

  has(name: string): boolean {
    return this.open.has(name);
  }

  /** Whether this process serves the record's address and port. */
  serving(record: LocalInstanceRecord): boolean {
    const live = this.open.get(record.name);
    return live !== undefined && live.address === record.address && live.port === record.port;
  }

  /** A persisted record holds `address`: the allocator leaves it alone. */
  note(address: string, name: string): void {
    this.addressOwner.set(address, name);
  }

  /** `name` no longer holds `address` (when it did). */
  release(address: string, name: string): void {
    if (this.addressOwner.get(address) === name) this.addressOwner.delete(address);
  }

  /** The instance's listener now serves it (its record is written). */
  serve(name: string, listener: Listener): void {
    this.open.set(name, listener);
  }

  /** Forgets the instance's listener and hands it over (to be closed by the caller). */
  take(name: string): Listener | undefined {
    const live = this.open.get(name);
    this.open.delete(name);
    return live;
  }

  /** Closes every listener. */
  async closeAll(): Promise<void> {
    const open = [...this.open.values()];
    this.open.clear();
    await Promise.allSettled(open.map((l) => l.proxy.close()));
  }

  /** Forgets which addresses records hold (the state directory is no longer this process's). */
  forgetAddresses(): void {
    this.addressOwner.clear();
  }

  /**
   * Re-opens the listener of a persisted running instance. When its address
   * cannot be bound any more, the instance is dead and will not recover by
   * itself: the record says `stopped`, so `get` reports Stopped and the
   * workflow replaces it (on a fresh address). Transient failures leave it
   * Provisioning; the next `get` tries again.
   */
  async reopen(record: LocalInstanceRecord): Promise<boolean> {
    if (this.open.has(record.name)) return true;
    try {
      const proxy = await this.listen(record.address, record.port, record.credentialsSha256);
      this.open.set(record.name, { proxy, address: record.address, port: record.port });
      return true;
    } catch (err) {
      const kind = listenFailure(err);
      const code = errCode(err) ?? 'error';
      this.ops.log.warn(
        { instance: record.name, address: record.address, port: record.port, code },
        'cannot re-open listener',
      );
      if (kind !== 'Transient') {
        await writeRecord(this.stateDir, { ...record, state: 'stopped', stoppedReason: `listen ${code}` });
      }
      return false;
    }
  }

  /**
   * A listener on a fresh address of the range for `req`, its address
   * noted as the request's. The first candidate derives from the name AND
   * the spec: a retried create of one spec lands on the same address, while
   * a replacement (a spec edit) usually moves to another, as a new VM gets
   * a new egress IP, so rotation is visible on one machine.
   */
  bind(req: CreateRequest, s: AbortSignal): Promise<{ proxy: ForwardProxy; address: string }> {
    return this.allocating.run('', async () => {
      let attempts = 0;
      const slotKey = `${req.name}/${specHash({
        placement: req.placement,
        port: req.port,
        cloudInitSha256: cloudInitContentHash(req.cloudInit),
        credentialsSha256: req.credentials ? credentialsDigest(req.credentials) : '',
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
          const proxy = await this.listen(
            address,
            req.port,
            req.credentials && credentialsDigest(req.credentials),
          );
          this.addressOwner.set(address, req.name);
          return { proxy, address };
        } catch (err) {
          const kind = listenFailure(err);
          if (kind === 'in-use') {
            this.ops.log.debug(
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
    });
  }

  private listen(address: string, port: number, credentialsSha256?: string): Promise<ForwardProxy> {
    return startForwardProxy({
      host: address,
      port,
      ...(credentialsSha256 ? { credentialsSha256 } : {}),
      behaviour: 'forward',
      allowNonLoopback: this.config.allowNonLoopbackEgress,
      egress: this.egress,
    });
  }
}
