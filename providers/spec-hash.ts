/**
 * The versioned spec hash (DESIGN.md §3, contract §2.1 "Catalogue changes").
 *
 * It covers what makes an instance what it is: `placement`, `port` and the
 * resolved cloud-init (and, from version 2, the proxy's credentials), and nothing else (not the provider config, not
 * health-check settings). A change replaces the instance. The cloud-init enters
 * only as the SHA-256 of its resolved text (`cloudInitContentHash`), computed
 * inside the activity that resolved it, so neither the text nor anything
 * reversible reaches the workflow or its history.
 *
 * Format: `v<version>:<64 hex>`, e.g. `v1:3f...`.
 *
 * Surviving upgrades. When a later release changes how the hash is computed
 * (a new field, a different normalisation), every recorded hash would differ
 * from the recomputed one and every instance would be replaced. The rule is:
 * when only the hash *version* changed, adopt the new hash and keep the
 * instance. Deciding "only the version changed" needs the old hash's input.
 * Two ways:
 *  (a) record, next to the hash, a fingerprint of its input per version;
 *  (b) keep every released version's hash function here, and recompute the
 *      *recorded* version's hash from the *current* input: if it equals the
 *      recorded hash, the spec did not change, only the algorithm did.
 * We chose (b): status stays one opaque string, nothing extra is persisted
 * or can drift, and the cost is that a released version's function is never
 * edited, only added to (the test vectors pin each one). A recorded hash in a
 * version this code does not know (a downgrade) is treated as changed: the
 * safe direction for a cattle instance is to replace it.
 *
 * Pure and deterministic: canonical JSON with sorted keys, undefined fields
 * dropped. Uses node:crypto, so activities compute it, not workflows.
 */
import { createHash } from 'node:crypto';
import type { Placement } from './types.js';

export interface SpecHashInput {
  placement?: Placement;
  port: number;
  /** `cloudInitContentHash(resolvedText)`; '' when the Proxy has no cloud-init. */
  cloudInitSha256: string;
  /**
   * `credentialsDigest(...)` of a Managed proxy's generated credentials
   * (version 2 on); '' or absent when it has none. New credentials replace
   * the instance, through the drain-first path when one is configured.
   */
  credentialsSha256?: string;
}

/** SHA-256 hex of the resolved cloud-init text; '' when there is none. */
export function cloudInitContentHash(text: string | undefined): string {
  if (text === undefined || text === '') return '';
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** JSON with object keys sorted at every level and undefined members dropped. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (value === undefined) throw new TypeError('canonicalJson: undefined at top level');
    if (typeof value === 'number' && !Number.isFinite(value))
      throw new TypeError('canonicalJson: non-finite number');
    return JSON.stringify(value);
  }
  if (Array.isArray(value))
    return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

export type SpecHashFunction = (input: SpecHashInput) => string;

/**
 * Every released version's hash function (hex digest only). Append, never
 * edit: a recorded `vN:` hash is recomputed with entry N to recognise an
 * unchanged spec after an upgrade.
 */
export const SPEC_HASH_VERSIONS: Readonly<Record<number, SpecHashFunction>> = {
  1: (input) => sha256Hex(canonicalJson(version1Fields(input))),
  2: (input) =>
    sha256Hex(canonicalJson({ ...version1Fields(input), credentialsSha256: input.credentialsSha256 ?? '' })),
};

/** What version 1 hashed, and every later version too: placement's four fields, the port, the cloud-init. */
function version1Fields(input: SpecHashInput): Record<string, unknown> {
  return {
    cloudInitSha256: input.cloudInitSha256,
    placement: {
      region: input.placement?.region,
      zone: input.placement?.zone,
      machineType: input.placement?.machineType,
      image: input.placement?.image,
    },
    port: input.port,
  };
}

export const CURRENT_SPEC_HASH_VERSION = 2;

/** The spec hash of `input` in `version` (default: current). */
export function specHash(
  input: SpecHashInput,
  version: number = CURRENT_SPEC_HASH_VERSION,
  versions: Readonly<Record<number, SpecHashFunction>> = SPEC_HASH_VERSIONS,
): string {
  const fn = versions[version];
  if (fn === undefined) throw new RangeError(`unknown spec hash version ${version}`);
  return `v${version}:${fn(input)}`;
}

export function parseSpecHash(hash: string): { version: number; digest: string } | undefined {
  const m = /^v([1-9][0-9]{0,5}):([0-9a-f]{64})$/.exec(hash);
  if (m === null) return undefined;
  return { version: Number(m[1]), digest: m[2]! };
}

export type SpecHashComparison =
  /** Same version, same digest. */
  | 'same'
  /** Recorded in an older (known) version whose hash of the current input matches: adopt the new hash, keep the instance. */
  | 'version-only'
  /** The spec changed (or the recorded hash is malformed or from an unknown version): replace. */
  | 'changed';

/**
 * Compares a recorded hash with the current input (approach (b) above).
 * `versions` and `currentVersion` are parameters so a test can exercise a
 * future version without changing this module.
 */
export function compareSpecHash(
  recorded: string,
  current: SpecHashInput,
  currentVersion: number = CURRENT_SPEC_HASH_VERSION,
  versions: Readonly<Record<number, SpecHashFunction>> = SPEC_HASH_VERSIONS,
): SpecHashComparison {
  const now = specHash(current, currentVersion, versions);
  if (recorded === now) return 'same';
  const parsed = parseSpecHash(recorded);
  if (parsed === undefined || parsed.version === currentVersion) return 'changed';
  const old = versions[parsed.version];
  if (old === undefined) return 'changed';
  return old(current) === parsed.digest ? 'version-only' : 'changed';
}

/**
 * True when two hashes differ only in their version: `recorded` is the old
 * version's hash of exactly the input that `current` hashes now.
 */
export function differsOnlyInVersion(
  recorded: string,
  input: SpecHashInput,
  currentVersion: number = CURRENT_SPEC_HASH_VERSION,
  versions: Readonly<Record<number, SpecHashFunction>> = SPEC_HASH_VERSIONS,
): boolean {
  return compareSpecHash(recorded, input, currentVersion, versions) === 'version-only';
}
