import { describe, expect, it } from 'vitest';
import { base32Lower, instanceNameFromUid } from '../../providers/names.js';

// Vectors computed independently with Python:
//   python3 -c "import hashlib,base64;print('proxy-'+base64.b32encode(hashlib.sha256(b'UID').digest()).decode().lower()[:16])"
describe('instanceNameFromUid', () => {
  it.each([
    ['UID', 'proxy-652shkbzaorknw3d'],
    ['0b5f2c1e-3d4a-4e6f-9a8b-7c6d5e4f3a2b', 'proxy-guz5rfygl57oretv'],
    ['ü-ñ', 'proxy-2ymgxs5y47lzep3q'],
  ])('%s -> %s', (uid, name) => {
    expect(instanceNameFromUid(uid)).toBe(name);
  });

  it('is a 22-character DNS-1123 label', () => {
    const name = instanceNameFromUid('any');
    expect(name).toHaveLength(22);
    expect(name).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  });

  it('rejects an empty UID rather than naming every UID-less Proxy alike', () => {
    expect(() => instanceNameFromUid('')).toThrow(/empty UID/);
  });
});

// RFC 4648 §10 test vectors, lowercased, padding removed.
describe('base32Lower', () => {
  it.each([
    ['', ''],
    ['f', 'my'],
    ['fo', 'mzxq'],
    ['foo', 'mzxw6'],
    ['foob', 'mzxw6yq'],
    ['fooba', 'mzxw6ytb'],
    ['foobar', 'mzxw6ytboi'],
  ])('%j -> %j', (input, output) => {
    expect(base32Lower(Buffer.from(input, 'utf8'))).toBe(output);
  });
});
