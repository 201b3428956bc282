/**
 * The `list` provider: proxies someone else runs, from a list (static, or
 * a URL refreshed with ETag). A Managed Proxy on it is one entry of the
 * list, given to it by a claim (a ConfigMap named after the entry: the
 * apiserver refuses a second, so two Proxies never share an entry, across
 * every worker). Delete frees the entry.
 *
 * Profile (contract §4): readiness immediate (an entry is a running proxy);
 * create-return submit; delete-return waits; ip-source the entry's host and
 * port (`Instance.port`); gc-mark the claim's labels; created-at the claim's;
 * not-found no claim; primary-key the entry's digest; quota detected (every
 * entry taken: QuotaExceeded, so the Proxy waits with that condition);
 * secondary-resources none. An entry that leaves the list makes its
 * instance Terminated: the Proxy's workflow replaces it from the entries
 * left. The entry's user and password, when the list has them, are what a
 * client presents (`credentialsOf`); they never leave the worker otherwise.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { foreignOwner, parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Operations } from '../shared/operation.js';
import { claimIdPattern, classifyClaimFailure, instanceOfClaim } from '../shared/claim-backed.js';
import type { ClaimStore, StoredClaim } from '../shared/claims.js';
import type { CreateRequest, Instance, Provider, TargetStatus } from '../types.js';
import type { ProxyCredentials } from '../../credentials/proxy-credentials.js';
import { entryDigest, type ListConfig, type ListEntry } from './config.js';
import { ListSource, type ListSnapshot } from './source.js';

export const LIST_PROVIDER_TYPE = 'list';
const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export interface ListProviderOptions {
  name: string;
  config: ListConfig;
  logger: Logger;
  claims: ClaimStore;
  /** For tests of the fetch; the global fetch otherwise. */
  fetch?: typeof fetch;
}

export function createListProvider(options: ListProviderOptions): Provider {
  const ops = providerOperations({
    name: options.name,
    type: LIST_PROVIDER_TYPE,
    logger: options.logger,
    classify: classifyClaimFailure(options.config.claimsNamespace),
  });
  return new ListProvider(options.name, options.claims, ops, new ListSource(options.config, options.fetch));
}

class ListProvider implements Provider {
  readonly type = LIST_PROVIDER_TYPE;
  /**
   * Each Proxy polls its own claim: an entry's leaving shows on its next
   * get (listByTag answers claims, not whether their entries are still listed).
   */
  readonly capabilities = { cheapListByTag: false, quickCreate: true };
  private readonly idPattern: RegExp;

  constructor(
    readonly name: string,
    private readonly claims: ClaimStore,
    private readonly ops: Operations,
    private readonly source: ListSource,
  ) {
    this.idPattern = claimIdPattern(name);
  }

  private claimName(entry: ListEntry): string {
    return `${this.name}-${entryDigest(entry)}`;
  }

  private parse(operation: 'get' | 'delete', id: string): string {
    return parseIdOrFail(
      this.ops,
      operation,
      id,
      (v) => (this.idPattern.test(v) ? v : undefined),
      `${this.name}-<16 base32>`,
    );
  }

  /** The list now; Transient when none was ever read. */
  private async list(
    operation: 'create' | 'get' | 'list',
    instance: string,
    s: AbortSignal,
  ): Promise<ListSnapshot> {
    const snapshot = await this.source.current(s);
    if (!snapshot)
      throw this.ops.fail(
        'Transient',
        operation,
        instance,
        `no list read yet: ${this.source.status().problem ?? 'not fetched'}`,
      );
    return snapshot;
  }

