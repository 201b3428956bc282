/**
 * The identity and TLS trust of one gcp provider entry (issue 26): which
 * credential its Compute requests carry, and which CA its endpoint is
 * trusted by. Resolved on the provider's first call and on every call
 * until it works (a Secret mounted later is picked up); every failure is a
 * CredentialsError naming the credential, never its material (auth.ts).
 *
 * - an injected auth client (tests), else
 * - Application Default Credentials, or `gcp.credentials.keyFile` (any
 *   credential JSON google-auth-library reads) instead, then
 * - with `gcp.credentials.impersonate`, that service account acting
 *   through them (`Impersonated`: short-lived tokens from the IAM
 *   Credentials API), so two entries of one worker can be two identities.
 */
import { readFile } from 'node:fs/promises';
import { Agent as HttpsAgent } from 'node:https';
import type { AuthClient, GoogleAuth } from 'google-auth-library';
import { ComputeAuth, CredentialsError, describeCredential, resolveAdc } from './auth.js';
import type { GcpConfig } from './config.js';

export class EntryCredentials {
  /** ADC or the key file, built once (its failures are per call, and retried). */
  private auth: GoogleAuth | undefined;

  constructor(
    private readonly config: GcpConfig,
    private readonly injected?: AuthClient,
  ) {}

  /** The auth client for this entry's Compute requests, with `scopes` (the Compute client's). */
  async resolve(scopes: readonly string[]): Promise<ComputeAuth> {
    if (this.injected !== undefined) {
      return new ComputeAuth(this.injected, describeCredential(this.injected, 'injected'));
    }
    const own = this.config.credentials;
    const { GoogleAuth, Impersonated } = await import('google-auth-library');
    // projectId given, so resolving never asks gcloud or a metadata server which project this is.
    this.auth ??= new GoogleAuth({
      scopes: [...scopes],
      projectId: this.config.project,
      ...(own?.keyFile === undefined ? {} : { keyFile: own.keyFile }),
    });
    const base = await resolveAdc(this.auth, own?.keyFile);
    if (own?.impersonate === undefined) return base;
    // The source identity mints a short-lived token for the target through the IAM Credentials API.
    const impersonated = new Impersonated({
      sourceClient: base.inner,
      targetPrincipal: own.impersonate,
      targetScopes: [...scopes],
      lifetime: 3600,
      ...(own.impersonationEndpoint === undefined ? {} : { endpoint: own.impersonationEndpoint }),
    });
    return new ComputeAuth(
      impersonated,
      `service account ${own.impersonate} impersonated by ${base.credential}`,
      undefined,
      { target: own.impersonate, source: base.credential },
    );
  }
}

/**
 * An https agent trusting `gcp.endpointCaFile` (read on each build, so a
 * rotated file is picked up with the next clients), or undefined for the
 * public roots. Certificate verification is never turned off.
 */
export async function endpointAgent(config: GcpConfig, credential: string): Promise<HttpsAgent | undefined> {
  const file = config.endpointCaFile;
  if (file === undefined) return undefined;
  let ca: string;
  try {
    ca = await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    throw new CredentialsError(
      'Transient',
      'Unreachable',
      `gcp.endpointCaFile ${file.slice(0, 200)} cannot be read${typeof code === 'string' ? ` (${code.slice(0, 32)})` : ''}`,
    );
  }
  if (!ca.includes('-----BEGIN CERTIFICATE-----')) {
    throw new CredentialsError(
      'Permanent',
      'Unreachable',
      `gcp.endpointCaFile ${file.slice(0, 200)} holds no PEM certificate (for ${credential})`,
    );
  }
  return new HttpsAgent({ ca, keepAlive: true });
}
