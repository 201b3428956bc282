/**
 * The EC2 clients of one aws entry: one `EC2Client` per region an ID names
 * (the configured one, and an older one a providerID still carries), built
 * on first use, never at construction (contract §7: building a provider
 * dials nothing and resolves no credentials).
 *
 * Every request is bounded by the caller's signal and `callTimeoutMs`
 * (boundedCall), and the SDK's own retries are capped by
 * `aws.sdkMaxAttempts`: Temporal retries the activity as well, and the two
 * multiply.
 *
 * Credentials are the SDK's default chain (environment, shared config and
 * `aws.profile`, web identity for IRSA, EKS Pod Identity, container and
 * instance roles), resolved by the SDK on a request and refreshed by it
 * when they expire; a chain that finds none fails that request only
 * (CredentialsProviderError, classified Transient), never the process.
 */
// Types only at import: the SDK (about a quarter of a second to load) loads
// on the first call, so processes that configure no aws entry never pay for it.
import type * as Ec2Module from '@aws-sdk/client-ec2';
import type { EC2Client, EC2ClientConfig } from '@aws-sdk/client-ec2';
import { tracedCall } from '../shared/bounded-call.js';
import type { ProviderOperation } from '../types.js';
import { classify } from './classify.js';
import type { AwsConfig } from './config.js';

/** The SDK module, for its command classes. */
export type Ec2Sdk = typeof Ec2Module;

/** What the SDK takes as credentials: static ones (tests) or a provider function. */
export type AwsCredentials = NonNullable<EC2ClientConfig['credentials']>;

export interface Ec2ClientsOptions {
  provider: { type: string; name: string };
  config: AwsConfig;
  /** Credentials to use instead of the default chain (tests: static fake keys). */
  credentials?: AwsCredentials;
  /** Bound on each request; the caller's signal can only shorten it. */
  callTimeoutMs: number;
}

export class Ec2Clients {
  private readonly clients = new Map<string, EC2Client>();
  private loading: Promise<Ec2Sdk> | undefined;

  constructor(private readonly options: Ec2ClientsOptions) {}

  /** Where the entry's requests go, for check(): the endpoint override or the region's public endpoint. */
  address(region = this.options.config.region): string {
    return this.options.config.endpoint ?? `https://ec2.${region}.amazonaws.com`;
  }

  private async client(region: string): Promise<{ client: EC2Client; sdk: Ec2Sdk }> {
    this.loading ??= import('@aws-sdk/client-ec2');
    const sdk = await this.loading;
    let client = this.clients.get(region);
    if (client === undefined) {
      const { config, credentials, callTimeoutMs } = this.options;
      client = new sdk.EC2Client({
        region,
        maxAttempts: config.sdkMaxAttempts,
        ...(config.endpoint !== undefined ? { endpoint: config.endpoint } : {}),
        ...(config.profile !== undefined ? { profile: config.profile } : {}),
        ...(credentials !== undefined ? { credentials } : {}),
        // The socket-level bounds; boundedCall bounds the whole call (retries included) as well.
        requestHandler: { connectionTimeout: Math.min(callTimeoutMs, 10_000), requestTimeout: callTimeoutMs },
      });
      this.clients.set(region, client);
    }
    return { client, sdk };
  }

  /**
   * One EC2 request (`action`, for spans and messages), bounded. Errors
   * pass through as the SDK threw them, for the caller to classify.
   */
  send<Output>(
    region: string,
    action: string,
    operation: ProviderOperation,
    signal: AbortSignal,
    call: (client: EC2Client, sdk: Ec2Sdk, abortSignal: AbortSignal) => Promise<Output>,
  ): Promise<Output> {
    return tracedCall(
      this.options.provider,
      action,
      {
        signal,
        timeoutMs: this.options.callTimeoutMs,
        what: `EC2 ${action}`,
        operation,
        classify: (err) => classify(err, action).errorClass,
      },
      async (bounded) => {
        const { client, sdk } = await this.client(region);
        return call(client, sdk, bounded);
      },
    );
  }

  close(): void {
    for (const client of this.clients.values()) client.destroy();
    this.clients.clear();
  }
}
