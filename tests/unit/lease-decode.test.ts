/**
 * The lease API reads request bodies and query strings the way the seed's
 * Go handlers did (encoding/json's Decoder.Decode into the handler's struct,
 * net/url's Query()), so a crawler sees the same status and error code for
 * the same bytes. Every expectation in the tables below is what Go 1.26
 * printed for the seed's own decode and query code (internal/discovery/
 * handlers.go, copied into a throwaway program).
 */
import { describe, expect, it } from 'vitest';
import { decodeLeaseRequest, decodeReportRequest, goQueryValues, goQuote } from '../../api/go-compat.js';

type LeaseWant = { ttlSeconds: number; target?: string; selector?: Record<string, string> | null } | string;

describe('decodeLeaseRequest: encoding/json into the seed leaseRequest', () => {
  const nested = (n: number) => `{"x":${'['.repeat(n)}${']'.repeat(n)}}`;
  it.each<[string, LeaseWant]>([
    // Only the first JSON value is read; whatever follows it is never looked at.
    ['{} {}', { ttlSeconds: 0 }],
    ['{}garbage', { ttlSeconds: 0 }],
    ['{"ttlSeconds":60} x', { ttlSeconds: 60 }],
    [' \t\r\n{"ttlSeconds":7}', { ttlSeconds: 7 }],
    // A null body is the zero struct, and so is anything that starts with null.
    ['null', { ttlSeconds: 0 }],
    ['nullx', { ttlSeconds: 0 }],
    ['null {}', { ttlSeconds: 0 }],
    // Field names match case-insensitively (Unicode simple folding: ſ is s).
    ['{"TTLSeconds":60}', { ttlSeconds: 60 }],
    ['{"ttlseconds":60}', { ttlSeconds: 60 }],
    ['{"ttlſeconds":60}', { ttlSeconds: 60 }],
    ['{"ttl\\u0053econds":60}', { ttlSeconds: 60 }],
    ['{"TARGET":"a"}', { ttlSeconds: 0, target: 'a' }],
    ['{"ttlSeconds":60,"TTLSECONDS":70}', { ttlSeconds: 70 }],
    // null leaves a string or number as it was; in the selector it is "".
    ['{"target":"a","target":null}', { ttlSeconds: 0, target: 'a' }],
    ['{"selector":{"geo":null}}', { ttlSeconds: 0, selector: { geo: '' } }],
    // A second selector object merges into the first; null drops it.
    ['{"selector":{"a":"1"},"selector":{"b":"2"}}', { ttlSeconds: 0, selector: { a: '1', b: '2' } }],
    ['{"selector":{"a":"1"},"selector":null}', { ttlSeconds: 0, selector: null }],
    ['{"selector":null,"selector":{"b":"2"}}', { ttlSeconds: 0, selector: { b: '2' } }],
    ['{"selector":{"a":"1","a":"2"}}', { ttlSeconds: 0, selector: { a: '2' } }],
    ['{"selector":{"Geo":"x","geo":"y"}}', { ttlSeconds: 0, selector: { Geo: 'x', geo: 'y' } }],
    ['{"selector":{"__proto__":"x"}}', { ttlSeconds: 0, selector: { ['__proto__']: 'x' } }],
    ['{"x":[1,2,{"y":null}],"ttlSeconds":7}', { ttlSeconds: 7 }],
    ['{"target":"a\\tb"}', { ttlSeconds: 0, target: 'a\tb' }],
    ['{"target":"\\ud800"}', { ttlSeconds: 0, target: '\ufffd' }],
    // Whole numbers within int64 are decoded; their range is the handler's business (invalid_ttl).
    ['{"ttlSeconds":-0}', { ttlSeconds: 0 }],
    ['{"ttlSeconds":-5}', { ttlSeconds: -5 }],
    ['{"ttlSeconds":9007199254740993}', { ttlSeconds: Number('9007199254740993') }],
    [nested(9_999), { ttlSeconds: 0 }],
    // Errors, with Go's own messages where encoding/json's wording is ours to copy.
    ['', 'EOF'],
    ['   ', 'EOF'],
    ['nul', 'unexpected EOF'],
    ['{', 'unexpected EOF'],
    ['{"a":1', 'unexpected EOF'],
    ['"abc', 'unexpected EOF'],
    ['[]', 'json: cannot unmarshal array into Go value of type discovery.leaseRequest'],
    ['"hello"', 'json: cannot unmarshal string into Go value of type discovery.leaseRequest'],
    ['5', 'json: cannot unmarshal number into Go value of type discovery.leaseRequest'],
    ['01', 'json: cannot unmarshal number into Go value of type discovery.leaseRequest'],
    ['true', 'json: cannot unmarshal bool into Go value of type discovery.leaseRequest'],
    ['truex', 'json: cannot unmarshal bool into Go value of type discovery.leaseRequest'],
    [
      '{"ttlSeconds":1e30}',
      'json: cannot unmarshal number 1e30 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":1e2}',
      'json: cannot unmarshal number 1e2 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":1E2}',
      'json: cannot unmarshal number 1E2 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":100.0}',
      'json: cannot unmarshal number 100.0 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":0.0}',
      'json: cannot unmarshal number 0.0 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":1.5}',
      'json: cannot unmarshal number 1.5 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":9223372036854775808}',
      'json: cannot unmarshal number 9223372036854775808 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":-9223372036854775809}',
      'json: cannot unmarshal number -9223372036854775809 into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":"300"}',
      'json: cannot unmarshal string into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"TTLSeconds":"x"}',
      'json: cannot unmarshal string into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":true}',
      'json: cannot unmarshal bool into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":{}}',
      'json: cannot unmarshal object into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    // A type error anywhere fails the decode, even if a later value would have been fine.
    [
      '{"ttlSeconds":"x","ttlSeconds":5}',
      'json: cannot unmarshal string into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"ttlSeconds":5,"ttlSeconds":"x"}',
      'json: cannot unmarshal string into Go struct field leaseRequest.ttlSeconds of type int64',
    ],
    [
      '{"target":5,"ttlSeconds":-1}',
      'json: cannot unmarshal number into Go struct field leaseRequest.target of type string',
    ],
    [
      '{"selector":{"geo":1}}',
      'json: cannot unmarshal number into Go struct field leaseRequest.selector of type string',
    ],
    [
      '{"Selector":{"a":{}}}',
      'json: cannot unmarshal object into Go struct field leaseRequest.selector of type string',
    ],
    [
      '{"selector":["geo"]}',
      'json: cannot unmarshal array into Go struct field leaseRequest.selector of type map[string]string',
    ],
    [
      '{"selector":"x"}',
      'json: cannot unmarshal string into Go struct field leaseRequest.selector of type map[string]string',
    ],
    [
      '{"ttlSeconds":-1,"selector":{"geo":1}}',
      'json: cannot unmarshal number into Go struct field leaseRequest.selector of type string',
    ],
    [nested(10_000), "invalid character '[' exceeded max depth"],
  ])('%j', (body, want) => {
    const got = decodeLeaseRequest(body);
    if (typeof want === 'string') {
      expect(got).toEqual({ ok: false, message: want });
      return;
    }
    expect(got.ok).toBe(true);
    if (!got.ok) return;
    expect(got.value.ttlSeconds).toBe(want.ttlSeconds);
    expect(got.value.target).toBe(want.target ?? '');
    const selector = got.value.selector ? Object.fromEntries(got.value.selector) : null;
    expect(selector).toEqual(want.selector ?? null);
  });

  it.each([
    '{"a":1]}',
    '{"ttlSeconds":60,}',
    '{"ttlSeconds":01}',
    '{"ttlSeconds":-}',
    '{"a" 1',
    '\f{}',
    '[1,}',
  ])('rejects the syntax error in %j', (body) => {
    const got = decodeLeaseRequest(body);
    expect(got.ok).toBe(false);
    if (!got.ok) expect(got.message).not.toMatch(/^json: |EOF$/);
  });

  it('accepts a body exactly when it starts with a well-formed JSON object (checked against JSON.parse)', () => {
    // Deterministic fuzz over JSON's alphabet. Go's decoder succeeds iff some
    // prefix ending in "}" is a valid object (its first value); "x" is an
    // unknown field, so no type error can intervene.
    let x = 7; // xorshift32: deterministic, and its low bits are usable
    const rand = (n: number) => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) % n;
    };
    const alphabet = [
      ...['"a"', '"\\u0041"', '1', '-1.5e3', 'null', 'true', '{}', '[]', '{"k":', '[1'],
      ...[',', ':', '{', '}', '[', ']', '"', '\\', ' ', 'x', '.', 'e', '-', '0'],
    ];
    const parses = (s: string) => {
      try {
        JSON.parse(s);
        return true;
      } catch {
        return false;
      }
    };
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) {
      const inner = Array.from({ length: 1 + rand(6) }, () => alphabet[rand(alphabet.length)]).join('');
      const body = `{"x":${inner}}`;
      let validPrefix = false;
      for (let end = body.indexOf('}'); end >= 0 && !validPrefix; end = body.indexOf('}', end + 1)) {
        validPrefix = parses(body.slice(0, end + 1));
      }
      const got = decodeLeaseRequest(body);
      expect(got.ok, body).toBe(validPrefix);
      if (got.ok) {
        accepted++;
        expect(got.value, body).toEqual({ selector: null, ttlSeconds: 0, target: '', pool: null });
      }
    }
    // Both outcomes must be well represented, or the comparison proved little.
    expect(accepted).toBeGreaterThan(1_000);
    expect(accepted).toBeLessThan(18_000);
  });
});

