/** The gateway's proxy-username grammar and Proxy-Authorization decoding (gateway/credentials.ts). */
import { describe, expect, it } from 'vitest';
import {
  decodeProxyAuthorization,
  GatewayCredentialsError,
  MAX_USERNAME_LENGTH,
  parseUsername,
} from '../../gateway/credentials.js';

const MAX_TTL = 3600;

function refusal(fn: () => unknown): GatewayCredentialsError {
  try {
    fn();
  } catch (error) {
    if (error instanceof GatewayCredentialsError) return error;
    throw error;
  }
  throw new Error('expected a GatewayCredentialsError');
}

describe('parseUsername', () => {
  it('an empty username carries no options', () => {
    expect(parseUsername('', MAX_TTL)).toEqual({ selector: [] });
  });

  it('reads session, ttl and attribute selectors, selectors sorted by name', () => {
    expect(parseUsername('session-abc123_geo-eu_ttl-600_purpose-crawl', MAX_TTL)).toEqual({
      session: 'abc123',
      ttlSeconds: 600,
      selector: [
        ['geo', 'eu'],
        ['purpose', 'crawl'],
      ],
    });
  });

  it('reads pool as the ProxyPool to lease from, not an attribute', () => {
    expect(parseUsername('pool-eu-crawl_geo-eu', MAX_TTL)).toEqual({
      pool: 'eu-crawl',
      selector: [['geo', 'eu']],
    });
    expect(() => parseUsername('pool-a_pool-b', MAX_TTL)).toThrow(/pool is given twice/);
  });

  it('splits each option at its first dash, so values may hold dashes and dots', () => {
    expect(parseUsername('geo-local-b_session-a.b-1', MAX_TTL)).toEqual({
      session: 'a.b-1',
      selector: [['geo', 'local-b']],
    });
  });

  it.each([
    ['session', 'option 1 of the proxy username (session): the value must be'],
    ['session-', 'option 1 of the proxy username (session): the value must be'],
    ['-abc', 'option 1 of the proxy username: expected name-value'],
    ['Geo-eu', 'option 1 of the proxy username: expected name-value'],
    ['geo-eu_', 'option 2 of the proxy username: expected name-value'],
    ['geo-eu__ttl-5', 'option 2 of the proxy username: expected name-value'],
    ['geo-e u', 'option 1 of the proxy username (geo): the value must be'],
    ['geo-eu_geo-us', 'option 2 of the proxy username: geo is given twice'],
    ['ttl-0', 'ttl must be whole seconds between 1 and 3600'],
    ['ttl-3601', 'ttl must be whole seconds between 1 and 3600'],
    ['ttl-1.5', 'ttl must be whole seconds between 1 and 3600'],
    ['ttl-0600', 'ttl must be whole seconds between 1 and 3600'],
    ['session-x:y', 'option 1 of the proxy username (session): the value must be'],
  ])('%j is a 400 with a message naming the option', (username, message) => {
    const error = refusal(() => parseUsername(username, MAX_TTL));
    expect(error.status).toBe(400);
    expect(error.message).toContain(message);
  });

  it('never echoes the value it refused (a password typed into the username stays out of logs)', () => {
    const error = refusal(() => parseUsername('session-s3cr3t!pass', MAX_TTL));
    expect(error.message).not.toContain('s3cr3t');
  });

  it('refuses an overlong username before parsing it', () => {
    const error = refusal(() => parseUsername(`geo-${'a'.repeat(MAX_USERNAME_LENGTH)}`, MAX_TTL));
    expect(error.status).toBe(400);
    expect(error.message).toContain('longer than');
  });

  it('accepts every option name that is a lowercase letter then letters or digits', () => {
    expect(parseUsername('a1-x_zone2-b', MAX_TTL).selector).toEqual([
      ['a1', 'x'],
      ['zone2', 'b'],
    ]);
  });
});

describe('decodeProxyAuthorization', () => {
  const basic = (text: string) => `Basic ${Buffer.from(text).toString('base64')}`;

  it('is undefined without the header', () => {
    expect(decodeProxyAuthorization(undefined)).toBeUndefined();
  });

  it('splits at the first colon: the password may hold colons', () => {
    expect(decodeProxyAuthorization(basic('session-1:to:ken'))).toEqual({
      username: 'session-1',
      password: 'to:ken',
    });
    expect(decodeProxyAuthorization(`basic  ${Buffer.from(':tok').toString('base64')} `)).toEqual({
      username: '',
      password: 'tok',
    });
  });

  it.each([['Bearer abc'], ['Basic'], ['Basic !!!'], [basic('no-colon')]])('%j is a 407', (header) => {
    expect(refusal(() => decodeProxyAuthorization(header)).status).toBe(407);
  });
});
