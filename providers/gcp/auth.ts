/**
 * Credentials for the Compute clients, resolved and used by this provider,
 * not left to the client library, for two reasons:
 *
 * 1. Left to it, Application Default Credentials are resolved inside
 *    google-gax's `createStub`, whose promise the generated client re-throws
 *    from a `.catch` nobody observes: with no credentials every call logged
 *    an unhandled rejection, which ends the Node process (the whole worker,
 *    every provider's Proxies). Here the credentials are resolved first, by
 *    a call whose error is ours to classify, and the client gets an auth
 *    client that is already there.
 * 2. An error raised while obtaining a token must never read as Compute's
 *    answer. google-auth-library reports some token-source failures with an
 *    HTTP status (404 from a metadata server with no service account for the
 *    node, 400 `invalid_grant` from a token endpoint): mixed into the Compute
 *    call, a 404 would be taken for "no such VM", and a deletion would
 *    release its finalizer with the VM still running. So `ComputeAuth.fetch`
 *    obtains the token in its own step and any failure there becomes a
 *    `CredentialsError`, classified by what it is, before any request goes
 *    to Compute.
 *
 * No message here ever carries a token, a key or the library's own text
 * (which can echo a token endpoint's answer): only what we compose from
 * identifiers (the credential's kind, a service account's email, the key
 * file's path, an OAuth error code, an HTTP status, a system error code).
 */
import type { Agent } from 'node:https';
import type { AuthClient, GoogleAuth } from 'google-auth-library';
import type { ErrorClass } from '../types.js';

/** What check() reports for a credentials failure (the shared reasons, contract §8). */
export type CredentialsCheckReason = 'Unauthorized' | 'Forbidden' | 'Unreachable';

/** OAuth error codes that mean the credential itself was refused: retrying cannot help. */
export const REFUSED_OAUTH_ERRORS = ['invalid_grant', 'invalid_client', 'unauthorized_client'];

/** A failure to obtain credentials or a token; never an answer from Compute. */
export class CredentialsError extends Error {
  override readonly name = 'CredentialsError';
  constructor(
    readonly errorClass: Extract<ErrorClass, 'Transient' | 'Permanent'>,
    readonly checkReason: CredentialsCheckReason,
    /** Composed here from identifiers only; it names the credential (and any code) itself. */
    message: string,
  ) {
    super(message);
  }
}

export function isCredentialsError(err: unknown): err is CredentialsError {
  return err instanceof CredentialsError;
}

const IDENTIFIER = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;
const EMAIL = /^[a-z0-9][a-z0-9._-]{0,99}@[a-z0-9][a-z0-9.-]{0,99}$/;

/** `GOOGLE_APPLICATION_CREDENTIALS`, when set: a path, which is not secret and tells the user which file. */
function keyFilePath(): string | undefined {
  const path = process.env.GOOGLE_APPLICATION_CREDENTIALS;
  return path === undefined || path === '' ? undefined : path.slice(0, 200);
}

/** Names the credential an auth client holds, from its kind and public identifiers only. */
export function describeCredential(
  client: AuthClient,
  source: 'adc' | 'injected',
  /** The key file it came from, when the provider config named one (else GOOGLE_APPLICATION_CREDENTIALS). */
  keyFile?: string,
): string {
  const kind = client.constructor?.name ?? '';
  const file = source === 'adc' ? (keyFile?.slice(0, 200) ?? keyFilePath()) : undefined;
  const from = file === undefined ? '' : ` (key file ${file})`;
  switch (kind) {
    case 'JWT': {
      const email = (client as { email?: unknown }).email;
      const who = typeof email === 'string' && EMAIL.test(email) ? ` ${email}` : '';
      return `service account${who}${from}`;
    }
    case 'UserRefreshClient':
      return `user credentials${from || ' (gcloud auth application-default login)'}`;
    case 'Compute':
      return "the metadata server's service account";
    case 'Impersonated':
      return `impersonated service account credentials${from}`;
    case 'IdentityPoolClient':
    case 'AwsClient':
    case 'PluggableAuthClient':
    case 'ExternalAccountAuthorizedUserClient':
      return `external account credentials${from}`;
    default:
      return source === 'adc' ? `Application Default Credentials${from}` : 'the configured auth client';
  }
}

