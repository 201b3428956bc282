/**
 * The SOCKS5 parser (gateway/socks.ts) on its own: every prefix of a valid
 * message asks for more, a whole one is read exactly, and random or hostile
 * bytes are answered `more` or `bad`, never thrown.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { parseGreeting, parseRequest, parseUserPass, REPLY, replyOf } from '../../gateway/socks.js';
import { Refusal } from '../../gateway/refusal.js';

const parsers = { greeting: parseGreeting, userPass: parseUserPass, request: parseRequest };

describe('SOCKS5 parser', () => {
  const valid = {
    greeting: Buffer.from([5, 2, 0, 2]),
    userPass: Buffer.from([1, 3, ...Buffer.from('a-b'), 2, ...Buffer.from('tk')]),
    request: Buffer.from([5, 1, 0, 3, 7, ...Buffer.from('example'), 1, 187]),
  };

  it('asks for more on every prefix of a valid message and reads the whole one exactly', () => {
    for (const [name, bytes] of Object.entries(valid)) {
      const parse = parsers[name as keyof typeof parsers];
      for (let n = 0; n < bytes.length; n++)
        expect(parse(bytes.subarray(0, n)).kind, `${name}[0..${n}]`).toBe('more');
      const whole = parse(Buffer.concat([bytes, Buffer.from([9, 9])]));
      expect(whole).toMatchObject({ kind: 'done', used: bytes.length });
    }
    expect(parseUserPass(valid.userPass)).toMatchObject({ value: { username: 'a-b', password: 'tk' } });
    expect(parseRequest(valid.request)).toMatchObject({ value: { command: 1, authority: 'example:443' } });
  });

  it('reads the three address types as CONNECT authorities', () => {
    const v4 = parseRequest(Buffer.from([5, 1, 0, 1, 10, 0, 0, 1, 0, 80]));
    const v6 = parseRequest(Buffer.from([5, 1, 0, 4, ...Array<number>(15).fill(0), 1, 0, 80]));
    const named6 = parseRequest(Buffer.from([5, 1, 0, 3, 3, ...Buffer.from('::1'), 0, 80]));
    expect([v4, v6, named6].map((p) => (p.kind === 'done' ? p.value.authority : p.kind))).toEqual([
      '10.0.0.1:80',
      '[0:0:0:0:0:0:0:1]:80',
      '[::1]:80',
    ]);
  });

  it('answers bad versions, unknown address types and empty names with the right reply', () => {
    expect(parseGreeting(Buffer.from([4, 1, 0]))).toMatchObject({ kind: 'bad' });
    expect(parseUserPass(Buffer.from([2, 0, 0]))).toMatchObject({ kind: 'bad' });
    expect(parseRequest(Buffer.from([5, 1, 0, 7, 0, 0]))).toMatchObject({
      kind: 'bad',
      reply: REPLY.addressTypeNotSupported,
    });
    expect(parseRequest(Buffer.from([5, 1, 0, 3, 0, 0, 80]))).toMatchObject({
      kind: 'bad',
      reply: REPLY.generalFailure,
    });
  });

  it('never throws on random bytes', () => {
    for (let i = 0; i < 5_000; i++) {
      const bytes = randomBytes(i % 300);
      // A version byte that passes half the time, so the parsers get past it.
      if (bytes.length > 0 && i % 2 === 0) bytes[0] = i % 4 === 0 ? 5 : 1;
      for (const parse of Object.values(parsers)) {
        const r = parse(bytes);
        expect(['more', 'done', 'bad']).toContain(r.kind);
        if (r.kind === 'done') expect(r.used).toBeLessThanOrEqual(bytes.length);
      }
    }
  });

  it('maps the gateway refusals to RFC 1928 replies', () => {
    expect(replyOf(new Refusal(403, 'x', 'forbidden_target'))).toBe(REPLY.notAllowed);
    expect(replyOf(new Refusal(429, 'x', 'over_limit'))).toBe(REPLY.notAllowed);
    expect(replyOf(new Refusal(502, 'x', 'unresolved'))).toBe(REPLY.hostUnreachable);
    expect(replyOf(new Refusal(502, 'x', 'upstream_failed'))).toBe(REPLY.hostUnreachable);
    expect(replyOf(new Refusal(503, 'x', 'unavailable'))).toBe(REPLY.generalFailure);
    expect(replyOf(new Refusal(400, 'x', 'bad_request'))).toBe(REPLY.generalFailure);
  });
});
