/**
 * The vendor provider's pure parts: the template grammar, the presets'
 * documented shapes and their round trip through parseCredentials, session
 * ids, and the config block's load-time refusals (each naming its field,
 * none quoting the account password).
 */
import { describe, expect, it } from 'vitest';
import { formatPath } from '../../providers/config.js';
import { countryFor, vendorConfigSchema, type VendorConfig } from '../../providers/vendor/config.js';
import { PRESET_NAMES, PRESETS, presetTemplates, type PresetName } from '../../providers/vendor/presets.js';
import {
  formatDuration,
  keyedRandom,
  newSessionId,
  parseCredentials,
  parseDuration,
  placeholdersOf,
  renderCredentials,
  TemplateError,
  type ParseError,
  type ParsedCredentials,
} from '../../providers/vendor/template.js';

const SENTINEL = 'SENTINEL7pw';

const ACCOUNTS: Record<PresetName, { username: string; password: string }> = {
  brightdata: { username: 'hl_1234abcd', password: `${SENTINEL}bd` },
  oxylabs: { username: 'crawler_team', password: `${SENTINEL}ox` },
  decodo: { username: 'sp_user42', password: `${SENTINEL}dc` },
  iproyal: { username: 'iproyaluser', password: `${SENTINEL}ir` },
  soax: { username: '123456', password: `${SENTINEL}sx` },
};
const PARAMS: Record<PresetName, Record<string, string>> = {
  brightdata: { zone: 'residential_1' },
  oxylabs: {},
  decodo: {},
  iproyal: {},
  soax: {},
};

/** The documented shape of each preset for a session `s`, country `de`, 30 minutes. */
const EXPECTED: Record<PresetName, (s: string) => { username: string; password: string }> = {
  brightdata: (s) => ({
    username: `brd-customer-hl_1234abcd-zone-residential_1-session-${s}-country-de`,
    password: `${SENTINEL}bd`,
  }),
  oxylabs: (s) => ({
    username: `customer-crawler_team-cc-de-sessid-${s}-sesstime-30`,
    password: `${SENTINEL}ox`,
  }),
  decodo: (s) => ({
    username: `user-sp_user42-country-de-session-${s}-sessionduration-30`,
    password: `${SENTINEL}dc`,
  }),
  iproyal: (s) => ({
    username: 'iproyaluser',
    password: `${SENTINEL}ir_country-de_session-${s}_lifetime-30m`,
  }),
  soax: (s) => ({
    username: `package-123456-country-de-sessionid-${s}-sessionlength-1800`,
    password: `${SENTINEL}sx`,
  }),
};

function parsed(result: ParsedCredentials | ParseError): ParsedCredentials {
  if ('error' in result) throw new Error(`parse failed: ${result.error}`);
  return result;
}

describe('template grammar', () => {
  it('lists placeholders once each, in order, inside and outside optional segments', () => {
    expect(placeholdersOf('a-{user}[-c-{country}]-{session}-{user}')).toEqual(['user', 'country', 'session']);
    expect(placeholdersOf('plain')).toEqual([]);
  });

  it.each([
    ['a-{user', 'not closed'],
    ['a-}', 'closes no placeholder'],
    ['a-{1x}', 'is not a name'],
    ['[a[{b}]]', 'do not nest'],
    ['a]', 'closes no optional segment'],
    ['[-{country}', 'not closed'],
    ['x[-fixed]', 'holds no placeholder'],
  ])('refuses %s', (template, message) => {
    expect(() => placeholdersOf(template)).toThrow(TemplateError);
    expect(() => placeholdersOf(template)).toThrow(message);
  });

  it('writes durations in the largest unit that divides them', () => {
    expect([45, 60, 90, 1800, 7200, 5400, 604_800, 90_000].map(formatDuration)).toEqual([
      '45s',
      '1m',
      '90s',
      '30m',
      '2h',
      '90m',
      '7d',
      '25h',
    ]);
    expect(parseDuration('30m')).toBe(1800);
    expect(parseDuration('7d')).toBe(604_800);
    expect(parseDuration('30')).toBeUndefined();
    expect(parseDuration('1h30m')).toBeUndefined();
  });

  it('drops an optional segment when any placeholder inside is absent or empty, and keeps it otherwise', () => {
    const t = {
      username: 'u-{user}[-z-{zone}-c-{country}]-s-{session}',
      password: '{password}',
      session: PRESETS.decodo.session,
    };
    const base = { account: { username: 'me', password: 'pw' }, session: 'abc', lifetimeSeconds: 60 };
    expect(renderCredentials(t, { ...base, params: { zone: 'z1' }, country: 'FR' }).username).toBe(
      'u-me-z-z1-c-fr-s-abc',
    );
    expect(renderCredentials(t, { ...base, params: { zone: 'z1' } }).username).toBe('u-me-s-abc');
    expect(renderCredentials(t, { ...base, params: { zone: '' }, country: 'fr' }).username).toBe(
      'u-me-s-abc',
    );
  });

  it('refuses a render whose required placeholder has no value, or a lifetime {minutes} cannot write', () => {
    const t = {
      username: 'u-{user}-{zone}-{session}',
      password: '{password}',
      session: PRESETS.decodo.session,
    };
    const base = { account: { username: 'me', password: 'pw' }, session: 'abc', lifetimeSeconds: 60 };
    expect(() => renderCredentials(t, { ...base, params: { zone: '' } })).toThrow('needs {zone}');
    expect(() => renderCredentials(t, { ...base, params: {} })).toThrow('unknown placeholder {zone}');
    const o = presetTemplates(PRESETS.oxylabs);
    expect(() => renderCredentials(o, { ...base, params: {}, session: 'ABC', lifetimeSeconds: 90 })).toThrow(
      'whole minutes',
    );
    expect(() =>
      renderCredentials(o, { ...base, params: {}, session: 'ABC', country: 'usa', lifetimeSeconds: 60 }),
    ).toThrow('two-letter');
  });
});