const NO_ADC = /could not load the default credentials/i;
/** The library's own messages for a key file that is there but is not a usable key. */
const UNPARSEABLE_KEY =
  /must pass in a json object|does not contain an? [a-z_]+ field|unable to parse|not a valid|unexpected token|json at position|is not valid json|unsupported credential type|does not have a valid/i;

function systemCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,63}$/.test(code) ? code : undefined;
}

function messageOf(err: unknown): string {
  const m = (err as { message?: unknown } | null)?.message;
  return typeof m === 'string' ? m : '';
}

/** Errors of resolving Application Default Credentials (`GoogleAuth.getClient`), or a configured key file. */
export function adcError(err: unknown, keyFile?: string): CredentialsError {
  const file = keyFile?.slice(0, 200) ?? keyFilePath();
  const message = messageOf(err);
  const code = systemCode(err);
  if (NO_ADC.test(message)) {
    return new CredentialsError(
      'Transient',
      'Unauthorized',
      'no Google credentials found: Application Default Credentials are not set up ' +
        '(set GOOGLE_APPLICATION_CREDENTIALS to a key file, use workload identity, or run gcloud auth application-default login)',
    );
  }
  if (code === 'ENOENT' || code === 'EACCES' || code === 'EISDIR' || /does not exist/i.test(message)) {
    // A Secret not mounted yet: retried until it lands (contract §7).
    return new CredentialsError(
      'Transient',
      'Unauthorized',
      `the credentials key file${file === undefined ? '' : ` ${file}`} cannot be read${code === undefined ? '' : ` (${code})`}`,
    );
  }
  if (err instanceof SyntaxError || UNPARSEABLE_KEY.test(message)) {
    return new CredentialsError(
      'Permanent',
      'Unauthorized',
      `the credentials key file${file === undefined ? '' : ` ${file}`} does not parse as a Google credential; replace it`,
    );
  }
  return new CredentialsError(
    'Transient',
    'Unreachable',
    `Application Default Credentials could not be resolved${code === undefined ? '' : ` (${code})`}`,
  );
}

function tokenStatus(err: unknown): number | undefined {
  const e = err as { status?: unknown; response?: { status?: unknown } } | null;
  for (const v of [e?.response?.status, e?.status]) {
    if (typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 599) return v;
  }
  return undefined;
}

/** The OAuth `error` field of a token endpoint's JSON answer, identifiers only. */
function oauthError(err: unknown): string | undefined {
  const data = (err as { response?: { data?: unknown } } | null)?.response?.data;
  let parsed: unknown = data;
  if (typeof data === 'string') {
    try {
      parsed = JSON.parse(data);
    } catch {
      return undefined;
    }
  }
  const code = (parsed as { error?: unknown } | null)?.error;
  return typeof code === 'string' && IDENTIFIER.test(code) ? code : undefined;
}

/** A private key that the crypto layer cannot read (PEM garbage in a key file that parsed as JSON). */
function isKeyDecodeError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^ERR_OSSL|^ERR_CRYPTO_INVALID_KEY|^ERR_INVALID_ARG_TYPE$/.test(code))
    return true;
  const library = (err as { library?: unknown } | null)?.library;
  return typeof library === 'string' && /DECODER|PEM|asn1|RSA/i.test(library);
}

/** A service account impersonated through another identity (`gcp.credentials.impersonate`). */
export interface Impersonation {
  /** The service account's email. */
  target: string;
  /** The identity that impersonates it, as describeCredential names it. */
  source: string;
}

/** The request a token failure came from was the IAM Credentials API's generateAccessToken. */
function isImpersonationCall(err: unknown): boolean {
  const url = (err as { config?: { url?: unknown } } | null)?.config?.url;
  return (typeof url === 'string' || url instanceof URL) && String(url).endsWith(':generateAccessToken');
}

