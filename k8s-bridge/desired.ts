/**
 * Proxy object (+ the Secret it references) → the DesiredSpec signal. Pure;
 * hashing happens here so the workflow only ever sees a reference and a
 * content hash, never cloud-init text.
 */
import { ANNOTATION_SKIP_CLEANUP, LABEL_CLOUD_INIT, type Proxy } from '../resources/proxy-schema.js';
import {
  cloudInitContentHash,
  CURRENT_SPEC_HASH_VERSION,
  SPEC_HASH_VERSIONS,
  specHash,
} from '../providers/spec-hash.js';
import { refOf } from '../resources/proxy-ref.js';
import type { CloudInitRef, DesiredSpec } from '../workflows/proxy/types.js';

export interface SecretView {
  labels: Record<string, string>;
  /** base64 values, as the API returns them */
  data: Record<string, string>;
}

export type SecretLookup = (namespace: string, name: string) => SecretView | undefined;

export function desiredSpecOf(proxy: Proxy, lookupSecret: SecretLookup): DesiredSpec {
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
    const secret = lookupSecret(ref.namespace, name);
    const where = `Secret ${ref.namespace}/${name}`;
    if (!secret) cloudInitProblem = `${where} not found, or it lacks the label ${LABEL_CLOUD_INIT}: "true"`;
    else if (secret.labels[LABEL_CLOUD_INIT] !== 'true')
      cloudInitProblem = `${where} lacks the label ${LABEL_CLOUD_INIT}: "true"`;
    else if (secret.data[key] === undefined) cloudInitProblem = `${where} has no key "${key}"`;
    else cloudInitText = Buffer.from(secret.data[key], 'base64').toString('utf8');
  }
  const placement = { ...(spec.placement ?? {}) };
  const input = { placement, port: spec.port, cloudInitSha256: cloudInitContentHash(cloudInitText) };
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
  if (cloudInitProblem) desired.cloudInitProblem = cloudInitProblem;
  return desired;
}