describe('presets', () => {
  it.each(PRESET_NAMES)('%s renders its documented shape and parses back', (name) => {
    const preset = PRESETS[name];
    const t = presetTemplates(preset);
    const session = newSessionId(preset, keyedRandom(`proxy-${name}`));
    const sent = renderCredentials(t, {
      account: ACCOUNTS[name],
      params: PARAMS[name],
      session,
      country: 'DE',
      lifetimeSeconds: 1800,
    });
    expect(sent).toEqual(EXPECTED[name](session));
    const back = parsed(parseCredentials(t, PARAMS[name], sent, ACCOUNTS[name]));
    expect(back.account).toEqual(ACCOUNTS[name]);
    expect(back.session).toBe(session);
    expect(back.country).toBe('de');
    // Bright Data writes no lifetime (sticky while used).
    expect(back.lifetimeSeconds).toBe(name === 'brightdata' ? undefined : 1800);
  });

  it.each(PRESET_NAMES)('%s drops the country when a Proxy has none, and parses that back', (name) => {
    const preset = PRESETS[name];
    const t = presetTemplates(preset);
    const session = newSessionId(preset);
    const sent = renderCredentials(t, {
      account: ACCOUNTS[name],
      params: PARAMS[name],
      session,
      lifetimeSeconds: preset.lifetime.defaultSeconds,
    });
    expect(`${sent.username} ${sent.password}`).not.toMatch(/country|-cc-/);
    const back = parsed(parseCredentials(t, PARAMS[name], sent, ACCOUNTS[name]));
    expect(back.session).toBe(session);
    expect(back.country).toBeUndefined();
  });

  it('each preset names its sources, an endpoint and consistent lifetime bounds', () => {
    for (const name of PRESET_NAMES) {
      const p = PRESETS[name];
      expect(p.sources.length).toBeGreaterThan(0);
      for (const url of p.sources) expect(url).toMatch(/^https:\/\//);
      expect(p.endpoint.port).toBeGreaterThan(0);
      expect(p.lifetime.minSeconds).toBeLessThanOrEqual(p.lifetime.defaultSeconds);
      expect(p.lifetime.defaultSeconds).toBeLessThanOrEqual(p.lifetime.maxSeconds);
      expect(
        vendorConfigSchema.safeParse({ preset: name, params: PARAMS[name], credentialsSecretRef: REF })
          .success,
      ).toBe(true);
    }
    expect(PRESETS.iproyal.session).toMatchObject({ length: 8, minLength: 8, maxLength: 8 });
    expect(PRESETS.oxylabs.lifetime.maxSeconds).toBe(1440 * 60);
    expect(PRESETS.iproyal.lifetime.maxSeconds).toBe(7 * 86_400);
  });
});

describe('session ids', () => {
  it("obey each preset's alphabet and length", () => {
    for (const name of PRESET_NAMES) {
      const rules = PRESETS[name].session;
      for (let i = 0; i < 20; i++) {
        const id = newSessionId(rules);
        expect(id).toHaveLength(rules.length);
        for (const ch of id) expect(rules.alphabet).toContain(ch);
      }
    }
    expect(newSessionId(PRESETS.iproyal)).toMatch(/^[a-z0-9]{8}$/);
  });

  it('are the same for the same key and differ between keys', () => {
    const rules = PRESETS.decodo.session;
    expect(newSessionId(rules, keyedRandom('a'))).toBe(newSessionId(rules, keyedRandom('a')));
    expect(newSessionId(rules, keyedRandom('a'))).not.toBe(newSessionId(rules, keyedRandom('b')));
  });

  it('take numbers in [0, 1) one per character, and skip biased bytes', () => {
    const rules = { alphabet: 'abc', length: 4, minLength: 4, maxLength: 4 };
    const numbers = [0, 0.4, 0.7, 0.99];
    expect(newSessionId(rules, () => numbers.shift()!)).toBe('abcc');
    // 255 is at or above 256 - 256 % 3 = 255: skipped (it would favour 'a'); 3 -> 'a', 4 -> 'b', 5 -> 'c'.
    const bytes = [Buffer.from([255, 3, 255, 4]), Buffer.from([5, 6])];
    expect(newSessionId(rules, () => bytes.shift()!)).toBe('abca');
  });
});

describe('parseCredentials', () => {
  const t = presetTemplates(PRESETS.oxylabs);
  const account = ACCOUNTS.oxylabs;
  const good = renderCredentials(t, {
    account,
    params: {},
    session: 'ABC123',
    country: 'us',
    lifetimeSeconds: 600,
  });

  it('says credentials for another account, options for the account with bad options', () => {
    const cases: Array<[string, { username: string; password: string }, ParseError['kind']]> = [
      ['wrong password', { ...good, password: 'nope' }, 'credentials'],
      ['wrong user', { ...good, username: good.username.replace('crawler_team', 'someone') }, 'credentials'],
      [
        'forbidden session characters',
        { ...good, username: good.username.replace('ABC123', 'abc!123') },
        'options',
      ],
      ['session too long', { ...good, username: good.username.replace('ABC123', 'A'.repeat(33)) }, 'options'],
      ['bad country', { ...good, username: good.username.replace('-cc-us', '-cc-usa') }, 'options'],
      [
        'lifetime not a number',
        { ...good, username: good.username.replace('sesstime-10', 'sesstime-ten') },
        'options',
      ],
      ['unsupported parameter', { ...good, username: `${good.username}-foo-bar` }, 'options'],
      ['no session', { ...good, username: 'customer-crawler_team-cc-us' }, 'options'],
    ];
    for (const [what, sent, kind] of cases) {
      const result = parseCredentials(t, {}, sent, account);
      expect('error' in result ? result.kind : 'parsed', what).toBe(kind);
    }
    expect(parsed(parseCredentials(t, {}, good, account)).lifetimeSeconds).toBe(600);
  });

  it("IPRoyal: a password that only extends the account's is the wrong account", () => {
    const ir = presetTemplates(PRESETS.iproyal);
    const acc = ACCOUNTS.iproyal;
    const sent = renderCredentials(ir, {
      account: acc,
      params: {},
      session: 'abcd1234',
      lifetimeSeconds: 60,
    });
    expect(sent.password).toBe(`${SENTINEL}ir_session-abcd1234_lifetime-1m`);
    const extended = { ...sent, password: `${acc.password}X_session-abcd1234_lifetime-1m` };
    expect(parseCredentials(ir, {}, extended, acc)).toMatchObject({ kind: 'credentials' });
    const shortSession = { ...sent, password: `${acc.password}_session-abc123_lifetime-1m` };
    expect(parseCredentials(ir, {}, shortSession, acc)).toMatchObject({ kind: 'options' });
    const badUnit = { ...sent, password: `${acc.password}_session-abcd1234_lifetime-1w` };
    expect(parseCredentials(ir, {}, badUnit, acc)).toMatchObject({ kind: 'options' });
  });

  it('without the account, reads it from what was sent', () => {
    const back = parsed(parseCredentials(t, {}, good));
    expect(back.account).toEqual(account);
    expect(back.session).toBe('ABC123');
  });

  it('never quotes the account password or what was sent', () => {
    const ir = presetTemplates(PRESETS.iproyal);
    const acc = ACCOUNTS.iproyal;
    const attempts = [
      { username: acc.username, password: `${SENTINEL}-other` },
      { username: acc.username, password: `${acc.password}_session-${SENTINEL}_lifetime-1m` },
      {
        username: acc.username,
        password: `${acc.password}_country-${SENTINEL}_session-abcd1234_lifetime-1m`,
      },
    ];
    for (const sent of attempts) {
      const result = parseCredentials(ir, {}, sent, acc);
      expect('error' in result).toBe(true);
      expect(JSON.stringify(result)).not.toContain(SENTINEL);
    }
    // A password the vendor forbids (IPRoyal's options are "_"-separated words) is refused unquoted.
    const render = () =>
      renderCredentials(ir, {
        account: { username: acc.username, password: `${SENTINEL}@x` },
        params: {},
        session: 'abcd1234',
        lifetimeSeconds: 60,
      });
    expect(render).toThrow('rendered password holds a character');
    try {
      render();
    } catch (err) {
      expect((err as Error).message).not.toContain(SENTINEL);
      expect((err as Error).message).not.toContain('@');
    }
  });
});

const REF = { namespace: 'egress-proxies', name: 'vendor-account' };

/** The refusals as the providers config reports them, under `vendor.`. */
function issuesOf(block: Record<string, unknown>): string[] {
  const result = vendorConfigSchema.safeParse(block);
  if (result.success) throw new Error('expected the block to be refused');
  const lines: string[] = [];
  for (const issue of result.error.issues) {
    if (issue.code === 'unrecognized_keys')
      for (const key of issue.keys)
        lines.push(`${formatPath(['vendor', ...issue.path, key])}: unknown field`);
    else lines.push(`${formatPath(['vendor', ...issue.path])}: ${issue.message}`);
  }
  return lines;
}

function accepted(block: Record<string, unknown>): VendorConfig {
  const result = vendorConfigSchema.safeParse(block);
  if (!result.success) throw new Error(`refused: ${JSON.stringify(result.error.issues)}`);
  return result.data;
}

describe('vendorConfigSchema', () => {
  it('fills defaults from the preset', () => {
    const c = accepted({ preset: 'oxylabs', credentialsSecretRef: REF });
    expect(c.endpoint).toEqual({ host: 'pr.oxylabs.io', port: 7777 });
    expect(c.credentialsSecretRef).toEqual({ ...REF, usernameKey: 'username', passwordKey: 'password' });
    expect(c.usernameTemplate).toBe(PRESETS.oxylabs.usernameTemplate);
    expect(c.passwordTemplate).toBe('{password}');
    expect(c.sessionLifetimeSeconds).toBe(600);
    expect(c.countryAttributes).toEqual(['country', 'geo']);
    expect(c.claimsNamespace).toBe('egress-proxies');
    expect(c.templates.session).toBe(PRESETS.oxylabs.session);
    expect(c.idleTimeoutSeconds).toBe(60);
    expect(accepted({ preset: 'soax', credentialsSecretRef: REF }).sessionLifetimeSeconds).toBe(180);
  });

  it('takes a custom template without a preset, and overrides', () => {
    const c = accepted({
      endpoint: { host: 'proxy.example.net', port: 8080 },
      credentialsSecretRef: { ...REF, usernameKey: 'user', passwordKey: 'pass' },
      usernameTemplate: '{user}-sid-{session}[-geo-{country}]-t-{seconds}',
      passwordTemplate: '{password}',
      sessionLifetimeSeconds: 45,
      country: 'gb',
      countryAttributes: ['region'],
      claimsNamespace: 'vendor-claims',
    });
    expect(c.preset).toBeUndefined();
    expect(c.endpoint.port).toBe(8080);
    expect(c.country).toBe('gb');
    expect(
      renderCredentials(c.templates, {
        account: { username: 'me', password: 'pw' },
        params: c.params,
        session: 'abc',
        country: c.country,
        lifetimeSeconds: c.sessionLifetimeSeconds,
      }).username,
    ).toBe('me-sid-abc-geo-gb-t-45');
  });

  const oxy = { preset: 'oxylabs', credentialsSecretRef: REF };
  it.each<[string, Record<string, unknown>, string]>([
    [
      'an unknown placeholder in the username',
      { ...oxy, usernameTemplate: 'customer-{user}-sessid-{session}-x-{colour}' },
      'vendor.usernameTemplate: unknown placeholder {colour}',
    ],
    [
      'an unknown placeholder in the password',
      { ...oxy, passwordTemplate: '{password}{suffix}' },
      'vendor.passwordTemplate: unknown placeholder {suffix}',
    ],
    [
      "Bright Data's zone without params",
      { preset: 'brightdata', credentialsSecretRef: REF },
      'vendor.usernameTemplate: unknown placeholder {zone}',
    ],
    [
      'a template that does not parse',
      { ...oxy, usernameTemplate: 'customer-{user}[-sessid-{session}' },
      'vendor.usernameTemplate: an optional segment "[" is not closed',
    ],
    [
      '{password} in the username',
      { ...oxy, usernameTemplate: 'customer-{user}-{password}-sessid-{session}' },
      'vendor.usernameTemplate: {password} may not be in the username',
    ],
    [
      'no {session} anywhere',
      { ...oxy, usernameTemplate: 'customer-{user}[-cc-{country}]' },
      'vendor.usernameTemplate: neither usernameTemplate nor passwordTemplate has {session}',
    ],
    [
      '{session} only beside {country}',
      { ...oxy, usernameTemplate: 'customer-{user}[-cc-{country}-sessid-{session}]' },
      'vendor.usernameTemplate: {session} is only in optional segments',
    ],
    [
      'a params value with a separator',
      { preset: 'brightdata', credentialsSecretRef: REF, params: { zone: 'my-zone' } },
      'vendor.params.zone: holds "-"',
    ],
    [
      'a params key replacing a built-in',
      { ...oxy, params: { session: 'fixed' } },
      'vendor.params.session: {session} is built in',
    ],
    [
      'a username template rendering a forbidden character',
      { ...oxy, usernameTemplate: 'customer-{user}@eu-sessid-{session}-sesstime-{minutes}' },
      'vendor.usernameTemplate: renders a username holding "@"',
    ],
    [
      'an optional segment rendering a forbidden character',
      { ...oxy, usernameTemplate: 'customer-{user}[.cc.{country}]-sessid-{session}' },
      'vendor.usernameTemplate: renders a username holding "."',
    ],
    [
      'a password template rendering a forbidden character',
      { preset: 'decodo', credentialsSecretRef: REF, passwordTemplate: '{password}:x' },
      'vendor.passwordTemplate: renders a password holding ":"',
    ],
    [
      'a lifetime under the minimum',
      { ...oxy, sessionLifetimeSeconds: 30 },
      'vendor.sessionLifetimeSeconds: 30 is outside',
    ],
    [
      'a lifetime over the maximum',
      { preset: 'iproyal', credentialsSecretRef: REF, sessionLifetimeSeconds: 7 * 86_400 + 1 },
      'vendor.sessionLifetimeSeconds: 604801 is outside the iproyal preset',
    ],
    [
      'a lifetime {minutes} cannot write',
      { ...oxy, sessionLifetimeSeconds: 90 },
      'vendor.sessionLifetimeSeconds: {minutes} is in a template: 90 is not whole minutes',
    ],
    [
      'no endpoint without a preset',
      { credentialsSecretRef: REF },
      'vendor.endpoint: required without a preset',
    ],
    [
      'no username template without a preset',
      { credentialsSecretRef: REF, endpoint: { host: 'h', port: 1 } },
      'vendor.usernameTemplate: required without a preset',
    ],
    [
      'an uppercase country',
      { ...oxy, country: 'US' },
      'vendor.country: must be a lowercase ISO 3166-1 alpha-2',
    ],
    [
      'a bad claims namespace',
      { ...oxy, claimsNamespace: 'Claims' },
      'vendor.claimsNamespace: must be a lowercase',
    ],
    ['no credentials', { preset: 'oxylabs' }, 'vendor.credentialsSecretRef:'],
    [
      'a bad Secret key',
      { ...oxy, credentialsSecretRef: { ...REF, passwordKey: 'pass word' } },
      'vendor.credentialsSecretRef.passwordKey: must be a Secret data key',
    ],
    ['an unknown preset', { ...oxy, preset: 'luminati' }, 'vendor.preset:'],
    ['an unknown field', { ...oxy, zone: 'x' }, 'vendor.zone: unknown field'],
    ['an endpoint without a port', { ...oxy, endpoint: { host: 'h' } }, 'vendor.endpoint.port:'],
  ])('refuses %s, naming the field', (_what, block, expected) => {
    const lines = issuesOf(block);
    expect(
      lines.some((l) => l.startsWith(expected)),
      lines.join('\n'),
    ).toBe(true);
  });
});

describe('countryFor', () => {
  const config = { countryAttributes: ['country', 'geo'], country: 'nl' };
  it('takes the first attribute the Proxy has, lowercased, else the default', () => {
    expect(countryFor(config, { geo: 'DE', other: 'x' })).toBe('de');
    expect(countryFor(config, { country: 'fr', geo: 'de' })).toBe('fr');
    expect(countryFor(config, { country: '', geo: 'de' })).toBe('de');
    expect(countryFor(config, {})).toBe('nl');
    expect(countryFor({ countryAttributes: ['geo'] }, undefined)).toBeUndefined();
  });
  it('refuses a value that is no country code, naming the attribute', () => {
    expect(() => countryFor(config, { geo: 'us-east' })).toThrow('attribute geo="us-east"');
  });
});
