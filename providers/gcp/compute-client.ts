/**
 * The gcp provider's Compute API: the InstancesClient and
 * ZoneOperationsClient (and, for an entry with a managed firewall rule,
 * the FirewallsClient and GlobalOperationsClient), built on the first call (contract §7: construction
 * dials nothing) after the provider has resolved its credentials itself
 * (auth.ts says why), and every request bounded and traced.
 */
// Types only at import: the client library (with its protobuf descriptors,
// ~190 MiB of heap) loads on the first call, so processes that configure no
// gcp provider (the bridge, the api, a local-only worker) never pay for it.
import type { Agent as HttpsAgent } from 'node:https';
import type {
  FirewallsClient,
  GlobalOperationsClient,
  InstancesClient,
  ZoneOperationsClient,
  protos,
} from '@google-cloud/compute';
import type { AuthClient } from 'google-auth-library';
import type { Logger } from 'pino';
import { providerError } from '../errors.js';
import { CallEnded, tracedCall } from '../shared/bounded-call.js';
import type { ProviderOperation } from '../types.js';
import { ComputeAuth, CredentialsError } from './auth.js';
import { classify, httpStatus, type Classification, type ClassifyCall } from './classify.js';
import type { GcpConfig } from './config.js';
import { EntryCredentials, endpointAgent } from './credentials.js';

/** What check() reports as the address when no endpoint override is configured. */
export const COMPUTE_ADDRESS = 'compute.googleapis.com';

export type Operation = protos.google.cloud.compute.v1.IOperation;
type ComputeModule = {
  InstancesClient: typeof InstancesClient;
  ZoneOperationsClient: typeof ZoneOperationsClient;
  FirewallsClient: typeof FirewallsClient;
  GlobalOperationsClient: typeof GlobalOperationsClient;
};

export interface Clients {
  instances: InstancesClient;
  operations: ZoneOperationsClient;
  /** Only with `gcp.firewall`: each client loads the API's descriptors again, so none is made unused. */
  firewalls?: FirewallsClient;
  globalOperations?: GlobalOperationsClient;
}

/** Requests that prove nothing about the instance API: their failures leave the kept listing alone. */
const FIREWALL_REQUEST = /^(?:firewalls|globalOperations)\./;

function all(clients: Clients): { initialize(): Promise<unknown>; close(): Promise<void> }[] {
  return [clients.instances, clients.operations, clients.firewalls, clients.globalOperations].filter(
    (c) => c !== undefined,
  );
}

export interface ComputeClientOptions {
  provider: { type: string; name: string };
  config: GcpConfig;
  log: Logger;
  /** An auth client to use instead of Application Default Credentials (tests: a fake token). */
  authClient?: AuthClient | undefined;
  /** Bound on each Compute request. */
  callTimeoutMs: number;
  /** A request failed other than by "no such thing" or the caller giving up. */
  onFailure: () => void;
}

export class ComputeClient {
  private clients: Clients | undefined;
  /** The one build of the clients in flight (concurrent first calls share it; cleared when it ends). */
  private building: Promise<Clients> | undefined;
  private loading: Promise<ComputeModule> | undefined;
  /** The https agent trusting gcp.endpointCaFile, when set (closed with the clients). */
  private agent: HttpsAgent | undefined;
  /** This entry's credentials: resolved on the first call and again on each call until they exist. */
  private readonly entryCredentials: EntryCredentials;
  readonly callTimeoutMs: number;

  constructor(private readonly options: ComputeClientOptions) {
    this.entryCredentials = new EntryCredentials(options.config, options.authClient);
    this.callTimeoutMs = options.callTimeoutMs;
  }

  /** Per-request options: no SDK retries (the activity retry policy owns retries) and our timeout. */
  get callOptions() {
    return { timeout: this.callTimeoutMs, maxRetries: 0 };
  }

  /** The endpoint check() names. */
  address(): string {
    return this.options.config.endpoint ?? COMPUTE_ADDRESS;
  }

  /**
   * One Compute request (or one bounded sequence of page requests), bounded
   * by the caller's signal and by `timeoutMs`, as one client span whose
   * result is the error class. The SDK's REST transport ignores its own
   * deadlines, so the bound is enforced here: the promise settles the moment
   * either fires (the abandoned HTTP request is left to finish on its own).
   */
  call<T>(
    signal: AbortSignal,
    operation: ProviderOperation,
    request: string,
    fn: () => Promise<T>,
    timeoutMs = this.callTimeoutMs,
  ): Promise<T> {
    const kind: ClassifyCall = request === 'instances.insert' ? 'insert' : 'other';
    return tracedCall(
      this.options.provider,
      request,
      {
        signal,
        timeoutMs,
        what: 'Compute API call',
        operation,
        classify: (err) => classify(err, kind).errorClass,
      },
      fn,
    ).catch((err: unknown) => {
      // A failure other than "no such thing" or the caller giving up: the next check must ask Compute itself.
      // A firewall call's (a permission only the rule needs) says nothing of the listing.
      if (
        httpStatus(err) !== 404 &&
        !(err instanceof CallEnded && err.by === 'caller') &&
        !FIREWALL_REQUEST.test(request)
      )
        this.options.onFailure();
      throw err;
    });
  }

