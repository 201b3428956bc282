/**
 * How a vendor session is written into the credentials a client sends its
 * super-proxy: a template for the username and one for the password.
 * Pure: no I/O.
 *
 * Grammar:
 *
 *   - `{name}` is a placeholder. Built in: `{user}` and `{password}` (the
 *     account's, from its Secret), `{session}` (the session id),
 *     `{country}` (lowercase ISO alpha-2), `{minutes}` and `{seconds}` (the
 *     session lifetime), `{duration}` (the lifetime as IPRoyal writes it:
 *     `45s`, `30m`, `2h`, `7d`, the largest unit that divides it exactly).
 *     Any other name is a key of the entry's `params` (fixed values such as
 *     Bright Data's zone).
 *   - `[...]` is an optional segment: dropped when any placeholder inside has
 *     no value (absent or empty), e.g. `[-country-{country}]`. Segments do
 *     not nest and hold at least one placeholder.
 *   - Everything else is literal text.
 *
 * `parseCredentials` is the inverse the fake vendor uses: given the account
 * (so `{user}`, `{password}` and the params are literal text) it reads the
 * session, country and lifetime back out of what a client sent. Its errors
 * say whether the account was wrong (`credentials`: a vendor answers 407)
 * or the options were (`options`: 400), and never quote what was sent.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { ProxyCredentials } from '../../credentials/proxy-credentials.js';

/** The placeholders every template may use without a params entry. */
export const BUILTIN_PLACEHOLDERS = [
  'user',
  'password',
  'session',
  'country',
  'minutes',
  'seconds',
  'duration',
] as const;
export type BuiltinPlaceholder = (typeof BUILTIN_PLACEHOLDERS)[number];

const BUILTIN: ReadonlySet<string> = new Set(BUILTIN_PLACEHOLDERS);

export function isBuiltinPlaceholder(name: string): name is BuiltinPlaceholder {
  return BUILTIN.has(name);
}

/** What a vendor accepts as a session id. */
export interface SessionRules {
  /** Every character a session id may hold (what newSessionId draws from). */
  alphabet: string;
  /** The length newSessionId generates. */
  length: number;
  /** The lengths a vendor accepts (the fake vendor refuses others with a 400). */
  minLength: number;
  maxLength: number;
}

/** Which characters a rendered string may hold: one character's test and words for a message. */
export interface CharRule {
  /** Matches one allowed character (no anchors, no flags that carry state). */
  pattern: RegExp;
  describe: string;
}

export interface VendorCharRules {
  /** The whole rendered username. */
  username: CharRule;
  /** The whole rendered password. */
  password: CharRule;
  /** One value put between separators: a params value (a session id obeys SessionRules). */
  value: CharRule;
}

/** What rendering and parsing need: the two templates and the vendor's rules. */
export interface VendorTemplates {
  username: string;
  password: string;
  session: SessionRules;
  /** When set, renderCredentials refuses a result holding anything else. */
  chars?: VendorCharRules;
}

/** A template that does not follow the grammar, or a render that cannot be done. */
export class TemplateError extends Error {
  override readonly name = 'TemplateError';
}

type Part = { text: string } | { name: string };
type Token = Part | { optional: Part[] };

const NAME = /^[A-Za-z][A-Za-z0-9_]*$/;

/** The template's tokens; throws TemplateError naming what is wrong (the caller adds the field). */
export function tokenize(template: string): Token[] {
  const tokens: Token[] = [];
  let optional: Part[] | undefined;
  let text = '';
  const flush = () => {
    if (text === '') return;
    (optional ?? tokens).push({ text });
    text = '';
  };
  for (let i = 0; i < template.length; i++) {
    const ch = template[i]!;
    if (ch === '{') {
      const end = template.indexOf('}', i + 1);
      if (end < 0) throw new TemplateError(`"{" at position ${i} is not closed`);
      const name = template.slice(i + 1, end);
      if (!NAME.test(name))
        throw new TemplateError(
          `placeholder "{${name}}" at position ${i} is not a name (a letter, then letters, digits or "_")`,
        );
      flush();
      (optional ?? tokens).push({ name });
      i = end;
    } else if (ch === '}') {
      throw new TemplateError(`"}" at position ${i} closes no placeholder`);
    } else if (ch === '[') {
      if (optional) throw new TemplateError(`"[" at position ${i}: optional segments do not nest`);
      flush();
      optional = [];
    } else if (ch === ']') {
      if (!optional) throw new TemplateError(`"]" at position ${i} closes no optional segment`);
      flush();
      if (!optional.some((p) => 'name' in p))
        throw new TemplateError(`the optional segment ending at position ${i} holds no placeholder`);
      tokens.push({ optional });
      optional = undefined;
    } else {
      text += ch;
    }
  }
  if (optional) throw new TemplateError('an optional segment "[" is not closed');
  flush();
  return tokens;
}