  /**
   * The claim's entry in the list, as claimed: an entry whose credentials
   * changed since counts as gone, so the Proxy is made again with the new
   * ones (they are written at create).
   */
  private entryOf(snapshot: ListSnapshot, claim: StoredClaim): ListEntry | undefined {
    const entry = snapshot.entries.find((e) => entryDigest(e) === claim.data.entry);
    if (entry && claim.data.credentials !== undefined && claim.data.credentials !== credentialsTag(entry))
      return undefined;
    return entry;
  }

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, async (s) => {
      if (!NAME_RE.test(req.name))
        throw this.ops.fail('Permanent', 'create', instance, 'name is not a DNS-1123 label');
      const snapshot = await this.list('create', instance, s);
      const held = await this.claims.list(s);
      const mine = held.find((c) => c.instanceName === req.name);
      if (mine) {
        if (mine.uid !== req.uid)
          throw foreignOwner(this.ops, req.name, 'a list entry claimed', mine.uid, req.uid);
        return mine.name;
      }
      const taken = new Set(held.map((c) => c.name));
      // Each Proxy tries the entries in an order of its own: Proxies made
      // together do not all race for the first free one; a retried create
      // tries the same one first.
      const order = (e: ListEntry) =>
        createHash('sha256')
          .update(`${req.uid}\n${entryDigest(e)}`)
          .digest('hex');
      const free = snapshot.entries
        .filter((e) => !taken.has(this.claimName(e)))
        .sort((a, b) => (order(a) < order(b) ? -1 : 1));
      for (const entry of free) {
        if (s.aborted) throw this.ops.fail('Transient', 'create', instance, 'aborted by the caller');
        const made = await this.claims.create(
          this.claimName(entry),
          {
            instanceName: req.name,
            uid: req.uid,
            installation: req.installation,
            data: {
              entry: entryDigest(entry),
              credentials: credentialsTag(entry),
              proxy: `${req.namespace}/${req.proxyName}`,
            },
          },
          s,
        );
        if ('created' in made) {
          this.ops.log.info({ instance: req.name, id: made.created.name }, 'claimed a list entry');
          return made.created.name;
        }
        // Another create for this Proxy (a concurrent retry) won this entry: it is ours.
        if (made.existing.instanceName === req.name && made.existing.uid === req.uid)
          return made.existing.name;
      }
      throw this.ops.fail(
        'QuotaExceeded',
        'create',
        instance,
        `every entry of ${this.source.where} is taken (${snapshot.entries.length} listed, ${(await this.claims.list(s)).length} claimed)`,
      );
    });
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', id, signal, async (s) => {
      const name = this.parse('get', id);
      const claim = await this.claims.get(name, s);
      if (!claim) throw this.ops.fail('NotFound', 'get', id, 'no such claim');
      const snapshot = await this.list('get', id, s);
      const entry = this.entryOf(snapshot, claim);
      return entry
        ? instanceOfClaim(claim, 'Running', { ip: entry.host, port: entry.port })
        : instanceOfClaim(claim, 'Terminated');
    });
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', id, signal, async (s) => {
      const name = this.parse('delete', id);
      await this.claims.delete(name, s);
    });
  }

  listByTag(signal: AbortSignal): Promise<Instance[]> {
    return this.ops.run('list', '', signal, async (s) => {
      const held = await this.claims.list(s);
      const snapshot = this.source.status().snapshot;
      return held.map((claim) => {
        // Before any list was read, a claim's entry cannot be judged: Running at an unknown address is Provisioning.
        if (!snapshot) return instanceOfClaim(claim, 'Provisioning');
        const entry = this.entryOf(snapshot, claim);
        return entry
          ? instanceOfClaim(claim, 'Running', { ip: entry.host, port: entry.port })
          : instanceOfClaim(claim, 'Terminated');
      });
    });
  }

  credentialsOf(id: string, signal: AbortSignal): Promise<ProxyCredentials | undefined> {
    return this.ops.run('get', id, signal, async (s) => {
      const claim = await this.claims.get(this.parse('get', id), s);
      if (!claim) throw this.ops.fail('NotFound', 'get', id, 'no such claim');
      const entry = this.entryOf(await this.list('get', id, s), claim);
      return entry?.username !== undefined && entry.password !== undefined
        ? { username: entry.username, password: entry.password }
        : undefined;
    });
  }

  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const started = Date.now();
    const base = { name: 'list', address: this.source.where };
    try {
      await this.source.current(signal);
      const held = await this.claims.list(signal);
      const { snapshot, problem } = this.source.status();
      const details: Record<string, string> = {
        entries: String(snapshot?.entries.length ?? 0),
        claimed: String(held.length),
        ...(snapshot && snapshot.fetchedAtMs > 0
          ? { listFetchedAt: new Date(snapshot.fetchedAtMs).toISOString() }
          : {}),
      };
      if (problem)
        return [
          {
            ...base,
            ready: false,
            reason: snapshot ? 'APIError' : 'Unreachable',
            message: snapshot
              ? `${problem}; keeping the last good list (${snapshot.entries.length} entries)`.slice(0, 1024)
              : `${problem}; no list read yet`.slice(0, 1024),
            details,
          },
        ];
      return [{ ...base, ready: true, reason: 'Reachable', latencyMillis: Date.now() - started, details }];
    } catch (err) {
      const wrapped = this.ops.wrap('check', 'list', err, signal);
      return [
        {
          ...base,
          ready: false,
          reason: signal.aborted ? 'Timeout' : 'APIError',
          message: wrapped.message.slice(0, 1024),
        },
      ];
    }
  }
}

/** A short digest of an entry's credentials (none: ''), to notice a change; not reversible to a password. */
function credentialsTag(entry: ListEntry): string {
  if (entry.username === undefined) return '';
  return createHash('sha256')
    .update(`egress-proxies list entry\n${entry.username}:${entry.password ?? ''}`)
    .digest('hex')
    .slice(0, 16);
}