/** Errors of obtaining a token from a resolved credential (`AuthClient.getRequestHeaders`). */
export function tokenError(
  err: unknown,
  credential: string,
  impersonation?: Impersonation,
): CredentialsError {
  if (err instanceof CredentialsError) return err;
  const status = tokenStatus(err);
  // IAM's 403 for generateAccessToken: the source identity may not act as the account (or it does not
  // exist). Granting the role is a change in IAM, not something a retry waits out.
  if (impersonation !== undefined && status === 403 && isImpersonationCall(err)) {
    return new CredentialsError(
      'Permanent',
      'Forbidden',
      `the IAM Credentials API refused to let ${impersonation.source} impersonate service account ${impersonation.target} (403): ` +
        `grant it roles/iam.serviceAccountTokenCreator on ${impersonation.target} (permission iam.serviceAccounts.getAccessToken), ` +
        'and check that the account exists and is enabled',
    );
  }
  const oauth = oauthError(err);
  if (oauth !== undefined && REFUSED_OAUTH_ERRORS.includes(oauth)) {
    return new CredentialsError(
      'Permanent',
      'Unauthorized',
      `the token endpoint refused ${credential} (${oauth}): the key or grant is revoked, disabled, expired or wrong; replace the credential`,
    );
  }
  if (isKeyDecodeError(err)) {
    return new CredentialsError(
      'Permanent',
      'Unauthorized',
      `the private key of ${credential} does not parse; replace the credential`,
    );
  }
  const code = systemCode(err);
  const detail =
    status !== undefined
      ? ` (token source answered ${status}${oauth === undefined ? '' : ` ${oauth}`})`
      : code !== undefined
        ? ` (${code})`
        : '';
  return new CredentialsError(
    'Transient',
    status === undefined ? 'Unreachable' : 'Unauthorized',
    `could not obtain an access token for ${credential}${detail}; retried`,
  );
}

/**
 * What the Compute client gets as its `authClient`. google-gax's REST stub
 * calls `fetch(url, init)` for every request and reads `universeDomain`;
 * the client sets `defaultServicePath` and `defaultScopes` on it. `fetch`
 * takes the token first (failures become CredentialsError), then sends the
 * request through the credential's own transporter (its interceptors and
 * agent), so nothing after the token step can be a token failure. The
 * library's "refresh the token and retry once on a 401" is not repeated:
 * the activity retry policy owns retries.
 */
export class ComputeAuth {
  defaultServicePath?: string;
  defaultScopes?: string[];

  constructor(
    readonly inner: AuthClient,
    /** Names the credential in messages; from describeCredential. */
    readonly credential: string,
    /**
     * The agent Compute requests go through instead of the one google-gax
     * passes (its keep-alive agent on the public roots): set when the
     * endpoint is trusted by its own CA (`gcp.endpointCaFile`).
     */
    private readonly agent?: Agent,
    /** Set when `inner` impersonates a service account: IAM's refusal is then named as such. */
    readonly impersonation?: Impersonation,
  ) {}

  get universeDomain(): string {
    return this.inner.universeDomain;
  }

  async getRequestHeaders(url?: string | URL): Promise<Headers> {
    try {
      return await this.inner.getRequestHeaders(url === undefined ? undefined : String(url));
    } catch (err) {
      throw tokenError(err, this.credential, this.impersonation);
    }
  }

  async fetch(
    input: string | URL,
    init: Record<string, unknown> & { headers?: ConstructorParameters<typeof Headers>[0] } = {},
  ) {
    const url = String(input);
    const auth = await this.getRequestHeaders(url);
    const headers = new Headers(init.headers);
    auth.forEach((value, key) => headers.set(key, value));
    // gax's REST stub hands its agent in `init.agent`; ours, when set, carries the endpoint's CA.
    return this.inner.transporter.request({
      ...init,
      url,
      headers,
      ...(this.agent === undefined ? {} : { agent: this.agent }),
    });
  }
}

/** Resolves Application Default Credentials (or the configured key file) once they exist; failures are CredentialsError. */
export async function resolveAdc(auth: GoogleAuth, keyFile?: string): Promise<ComputeAuth> {
  let client: AuthClient;
  try {
    client = await auth.getClient();
  } catch (err) {
    throw adcError(err, keyFile);
  }
  return new ComputeAuth(client, describeCredential(client, 'adc', keyFile));
}