describe('decodeReportRequest: encoding/json into the seed reportRequest', () => {
  it.each<[string, { result: string; target?: string } | string]>([
    ['null', { result: '' }],
    ['null x', { result: '' }],
    ['{}', { result: '' }],
    ['{"result":null}', { result: '' }],
    ['{"result":"OK"}', { result: 'OK' }],
    ['{"RESULT":"ok"}', { result: 'ok' }],
    ['{"reſult":"banned","TARGET":"x"}', { result: 'banned', target: 'x' }],
    ['{"result":"ok"} {', { result: 'ok' }],
    ['{"result":"banned","target":null}', { result: 'banned' }],
    ['[]', 'json: cannot unmarshal array into Go value of type discovery.reportRequest'],
    ['', 'EOF'],
    [
      '{"result":1}',
      'json: cannot unmarshal number into Go struct field reportRequest.result of type string',
    ],
    [
      '{"result":"ok","target":1}',
      'json: cannot unmarshal number into Go struct field reportRequest.target of type string',
    ],
  ])('%j', (body, want) => {
    const got = decodeReportRequest(body);
    if (typeof want === 'string') expect(got).toEqual({ ok: false, message: want });
    else expect(got).toEqual({ ok: true, value: { result: want.result, target: want.target ?? '' } });
  });
});

