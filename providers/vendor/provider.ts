/**
 * The `vendor` provider: a proxy vendor's account (Bright Data, Oxylabs,
 * Decodo, IPRoyal, SOAX, or a template of one's own). A Managed Proxy on it
 * is one vendor **session**: the super-proxy's endpoint, and a username
 * (or password) naming the session, its country and lifetime, which the
 * vendor pins to one exit address. The vendor has no call that makes a
 * session: it exists by being used. So the instance is a claim (a
 * ConfigMap: the session id, the country, when it began), and the
 * credentials are rendered from it and the account's Secret whenever a
 * client needs them (`credentialsOf`).
 *
 * Profile (contract §4): readiness immediate; create-return submit (one
 * claim written); delete-return waits (the claim deleted; the vendor
 * lets the session lapse); ip-source the super-proxy (host and port, shared
 * by every session: `Instance.port`); gc-mark the claim's labels;
 * created-at the claim's; not-found no claim; primary-key the instance
 * name's digest; quota none (the vendor's traffic quota shows as 407s the
 * prober reports); secondary-resources none. A Running session says when
 * it ends (`Instance.expiresAt`): a pool replaces its member before then,
 * a new member first and the old one drained, so no held lease sees the
 * end. A session past its lifetime is Terminated: the Proxy's workflow
 * replaces it in place with a new session (a new exit address).
 */
import { connect } from 'node:net';
import type { Logger } from 'pino';
import type { ProxyCredentials } from '../../credentials/proxy-credentials.js';
import { shortDigest } from '../names.js';
import { claimIdPattern, classifyClaimFailure, instanceOfClaim } from '../shared/claim-backed.js';
import type { ClaimStore, SecretReader, StoredClaim } from '../shared/claims.js';
import { foreignOwner, parseIdOrFail } from '../shared/identity.js';
import { providerOperations, type Operations } from '../shared/operation.js';
import type { CreateRequest, Instance, Provider, ProviderOperation, TargetStatus } from '../types.js';
import { countryFor, type VendorConfig } from './config.js';
import { newSessionId, renderCredentials, TemplateError } from './template.js';

export const VENDOR_PROVIDER_TYPE = 'vendor';
const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const CHECK_TIMEOUT_MS = 5_000;

export interface VendorProviderOptions {
  name: string;
  config: VendorConfig;
  logger: Logger;
  claims: ClaimStore;
  readSecret: SecretReader;
}

export function createVendorProvider(options: VendorProviderOptions): Provider {
  const ops = providerOperations({
    name: options.name,
    type: VENDOR_PROVIDER_TYPE,
    logger: options.logger,
    classify: classifyClaimFailure(options.config.claimsNamespace),
  });
  return new VendorProvider(options.name, options.config, options.claims, options.readSecret, ops);
}

class VendorProvider implements Provider {
  readonly type = VENDOR_PROVIDER_TYPE;
  /** Each Proxy polls its own claim (a session's end is a time, not something a listing shows sooner). */
  readonly capabilities = { cheapListByTag: false, quickCreate: true, usesAttributes: true };
  private readonly idPattern: RegExp;

  constructor(
    readonly name: string,
    private readonly config: VendorConfig,
    private readonly claims: ClaimStore,
    private readonly readSecret: SecretReader,
    private readonly ops: Operations,
  ) {
    this.idPattern = claimIdPattern(name);
  }

  private claimName(instanceName: string): string {
    return `${this.name}-${shortDigest(instanceName)}`;
  }

  private parse(operation: ProviderOperation, id: string): string {
    return parseIdOrFail(
      this.ops,
      operation,
      id,
      (v) => (this.idPattern.test(v) ? v : undefined),
      `${this.name}-<16 base32>`,
    );
  }

  private get secretWhere(): string {
    const ref = this.config.credentialsSecretRef;
    return `Secret ${ref.namespace}/${ref.name}`;
  }

  /** The account's username and password, from its Secret; Transient while it is missing (it may be made). */
  private async account(
    operation: ProviderOperation,
    instance: string,
    s: AbortSignal,
  ): Promise<ProxyCredentials> {
    const ref = this.config.credentialsSecretRef;
    const data = await this.readSecret(ref.namespace, ref.name, s);
    if (!data)
      throw this.ops.fail('Transient', operation, instance, `the account's ${this.secretWhere} not found`);
    const username = data[ref.usernameKey];
    const password = data[ref.passwordKey];
    if (!username)
      throw this.ops.fail(
        'Transient',
        operation,
        instance,
        `the account's ${this.secretWhere} has no key "${ref.usernameKey}"`,
      );
    if (password === undefined)
      throw this.ops.fail(
        'Transient',
        operation,
        instance,
        `the account's ${this.secretWhere} has no key "${ref.passwordKey}"`,
      );
    return { username, password };
  }

  /** When the vendor ends the session (epoch ms); undefined for a claim without a readable lifetime. */
  private endsAtMs(claim: StoredClaim): number | undefined {
    const lifetime = Number(claim.data.lifetimeSeconds);
    return Number.isFinite(lifetime) && lifetime > 0 ? claim.createdAtMs + lifetime * 1000 : undefined;
  }

  private instance(claim: StoredClaim): Instance {
    const endsAtMs = this.endsAtMs(claim);
    if (endsAtMs !== undefined && Date.now() >= endsAtMs) return instanceOfClaim(claim, 'Terminated');
    const running = instanceOfClaim(claim, 'Running', {
      ip: this.config.endpoint.host,
      port: this.config.endpoint.port,
    });
    return endsAtMs === undefined ? running : { ...running, expiresAt: new Date(endsAtMs) };
  }