/** Every placeholder of a template, once each, in order of first use. Throws TemplateError when it does not parse. */
export function placeholdersOf(template: string): string[] {
  const names: string[] = [];
  const add = (p: Part) => {
    if ('name' in p && !names.includes(p.name)) names.push(p.name);
  };
  for (const token of tokenize(template)) {
    if ('optional' in token) token.optional.forEach(add);
    else add(token);
  }
  return names;
}

/** Placeholders that appear outside any optional segment (a render fails without them). */
export function requiredPlaceholdersOf(template: string): string[] {
  const names: string[] = [];
  for (const token of tokenize(template))
    if ('name' in token && !names.includes(token.name)) names.push(token.name);
  return names;
}

/**
 * The placeholders sharing an optional segment with `name` (an occurrence of
 * `name` outside any segment gives []), one list per occurrence.
 */
export function companionsOf(template: string, name: string): string[][] {
  const out: string[][] = [];
  for (const token of tokenize(template)) {
    if ('optional' in token) {
      if (token.optional.some((p) => 'name' in p && p.name === name))
        out.push(token.optional.flatMap((p) => ('name' in p && p.name !== name ? [p.name] : [])));
    } else if ('name' in token && token.name === name) out.push([]);
  }
  return out;
}

const UNITS: ReadonlyArray<[string, number]> = [
  ['d', 86_400],
  ['h', 3_600],
  ['m', 60],
  ['s', 1],
];

/** `7d`, `2h`, `30m`, `45s`: the largest unit that divides the lifetime exactly. */
export function formatDuration(seconds: number): string {
  if (!Number.isInteger(seconds) || seconds < 0)
    throw new TemplateError('a lifetime is a whole number of seconds');
  for (const [unit, size] of UNITS)
    if (seconds % size === 0 && seconds > 0) return `${seconds / size}${unit}`;
  return '0s';
}

/** The seconds of `30m`, `2h`…; undefined for anything else. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d{1,9})([smhd])$/.exec(text);
  if (!m) return undefined;
  const size = UNITS.find(([u]) => u === m[2])![1];
  return Number(m[1]) * size;
}

export interface RenderInput {
  account: ProxyCredentials;
  params: Readonly<Record<string, string>>;
  session: string;
  /** ISO alpha-2, either case: rendered lowercase. Absent or empty: optional segments with {country} drop. */
  country?: string;
  lifetimeSeconds: number;
}

const COUNTRY = /^[a-z]{2}$/;

function renderTokens(tokens: Token[], value: (name: string) => string | undefined, field: string): string {
  const part = (p: Part): string | undefined => ('text' in p ? p.text : value(p.name));
  let out = '';
  for (const token of tokens) {
    if ('optional' in token) {
      const parts = token.optional.map(part);
      if (parts.every((p) => p !== undefined && p !== '')) out += parts.join('');
    } else {
      const v = part(token);
      if (v === undefined || v === '')
        throw new TemplateError(`${field} needs {${(token as { name: string }).name}}, which has no value`);
      out += v;
    }
  }
  return out;
}

function firstOffending(text: string, rule: CharRule): number {
  for (let i = 0; i < text.length; i++) if (!rule.pattern.test(text[i]!)) return i;
  return -1;
}

function checkSessionId(session: string, rules: SessionRules): string | undefined {
  if (session.length < rules.minLength || session.length > rules.maxLength)
    return rules.minLength === rules.maxLength
      ? `a session id has exactly ${rules.minLength} characters`
      : `a session id has ${rules.minLength} to ${rules.maxLength} characters`;
  for (const ch of session)
    if (!rules.alphabet.includes(ch)) return `a session id holds only characters of "${rules.alphabet}"`;
  return undefined;
}

/**
 * The credentials a client sends for this session. Throws TemplateError when
 * a required placeholder has no value, the lifetime does not fit a unit the
 * template uses, the session id breaks the rules, or (with `t.chars`) the
 * result holds a character the vendor does not allow. A message names the
 * username's offending character but never anything of the password.
 */