describe('goQueryValues: net/url Query() and values[0]', () => {
  const quoted = (raw: string) => goQuote(goQueryValues(`v=${raw}`).get('v')!);
  it.each<[string, Record<string, string>]>([
    ['healthy=%zz', {}],
    ['healthy=%zz&attr.geo=eu', { 'attr.geo': 'eu' }],
    ['attr.geo=', { 'attr.geo': '' }],
    ['attr.geo', { 'attr.geo': '' }],
    ['attr.geo=%zz', {}],
    ['attr.geo=eu;x=1', {}],
    ['healthy=true;attr.geo=eu', {}],
    ['attr.geo=e+u', { 'attr.geo': 'e u' }],
    ['attr.geo=e%20u', { 'attr.geo': 'e u' }],
    ['attr.geo=a%2Bb', { 'attr.geo': 'a+b' }],
    ['attr%2Egeo=eu', { 'attr.geo': 'eu' }],
    ['healthy=bogus&healthy=true', { healthy: 'bogus' }],
    ['healthy=true&healthy=bogus', { healthy: 'true' }],
    ['&&attr.geo=eu&', { 'attr.geo': 'eu' }],
    ['=x&attr.=', { '': 'x', 'attr.': '' }],
    ['healthy=%', {}],
    ['healthy=%4', {}],
    ['healthy=tru%65', { healthy: 'true' }],
    ['attr.geo=eu&attr.geo=us', { 'attr.geo': 'eu' }],
    ['attr.geo=%C3%A9', { 'attr.geo': 'é' }],
    ['', {}],
  ])('%j', (raw, want) => {
    expect(Object.fromEntries(goQueryValues(raw))).toEqual(want);
  });

  it('keeps bytes that are not UTF-8 distinct from every valid string, as Go strings do', () => {
    const values = goQueryValues('healthy=%ff&attr.%ff=&attr.x=%C3%A9%ff');
    expect(goQuote(values.get('healthy')!)).toBe('"\\xff"');
    expect(goQuote(values.get('attr.x')!)).toBe('"é\\xff"');
    expect(values.get('attr.x')).not.toBe('é\ufffd');
    const keys = [...values.keys()].filter((k) => k !== 'healthy' && k !== 'attr.x');
    expect(keys).toHaveLength(1);
    expect(keys[0]).not.toBe('attr.\ufffd');
    expect(quoted('%f0%90%80a')).toBe('"\\xf0\\x90\\x80a"');
    expect(quoted('%ed%a0%80')).toBe('"\\xed\\xa0\\x80"');
    expect(quoted('%01%e2%80%a8')).toBe('"\\x01\\u2028"');
  });

  it('ignores everything past 10,000 parameters, as net/url does', () => {
    const many = `healthy=bogus${'&x=1'.repeat(9_999)}`;
    expect(goQueryValues(many).get('healthy')).toBe('bogus');
    expect(goQueryValues(`${many}&x=1`).size).toBe(0);
  });
});

describe('goQuote: strconv.Quote, as the seed formatted %q', () => {
  it.each([
    ['', '""'],
    ['ok', '"ok"'],
    ['\u0001é\u2028\u00a0"x', '"\\x01é\\u2028\\u00a0\\"x"'],
    ['a\\b\t', '"a\\\\b\\t"'],
    ['\u0000\u0007\u0008\u000b\u000c\n\r\u007f', '"\\x00\\a\\b\\v\\f\\n\\r\\x7f"'],
    ['\ufffd', '"\ufffd"'],
    ['\ud800', '"\ufffd"'],
    ['😀', '"😀"'],
    ['\u{e0001}', '"\\U000e0001"'],
  ])('%j -> %s', (input, want) => {
    expect(goQuote(input)).toBe(want);
  });
});
