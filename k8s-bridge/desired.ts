/**
 * Proxy object (+ the Secret it references) → the DesiredSpec signal. Pure;
 * hashing happens here so the workflow only ever sees a reference and a
 * content hash, never cloud-init text or credentials.
 */
import { ANNOTATION_SKIP_CLEANUP, type Proxy } from '../resources/proxy-schema.js';
import { cloudInitFromSecret, type SecretView } from '../kube/cloud-init.js';

export type { SecretView } from '../kube/cloud-init.js';
import {
  cloudInitContentHash,
  CURRENT_SPEC_HASH_VERSION,
  SPEC_HASH_VERSIONS,
  specHash,
} from '../providers/spec-hash.js';
import { refOf } from '../resources/proxy-ref.js';
import type { CloudInitRef, DesiredSpec } from '../workflows/proxy/types.js';

export type SecretLookup = (namespace: string, name: string) => SecretView | undefined;

/** A Managed Proxy's generated credentials, as the bridge found or made them, or why they cannot be used. */
export type ManagedCredentials =
  | {
      secret: string;
      /** `credentialsDigest` of what the Secret holds. */
      sha256: string;
    }
  | { secret: string; problem: string };

export function desiredSpecOf(
  proxy: Proxy,
  lookupSecret: SecretLookup,
  credentials?: ManagedCredentials,
): DesiredSpec {
  const spec = proxy.spec;
  const ref = refOf(proxy);
  let cloudInit: CloudInitRef | undefined;
  let cloudInitText: string | undefined;
  let cloudInitProblem: string | undefined;
  if (spec.cloudInit?.inline !== undefined) {
    cloudInit = { source: 'inline' };
    cloudInitText = spec.cloudInit.inline;
  } else if (spec.cloudInit?.secretRef) {
    const { name, key = 'userdata' } = spec.cloudInit.secretRef;
    cloudInit = { source: 'secret', name, key };
    // The cache holds labelled Secrets only: an unlabelled one looks missing.
    const read = cloudInitFromSecret(
      { namespace: ref.namespace, name, key },
      lookupSecret(ref.namespace, name),
      {
        unlabelledLooksMissing: true,
      },
    );
    if ('text' in read) cloudInitText = read.text;
    else cloudInitProblem = read.problem;
  }
  const placement = { ...(spec.placement ?? {}) };
  const input = {
    placement,
    port: spec.port,
    cloudInitSha256: cloudInitContentHash(cloudInitText),
    credentialsSha256: credentials && 'sha256' in credentials ? credentials.sha256 : '',
  };
  const legacySpecHashes = Object.keys(SPEC_HASH_VERSIONS)
    .map(Number)
    .filter((v) => v !== CURRENT_SPEC_HASH_VERSION)
    .map((v) => specHash(input, v));
  const desired: DesiredSpec = {
    generation: proxy.metadata.generation ?? 1,
    mode: spec.mode,
    placement,
    port: spec.port,
    specHash: specHash(input),
    legacySpecHashes,
    skipCleanup: proxy.metadata.annotations?.[ANNOTATION_SKIP_CLEANUP] === 'true',
    deletionRequested: Boolean(proxy.metadata.deletionTimestamp),
  };
  if (spec.provider !== undefined) desired.provider = spec.provider;
  if (spec.endpoint) desired.endpoint = { host: spec.endpoint.host, port: spec.endpoint.port };
  if (cloudInit) desired.cloudInit = cloudInit;
  if (credentials) desired.credentialsSecret = credentials.secret;
  if (credentials && 'problem' in credentials) desired.credentialsProblem = credentials.problem;
  if (cloudInitProblem) desired.cloudInitProblem = cloudInitProblem;
  // Absent unless set, so a Proxy without it signals exactly what it did before.
  if (spec.drainTimeoutSeconds) desired.drainTimeoutSeconds = spec.drainTimeoutSeconds;
  return desired;
}