export function renderCredentials(t: VendorTemplates, input: RenderInput): ProxyCredentials {
  const usernameTokens = tokenize(t.username);
  const passwordTokens = tokenize(t.password);
  const used = new Set([...placeholdersOf(t.username), ...placeholdersOf(t.password)]);
  const lifetime = input.lifetimeSeconds;
  if (!Number.isInteger(lifetime) || lifetime < 1)
    throw new TemplateError('the session lifetime is a whole number of seconds, at least 1');
  if (used.has('minutes') && lifetime % 60 !== 0)
    throw new TemplateError(`{minutes} needs a lifetime in whole minutes, not ${lifetime} s`);
  const sessionProblem = checkSessionId(input.session, t.session);
  if (used.has('session') && sessionProblem) throw new TemplateError(sessionProblem);
  const country =
    input.country === undefined || input.country === '' ? undefined : input.country.toLowerCase();
  if (country !== undefined && !COUNTRY.test(country))
    throw new TemplateError('a country is a two-letter ISO 3166-1 code');
  const builtins: Record<BuiltinPlaceholder, string | undefined> = {
    user: input.account.username,
    password: input.account.password,
    session: input.session,
    country,
    minutes: lifetime % 60 === 0 ? String(lifetime / 60) : undefined,
    seconds: String(lifetime),
    duration: formatDuration(lifetime),
  };
  const value = (name: string): string | undefined =>
    isBuiltinPlaceholder(name) ? builtins[name] : input.params[name];
  for (const name of used)
    if (!isBuiltinPlaceholder(name) && !Object.hasOwn(input.params, name))
      throw new TemplateError(`unknown placeholder {${name}}: not built in and not a key of params`);
  const username = renderTokens(usernameTokens, value, 'the username template');
  const password = renderTokens(passwordTokens, value, 'the password template');
  if (t.chars) {
    const u = firstOffending(username, t.chars.username);
    if (u >= 0)
      throw new TemplateError(
        `the rendered username holds ${JSON.stringify(username[u])} at position ${u}; allowed: ${t.chars.username.describe}`,
      );
    if (firstOffending(password, t.chars.password) >= 0)
      throw new TemplateError(
        `the rendered password holds a character the vendor does not allow (allowed: ${t.chars.password.describe})`,
      );
  }
  if (username.includes(':'))
    throw new TemplateError('a username cannot hold ":" (HTTP Basic authentication)');
  return { username, password };
}

export interface ParsedCredentials {
  account: ProxyCredentials;
  session?: string;
  country?: string;
  lifetimeSeconds?: number;
}

