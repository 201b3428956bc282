/**
 * How every process reaches Temporal: Temporal's standard environment
 * configuration (`@temporalio/envconfig`: a profile in the TOML config file,
 * then TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
 * TEMPORAL_TLS_* ...), so the control plane is configured the way the
 * `temporal` CLI is, with our flags on top. Read once at start into a typed
 * object; certificate files are read here so a missing one fails at start
 * naming the file, never later inside the SDK.
 */
import { readFileSync } from 'node:fs';
import { Connection, type ConnectionOptions } from '@temporalio/client';
import { loadClientConfigProfile, type ClientConfigProfile } from '@temporalio/envconfig';
import { NativeConnection } from '@temporalio/worker';

export interface TemporalTls {
  serverNameOverride?: string;
  serverRootCACertificate?: Buffer;
  clientCertPair?: { crt: Buffer; key: Buffer };
}

/** The connection settings beyond address and namespace; never logged (it may hold an API key). */
export interface TemporalConnectionSettings {
  /** Undefined: plaintext. */
  tls?: TemporalTls;
  apiKey?: string;
  metadata?: Record<string, string>;
}

/** The Temporal flags every subcommand takes; each overrides the profile and environment. */
export interface TemporalFlags {
  temporalAddress?: string;
  temporalNamespace?: string;
  temporalProfile?: string;
  temporalConfigFile?: string;
  temporalTlsCert?: string;
  temporalTlsKey?: string;
  temporalTlsCa?: string;
  temporalTlsServerName?: string;
  temporalApiKeyFile?: string;
}

export class TemporalConfigError extends Error {
  override name = 'TemporalConfigError';
}

export interface ResolvedTemporal {
  address: string;
  namespace: string;
  settings: TemporalConnectionSettings;
}

type Source = { path: string } | { data: string | Uint8Array } | undefined;

function readSource(source: Source, what: string): Buffer | undefined {
  if (source === undefined) return undefined;
  if ('data' in source) return Buffer.from(source.data);
  try {
    return readFileSync(source.path);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    throw new TemporalConfigError(
      `${what}: cannot read ${source.path} (${typeof code === 'string' ? code : 'error'})`,
    );
  }
}

/**
 * The profile (config file, then environment), with flags on top. Pure but
 * for reading the config file and the certificate/key files it names.
 */