  /** The class of a Compute failure, with the raw status and reasons at debug (the class collapses them; never the body). */
  logApiError(
    operation: ProviderOperation,
    instance: string,
    err: unknown,
    call: ClassifyCall = 'other',
  ): Classification {
    const c = classify(err, call);
    if (err instanceof CredentialsError) {
      this.options.log.debug({ operation, instance, errorClass: c.errorClass }, 'credentials failed');
    } else {
      this.options.log.debug(
        { operation, instance, httpStatus: c.status, reasons: c.reasons },
        'Compute API call failed',
      );
    }
    return c;
  }

  /**
   * The clients, built on the first call and kept once they work.
   * Credentials come first, from our own call; then each client's stub is
   * created and awaited here, so a failure of it is this call's error and
   * never an unobserved rejection. A build that fails leaves nothing
   * behind: the next call tries again (credentials mounted later are
   * picked up without a restart).
   */
  api(): Promise<Clients> {
    if (this.clients !== undefined) return Promise.resolve(this.clients);
    this.building ??= this.build().finally(() => {
      this.building = undefined;
    });
    return this.building;
  }

  /** The firewall clients: built with the others whenever gcp.firewall is set, the only time they are asked for. */
  async firewallApi(): Promise<Required<Pick<Clients, 'firewalls' | 'globalOperations'>>> {
    const { firewalls, globalOperations } = await this.api();
    if (firewalls === undefined || globalOperations === undefined) {
      const { name } = this.options.provider;
      const message = 'no firewall clients: gcp.firewall is not set';
      throw providerError({
        errorClass: 'Permanent',
        operation: 'check',
        provider: name,
        instance: '',
        message,
      });
    }
    return { firewalls, globalOperations };
  }

  private async build(): Promise<Clients> {
    const config = this.options.config;
    this.loading ??= import('@google-cloud/compute');
    const compute = await this.loading;
    const resolved = await this.entryCredentials.resolve(compute.InstancesClient.scopes);
    const agent = await endpointAgent(config, resolved.credential);
    this.agent?.destroy();
    this.agent = agent;
    const auth =
      agent === undefined
        ? resolved
        : new ComputeAuth(resolved.inner, resolved.credential, agent, resolved.impersonation);
    const opts: NonNullable<ConstructorParameters<typeof InstancesClient>[0]> = { fallback: true };
    if (config.endpoint !== undefined) {
      const url = new URL(config.endpoint);
      const protocol = url.protocol.replace(':', '');
      opts.apiEndpoint = url.hostname;
      opts.port = url.port === '' ? (protocol === 'https' ? 443 : 80) : Number(url.port);
      opts.protocol = protocol;
    }
    // The client takes any object with fetch and getRequestHeaders as its auth client.
    opts.authClient = auth as unknown as AuthClient;
    const clients: Clients = {
      instances: new compute.InstancesClient(opts),
      operations: new compute.ZoneOperationsClient(opts),
    };
    if (config.firewall !== undefined) {
      clients.firewalls = new compute.FirewallsClient(opts);
      clients.globalOperations = new compute.GlobalOperationsClient(opts);
    }
    // Every stub now, observed: every later method call re-throws this promise
    // from an unobserved .catch, so a client whose stub failed is never used.
    const made = await Promise.allSettled(all(clients).map((c) => c.initialize()));
    const failed = made.find((r) => r.status === 'rejected');
    if (failed !== undefined) {
      await Promise.allSettled(all(clients).map((c) => c.close()));
      throw failed.reason instanceof CredentialsError
        ? failed.reason
        : new CredentialsError(
            'Transient',
            'Unreachable',
            `the Compute client could not be set up with ${auth.credential}`,
          );
    }
    this.clients = clients;
    this.options.log.info(
      { project: config.project, endpoint: this.address(), credentials: auth.credential },
      'gcp provider ready',
    );
    return clients;
  }

  async close(): Promise<void> {
    const clients = this.clients;
    this.clients = undefined;
    this.agent?.destroy();
    this.agent = undefined;
    if (clients === undefined) return;
    await Promise.allSettled(all(clients).map((c) => c.close()));
  }
}