  /** The session's credentials; a template that cannot be rendered for this account is Permanent (named, never quoted). */
  private render(
    operation: ProviderOperation,
    instance: string,
    account: ProxyCredentials,
    session: {
      session: string;
      country?: string;
      lifetimeSeconds: number;
    },
  ): ProxyCredentials {
    try {
      return renderCredentials(this.config.templates, { account, params: this.config.params, ...session });
    } catch (err) {
      if (err instanceof TemplateError)
        throw this.ops.fail('Permanent', operation, instance, `the session's credentials: ${err.message}`);
      throw err;
    }
  }

  create(req: CreateRequest, signal: AbortSignal): Promise<string> {
    const instance = typeof req.name === 'string' ? req.name : '';
    return this.ops.run('create', instance, signal, async (s) => {
      if (!NAME_RE.test(req.name))
        throw this.ops.fail('Permanent', 'create', instance, 'name is not a DNS-1123 label');
      const name = this.claimName(req.name);
      const existing = await this.claims.get(name, s);
      if (existing) {
        if (existing.uid !== req.uid)
          throw foreignOwner(this.ops, req.name, 'a session', existing.uid, req.uid);
        return name;
      }
      let country: string | undefined;
      try {
        country = countryFor(this.config, req.attributes);
      } catch (err) {
        if (err instanceof TemplateError) throw this.ops.fail('Permanent', 'create', instance, err.message);
        throw err;
      }
      const session = {
        session: newSessionId(this.config.templates.session),
        ...(country ? { country } : {}),
        lifetimeSeconds: this.config.sessionLifetimeSeconds,
      };
      // Rendered once now, so an account or attribute the template cannot
      // take is this create's error, not every client's later.
      this.render('create', instance, await this.account('create', instance, s), session);
      const made = await this.claims.create(
        name,
        {
          instanceName: req.name,
          uid: req.uid,
          installation: req.installation,
          data: {
            session: session.session,
            ...(country ? { country } : {}),
            lifetimeSeconds: String(session.lifetimeSeconds),
            proxy: `${req.namespace}/${req.proxyName}`,
          },
        },
        s,
      );
      if ('existing' in made && made.existing.uid !== req.uid)
        throw foreignOwner(this.ops, req.name, 'a session', made.existing.uid, req.uid);
      if ('created' in made)
        this.ops.log.info({ instance: req.name, id: name, country: country ?? '' }, 'vendor session claimed');
      return name;
    });
  }

  get(id: string, signal: AbortSignal): Promise<Instance> {
    return this.ops.run('get', id, signal, async (s) => {
      const claim = await this.claims.get(this.parse('get', id), s);
      if (!claim) throw this.ops.fail('NotFound', 'get', id, 'no such session');
      return this.instance(claim);
    });
  }

  delete(id: string, signal: AbortSignal): Promise<void> {
    return this.ops.run('delete', id, signal, async (s) => {
      await this.claims.delete(this.parse('delete', id), s);
    });
  }

  listByTag(signal: AbortSignal): Promise<Instance[]> {
    return this.ops.run('list', '', signal, async (s) =>
      (await this.claims.list(s)).map((c) => this.instance(c)),
    );
  }

  credentialsOf(id: string, signal: AbortSignal): Promise<ProxyCredentials | undefined> {
    return this.ops.run('get', id, signal, async (s) => {
      const claim = await this.claims.get(this.parse('get', id), s);
      if (!claim) throw this.ops.fail('NotFound', 'get', id, 'no such session');
      return this.render('get', id, await this.account('get', id, s), {
        session: claim.data.session ?? '',
        ...(claim.data.country ? { country: claim.data.country } : {}),
        lifetimeSeconds: Number(claim.data.lifetimeSeconds),
      });
    });
  }

  /** The super-proxy answers TCP, and the account's Secret is readable: two targets. */
  async check(signal: AbortSignal): Promise<TargetStatus[]> {
    const { host, port } = this.config.endpoint;
    if (signal.aborted)
      return ['endpoint', 'account'].map((name) => ({
        name,
        ready: false,
        reason: 'Timeout',
        message: 'check aborted before it ran',
      }));
    const endpoint = async (): Promise<TargetStatus> => {
      const base = { name: 'endpoint', address: `${host}:${port}` };
      const started = Date.now();
      const outcome = await new Promise<string | undefined>((resolve) => {
        const socket = connect({ host, port });
        const done = (problem: string | undefined) => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          socket.destroy();
          resolve(problem);
        };
        const onAbort = () => done('aborted');
        const timer = setTimeout(() => done('timeout'), CHECK_TIMEOUT_MS);
        signal.addEventListener('abort', onAbort, { once: true });
        socket.once('connect', () => done(undefined));
        socket.once('error', (e: NodeJS.ErrnoException) => done(e.code ?? 'error'));
      });
      if (outcome === undefined)
        return { ...base, ready: true, reason: 'Reachable', latencyMillis: Date.now() - started };
      if (outcome === 'timeout' || outcome === 'aborted')
        return {
          ...base,
          ready: false,
          reason: 'Timeout',
          message: `no TCP answer from the super-proxy (${outcome})`,
        };
      return {
        ...base,
        ready: false,
        reason: 'Unreachable',
        message: `the super-proxy refused TCP (${outcome})`,
      };
    };
    const account = async (): Promise<TargetStatus> => {
      const base = { name: 'account', address: this.secretWhere };
      try {
        await this.account('check', 'account', signal);
        return { ...base, ready: true, reason: 'Reachable' };
      } catch (err) {
        const wrapped = this.ops.wrap('check', 'account', err, signal);
        return { ...base, ready: false, reason: 'Unauthorized', message: wrapped.message.slice(0, 1024) };
      }
    };
    return [await endpoint(), await account()];
  }
}