export function resolveTemporal(
  env: Readonly<Record<string, string | undefined>>,
  flags: TemporalFlags,
): ResolvedTemporal {
  const envVars = Object.fromEntries(
    Object.entries(env).filter((e): e is [string, string] => typeof e[1] === 'string'),
  );
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({
      overrideEnvVars: envVars,
      ...(flags.temporalProfile ? { profile: flags.temporalProfile } : {}),
      ...(flags.temporalConfigFile ? { configSource: { path: flags.temporalConfigFile } } : {}),
    });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const detail =
      typeof code === 'string'
        ? `cannot read ${(error as { path?: string }).path ?? 'the config file'} (${code})`
        : (error as Error).message.split('\n')[0];
    throw new TemporalConfigError(
      `Temporal client config (profile file / TEMPORAL_* environment): ${detail}`,
    );
  }

  const tlsIn = { ...profile.tls };
  if (flags.temporalTlsCert) tlsIn.clientCert = { path: flags.temporalTlsCert };
  if (flags.temporalTlsKey) tlsIn.clientKey = { path: flags.temporalTlsKey };
  if (flags.temporalTlsCa) tlsIn.serverCACert = { path: flags.temporalTlsCa };
  if (flags.temporalTlsServerName) tlsIn.serverName = flags.temporalTlsServerName;
  const flaggedTls = Boolean(
    flags.temporalTlsCert || flags.temporalTlsKey || flags.temporalTlsCa || flags.temporalTlsServerName,
  );

  let apiKey = profile.apiKey;
  if (flags.temporalApiKeyFile) {
    apiKey = readSource({ path: flags.temporalApiKeyFile }, '--temporal-api-key-file')!
      .toString('utf8')
      .trim();
    if (apiKey === '')
      throw new TemporalConfigError(`--temporal-api-key-file: ${flags.temporalApiKeyFile} is empty`);
  }

  const settings: TemporalConnectionSettings = {};
  const tlsWanted = (profile.tls !== undefined && tlsIn.disabled !== true) || flaggedTls;
  if (tlsWanted) {
    const crt = readSource(tlsIn.clientCert, 'Temporal TLS client certificate');
    const key = readSource(tlsIn.clientKey, 'Temporal TLS client key');
    if ((crt === undefined) !== (key === undefined)) {
      throw new TemporalConfigError(
        'Temporal TLS: a client certificate needs its key and a key its certificate (TEMPORAL_TLS_CLIENT_CERT_* with TEMPORAL_TLS_CLIENT_KEY_*, or --temporal-tls-cert with --temporal-tls-key)',
      );
    }
    const ca = readSource(tlsIn.serverCACert, 'Temporal TLS server CA certificate');
    settings.tls = {
      ...(tlsIn.serverName ? { serverNameOverride: tlsIn.serverName } : {}),
      ...(ca ? { serverRootCACertificate: ca } : {}),
      ...(crt && key ? { clientCertPair: { crt, key } } : {}),
    };
  } else if (apiKey !== undefined && tlsIn.disabled !== true) {
    // An API key travels only over TLS (Temporal Cloud); the SDK does the same.
    settings.tls = {};
  }
  if (apiKey !== undefined) settings.apiKey = apiKey;
  if (profile.grpcMeta && Object.keys(profile.grpcMeta).length > 0) settings.metadata = profile.grpcMeta;

  return {
    address: flags.temporalAddress ?? profile.address ?? '127.0.0.1:7233',
    namespace: flags.temporalNamespace ?? profile.namespace ?? 'default',
    settings,
  };
}

/** What a log line or banner may say about the connection: never the key, never key material. */
export function describeTemporal(address: string, settings: TemporalConnectionSettings | undefined): string {
  const parts = [address];
  if (settings?.tls) parts.push(settings.tls.clientCertPair ? 'mTLS' : 'TLS');
  if (settings?.apiKey !== undefined) parts.push('API key');
  return parts.join(', ');
}

function connectOptions(address: string, settings: TemporalConnectionSettings | undefined) {
  return {
    address,
    ...(settings?.tls ? { tls: settings.tls } : {}),
    ...(settings?.apiKey !== undefined ? { apiKey: settings.apiKey } : {}),
    ...(settings?.metadata ? { metadata: settings.metadata } : {}),
  };
}

/** One line for an operator: what failed, where, and the cause's first line (no secrets in either). */
function connectError(address: string, settings: TemporalConnectionSettings | undefined, error: unknown) {
  const cause = error instanceof Error ? error.message : String(error);
  const first = cause.split('\n')[0]!.slice(0, 400);
  return new TemporalConfigError(
    `cannot connect to Temporal at ${describeTemporal(address, settings)}: ${first}`,
    { cause: error },
  );
}

/** A client connection, checked: it fails at start, naming the address, when Temporal cannot be reached. */
export async function connectClient(
  address: string,
  settings: TemporalConnectionSettings | undefined,
  extra: Partial<ConnectionOptions> = {},
): Promise<Connection> {
  try {
    const connection = await Connection.connect({ ...connectOptions(address, settings), ...extra });
    // connect() alone does not prove TLS and auth: one cheap call does.
    await connection.workflowService.getSystemInfo({});
    return connection;
  } catch (error) {
    throw connectError(address, settings, error);
  }
}

/** The worker's native connection, checked the same way. */
export async function connectNative(
  address: string,
  settings: TemporalConnectionSettings | undefined,
): Promise<NativeConnection> {
  try {
    return await NativeConnection.connect(connectOptions(address, settings));
  } catch (error) {
    throw connectError(address, settings, error);
  }
}