export interface ParseError {
  error: string;
  /** `credentials`: not this account (a vendor answers 407); `options`: the account's, with bad options (400). */
  kind: 'credentials' | 'options';
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

interface Matcher {
  regex: RegExp;
  /** The placeholder each capture group holds, in group order. */
  groups: string[];
}

function matcherOf(tokens: Token[], literal: (name: string) => string | undefined): Matcher {
  const groups: string[] = [];
  const part = (p: Part): string => {
    if ('text' in p) return escape(p.text);
    const fixed = literal(p.name);
    if (fixed !== undefined) return escape(fixed);
    groups.push(p.name);
    return '(.+?)';
  };
  const source = tokens
    .map((t) => ('optional' in t ? `(?:${t.optional.map(part).join('')})?` : part(t)))
    .join('');
  return { regex: new RegExp(`^${source}$`, 's'), groups };
}

/**
 * True when `sent` starts with what the account and params alone fix at the
 * template's start, and what follows could begin the rest of the template:
 * the account is right even if the options after it are not.
 */
function accountPrefixMatches(
  tokens: Token[],
  literal: (name: string) => string | undefined,
  sent: string,
): boolean {
  let prefix = '';
  let i = 0;
  for (; i < tokens.length; i++) {
    const t = tokens[i]!;
    if ('optional' in t) break;
    if ('text' in t) prefix += t.text;
    else {
      const fixed = literal(t.name);
      if (fixed === undefined) break;
      prefix += fixed;
    }
  }
  if (!sent.startsWith(prefix)) return false;
  const rest = sent.slice(prefix.length);
  const next = tokens[i];
  if (next === undefined) return rest === '';
  if (rest === '') return true;
  const first = 'optional' in next ? next.optional[0] : next;
  return first === undefined || !('text' in first) || rest.startsWith(first.text.slice(0, 1));
}

/**
 * Reads a session back out of credentials a client sent. With `account`,
 * `{user}` and `{password}` are that account's (literal text), so the match
 * is unambiguous whatever the vendor's separators; without it they are
 * read from `sent` too. Values are checked here (session id by the rules,
 * country two letters, lifetimes whole numbers); bounds on the lifetime are
 * the caller's (a vendor's own limits). Error messages quote nothing sent.
 */
export function parseCredentials(
  t: VendorTemplates,
  params: Readonly<Record<string, string>>,
  sent: ProxyCredentials,
  account?: ProxyCredentials,
): ParsedCredentials | ParseError {
  const literal = (name: string): string | undefined => {
    if (name === 'user') return account?.username;
    if (name === 'password') return account?.password;
    if (isBuiltinPlaceholder(name)) return undefined;
    return params[name] ?? '\u0000no such param\u0000';
  };
  if (sent.username.length > 1024 || sent.password.length > 1024)
    return { error: 'credentials too long', kind: 'credentials' };
  const usernameTokens = tokenize(t.username);
  const passwordTokens = tokenize(t.password);
  const values = new Map<string, string>();
  let conflict = false;
  const read = (tokens: Token[], text: string): boolean => {
    const m = matcherOf(tokens, literal);
    const found = m.regex.exec(text);
    if (!found) return false;
    m.groups.forEach((name, i) => {
      const v = found[i + 1];
      if (v === undefined) return;
      const before = values.get(name);
      if (before !== undefined && before !== v) conflict = true;
      values.set(name, v);
    });
    return true;
  };
  const usernameOk = read(usernameTokens, sent.username);
  const passwordOk = read(passwordTokens, sent.password);
  if (!usernameOk || !passwordOk) {
    const accountRight =
      account !== undefined &&
      accountPrefixMatches(usernameTokens, literal, sent.username) &&
      accountPrefixMatches(passwordTokens, literal, sent.password);
    return accountRight
      ? {
          error: `unsupported or malformed parameters in the ${usernameOk ? 'password' : 'username'}`,
          kind: 'options',
        }
      : { error: 'user authentication failed', kind: 'credentials' };
  }
  if (conflict) return { error: 'a parameter is given twice with different values', kind: 'options' };
  const result: ParsedCredentials = {
    account: {
      username: account?.username ?? values.get('user') ?? '',
      password: account?.password ?? values.get('password') ?? '',
    },
  };
  const session = values.get('session');
  if (session !== undefined) {
    const problem = checkSessionId(session, t.session);
    if (problem) return { error: `bad session id: ${problem}`, kind: 'options' };
    result.session = session;
  }
  const country = values.get('country');
  if (country !== undefined) {
    if (!/^[A-Za-z]{2}$/.test(country))
      return { error: 'bad country: a two-letter ISO 3166-1 code is expected', kind: 'options' };
    result.country = country.toLowerCase();
  }
  const lifetimes: number[] = [];
  const minutes = values.get('minutes');
  if (minutes !== undefined) {
    if (!/^\d{1,9}$/.test(minutes))
      return { error: 'bad session lifetime: whole minutes expected', kind: 'options' };
    lifetimes.push(Number(minutes) * 60);
  }
  const seconds = values.get('seconds');
  if (seconds !== undefined) {
    if (!/^\d{1,9}$/.test(seconds))
      return { error: 'bad session lifetime: whole seconds expected', kind: 'options' };
    lifetimes.push(Number(seconds));
  }
  const duration = values.get('duration');
  if (duration !== undefined) {
    const s = parseDuration(duration);
    if (s === undefined)
      return { error: 'bad session lifetime: a number and one unit of s, m, h, d expected', kind: 'options' };
    lifetimes.push(s);
  }
  if (lifetimes.length > 0) {
    if (lifetimes.some((l) => l !== lifetimes[0]))
      return { error: 'the session lifetime is given twice with different values', kind: 'options' };
    result.lifetimeSeconds = lifetimes[0]!;
  }
  return result;
}

/** Where newSessionId gets randomness: bytes (used in turn) or numbers in [0, 1) (one per character). */
export type RandomSource = () => Buffer | number;

/**
 * A session id obeying the rules: `rules.length` characters of the
 * alphabet, each drawn without bias (bytes above the last whole multiple of
 * the alphabet's size are skipped).
 */
export function newSessionId(
  rules: SessionRules | { session: SessionRules },
  random: RandomSource = () => randomBytes(32),
): string {
  const r = 'session' in rules ? rules.session : rules;
  const n = r.alphabet.length;
  if (n < 2 || n > 256) throw new TemplateError('a session alphabet has 2 to 256 characters');
  const limit = 256 - (256 % n);
  let out = '';
  let pending: Buffer = Buffer.alloc(0);
  let offset = 0;
  for (let draws = 0; out.length < r.length; draws++) {
    if (draws > r.length * 1_000) throw new TemplateError('the random source gives nothing usable');
    if (offset >= pending.length) {
      const next = random();
      if (typeof next === 'number') {
        if (!(next >= 0 && next < 1)) throw new TemplateError('a random number is in [0, 1)');
        out += r.alphabet[Math.floor(next * n)]!;
        continue;
      }
      pending = next;
      offset = 0;
      continue;
    }
    const byte = pending[offset++]!;
    if (byte < limit) out += r.alphabet[byte % n]!;
  }
  return out;
}

/**
 * A deterministic random source from a key: SHA-256 of the key and a
 * counter, block after block. `newSessionId(rules, keyedRandom(key))` gives
 * the same id for the same key (a retried create is the same session).
 */
export function keyedRandom(key: string): RandomSource {
  let counter = 0;
  return () => createHash('sha256').update(`${counter++}\u0000${key}`, 'utf8').digest();
}
