import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  cloudInitContentHash,
  compareSpecHash,
  differsOnlyInVersion,
  parseSpecHash,
  specHash,
  SPEC_HASH_VERSIONS,
  type SpecHashFunction,
  type SpecHashInput,
} from '../../providers/spec-hash.js';

const cloudInit = '#cloud-config\nruncmd: [echo hi]\n';
const input: SpecHashInput = {
  port: 3128,
  placement: { zone: 'europe-west1-b', machineType: 'e2-small' },
  cloudInitSha256: cloudInitContentHash(cloudInit),
};

describe('spec hash v1', () => {
  // Computed independently with Python (json.dumps(sort_keys=True, separators=(',',':')) + sha256).
  // Pinned: a released version's function must never change.
  it('matches the pinned vectors', () => {
    expect(cloudInitContentHash(cloudInit)).toBe(
      '74dc991243d161306965ed07f0af1e0f3634eb7af882d11a8905cc9173dd0067',
    );
    expect(specHash(input, 1)).toBe('v1:2a950bc0ade2e1df12b30ef4be47679c1401c51156ade919786eb0bc14cad94d');
    expect(specHash({ port: 3128, cloudInitSha256: '' }, 1)).toBe(
      'v1:e80795ab55a5b84a2bb6fc08a60a6f70d198fc5789259dbe740c346a915f2c53',
    );
  });

  it('does not depend on key order or on absent-versus-undefined fields', () => {
    const reordered: SpecHashInput = {
      cloudInitSha256: input.cloudInitSha256,
      placement: { machineType: 'e2-small', region: undefined, zone: 'europe-west1-b' },
      port: 3128,
    };
    expect(specHash(reordered)).toBe(specHash(input));
    expect(specHash({ port: 3128, cloudInitSha256: '', placement: {} })).toBe(
      specHash({ port: 3128, cloudInitSha256: '' }),
    );
  });

  it.each([
    ['port', { ...input, port: 8080 }],
    ['zone', { ...input, placement: { ...input.placement, zone: 'europe-west1-c' } }],
    ['image', { ...input, placement: { ...input.placement, image: 'debian-13' } }],
    ['cloud-init', { ...input, cloudInitSha256: cloudInitContentHash(cloudInit + '\n') }],
  ])('changes when %s changes', (_what, changed) => {
    expect(specHash(changed)).not.toBe(specHash(input));
    expect(compareSpecHash(specHash(input), changed)).toBe('changed');
  });

  it('never contains the cloud-init text', () => {
    expect(specHash(input)).not.toContain('runcmd');
    expect(cloudInitContentHash(undefined)).toBe('');
  });

  it('canonicalJson sorts keys at every level', () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { z: 1, y: 2 }], c: 'x' } })).toBe(
      '{"a":{"c":"x","d":[2,{"y":2,"z":1}]},"b":1}',
    );
  });

  it('parses only well-formed hashes', () => {
    expect(parseSpecHash(specHash(input, 1))).toEqual({ version: 1, digest: specHash(input, 1).slice(3) });
    for (const bad of [
      '',
      'v1:',
      'v0:' + 'a'.repeat(64),
      '1:' + 'a'.repeat(64),
      'v1:' + 'A'.repeat(64),
      'v1:' + 'a'.repeat(63),
    ]) {
      expect(parseSpecHash(bad)).toBeUndefined();
    }
  });
});

describe('spec hash v2: the credentials digest', () => {
  // Computed independently with Python, as v1's.
  it('matches the pinned vectors', () => {
    expect(specHash(input)).toBe('v2:9fb9568effed3c791d2d804bd62b279b2dd280c15c0f2e31d08558bc26ac31cc');
    expect(specHash({ ...input, credentialsSha256: 'ab'.repeat(32) })).toBe(
      'v2:9171e69fb68566c87f971a26238a67b401c6fc44abb361612789645cd3da6bc0',
    );
  });

  it('new credentials are a changed spec; a v1 hash of the same spec is adopted, credentials or not', () => {
    const withCredentials = { ...input, credentialsSha256: 'ab'.repeat(32) };
    expect(compareSpecHash(specHash(input), withCredentials)).toBe('changed');
    expect(compareSpecHash(specHash(withCredentials), { ...input, credentialsSha256: 'cd'.repeat(32) })).toBe(
      'changed',
    );
    expect(compareSpecHash(specHash(input, 1), withCredentials)).toBe('version-only');
  });
});

describe('versioning: adopt after an upgrade that only changed the hash', () => {
  // A hypothetical v2 (say, it starts hashing a new field); the released v1 is kept.
  const v2: SpecHashFunction = (i) => 'f'.repeat(48) + SPEC_HASH_VERSIONS[1]!(i).slice(0, 16);
  const withV2 = { ...SPEC_HASH_VERSIONS, 2: v2 };

  it('a v1 hash of the same input is version-only under v2', () => {
    const recorded = specHash(input, 1);
    expect(compareSpecHash(recorded, input, 2, withV2)).toBe('version-only');
    expect(differsOnlyInVersion(recorded, input, 2, withV2)).toBe(true);
  });

  it('a v1 hash of a different input is changed under v2', () => {
    const recorded = specHash({ ...input, port: 9999 }, 1);
    expect(compareSpecHash(recorded, input, 2, withV2)).toBe('changed');
    expect(differsOnlyInVersion(recorded, input, 2, withV2)).toBe(false);
  });

  it('same version and digest is same; an unknown version or garbage is changed', () => {
    expect(compareSpecHash(specHash(input, 2, withV2), input, 2, withV2)).toBe('same');
    expect(compareSpecHash(specHash(input), input)).toBe('same');
    expect(compareSpecHash('v7:' + 'a'.repeat(64), input, 2, withV2)).toBe('changed');
    expect(compareSpecHash('garbage', input)).toBe('changed');
  });

  it('refuses to hash with an unknown version', () => {
    expect(() => specHash(input, 3, withV2)).toThrow(/unknown spec hash version 3/);
  });
});
