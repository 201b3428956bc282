/**
 * What the seed's Go handlers did with a request's bytes, reproduced so a
 * crawler sees the same answers: request bodies decoded as encoding/json
 * decodes into the handler's struct, the query string parsed as net/url's
 * Query() does, and bad values echoed back as Go's %q prints them. The
 * routes (api/app.ts) only call `decodeLeaseRequest`, `decodeReportRequest`,
 * `goQueryValues`/`rawQuery` and `goQuote`.
 */

/*
 * Request decoding, the way the seed's handlers decoded: Go's
 * `json.NewDecoder(r.Body).Decode(&req)` into the handler's struct. What a
 * crawler can observe from that, and what is reproduced here:
 *
 * - Only the first JSON value is read; any bytes after it are ignored
 *   (`{} {}` and `{"ttlSeconds":60}junk` are fine). Leading whitespace is
 *   space, tab, CR and LF only. No value at all is `EOF`.
 * - A `null` body is the zero struct. Any other non-object is a type error.
 * - Field names match case-insensitively with Unicode simple folding
 *   (`TTLSeconds`, `ttlſeconds`); unknown fields are skipped; with repeated
 *   fields the last one wins, but a type error in any of them fails the decode.
 * - `null` leaves a string or number field as it was; a `null` selector drops
 *   the map; a `null` selector value is "". A second selector object merges
 *   into the first.
 * - An int64 field takes only an integer literal within int64: `1e2`,
 *   `100.0` and `9223372036854775808` are type errors, not numbers.
 * - Nesting deeper than 10,000 is an error.
 *
 * Syntax is checked by V8's JSON.parse on the first value (both follow RFC
 * 8259), so syntax-error messages are V8's; type-error and EOF messages are
 * Go's, word for word.
 */

export interface LeaseRequestBody {
  /** null when absent (Go's nil map). */
  selector: Map<string, string> | null;
  /** 0 when absent; any integer within int64, range-checked by the handler. */
  ttlSeconds: number;
  target: string;
  /** Beyond the seed: only proxies of this ProxyPool; null when absent. */
  pool: string | null;
}

export interface ReportRequestBody {
  /** '' when absent; validated by the handler (invalid_result). */
  result: string;
  target: string;
}

export type Decoded<T> = { ok: true; value: T } | { ok: false; message: string };

type FieldKind = 'string' | 'int64' | 'stringMap';
interface GoField {
  /** The JSON name, as the struct tag spells it (used in messages). */
  name: string;
  /** `name` folded for the case-insensitive match. */
  folded: string;
  kind: FieldKind;
}
interface GoStruct {
  /** Package-qualified, as Go names the top-level type in messages. */
  qualified: string;
  /** Unqualified, as Go names it in struct-field messages. */
  short: string;
  fields: readonly GoField[];
}

const GO_TYPE_NAMES: Record<FieldKind, string> = {
  string: 'string',
  int64: 'int64',
  stringMap: 'map[string]string',
};

function goStruct(short: string, fields: Record<string, FieldKind>): GoStruct {
  return {
    qualified: `discovery.${short}`,
    short,
    fields: Object.entries(fields).map(([name, kind]) => ({ name, folded: goFold(name), kind })),
  };
}

const LEASE_REQUEST = goStruct('leaseRequest', {
  selector: 'stringMap',
  ttlSeconds: 'int64',
  target: 'string',
  pool: 'string',
});
const REPORT_REQUEST = goStruct('reportRequest', { result: 'string', target: 'string' });

export function decodeLeaseRequest(text: string): Decoded<LeaseRequestBody> {
  const decoded = decodeGo(text, LEASE_REQUEST);
  if (!decoded.ok) return decoded;
  const v = decoded.value;
  return {
    ok: true,
    value: {
      selector: (v.get('selector') as Map<string, string> | null | undefined) ?? null,
      ttlSeconds: Number((v.get('ttlSeconds') as string | undefined) ?? 0) || 0,
      target: (v.get('target') as string | undefined) ?? '',
      pool: (v.get('pool') as string | null | undefined) ?? null,
    },
  };
}

export function decodeReportRequest(text: string): Decoded<ReportRequestBody> {
  const decoded = decodeGo(text, REPORT_REQUEST);
  if (!decoded.ok) return decoded;
  const v = decoded.value;
  return {
    ok: true,
    value: {
      result: (v.get('result') as string | undefined) ?? '',
      target: (v.get('target') as string | undefined) ?? '',
    },
  };
}

/** encoding/json's maxNestingDepth. */
const MAX_NESTING_DEPTH = 10_000;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const LBRACE = 0x7b;
const RBRACE = 0x7d;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;
/** An int64 literal as strconv.ParseInt accepts what JSON can hold: no fraction, no exponent. */
const INTEGER_LITERAL = /^-?(?:0|[1-9][0-9]*)$/;
const INT64_MAX_DIGITS = '9223372036854775807';
const INT64_MIN_DIGITS = '9223372036854775808';
const NUMBER_PREFIX = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

function isGoSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

/**
 * Go's case folding of field names: every rune to the smallest rune of its
 * simple-fold orbit. Only ASCII letters, U+017F (ſ, with s) and U+212A
 * (Kelvin sign, with k) fold onto ASCII, and the field names are ASCII, so
 * every other character can be left as it is.
 */
function goFold(s: string): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x61 && c <= 0x7a) out += String.fromCharCode(c - 0x20);
    else if (c === 0x17f) out += 'S';
    else if (c === 0x212a) out += 'K';
    else out += s[i];
  }
  return out;
}

function skipSpace(text: string, at: number): number {
  while (at < text.length && isGoSpace(text.charCodeAt(at))) at++;
  return at;
}

/** The field a key decodes into: the exact name, else the case-folded match, as encoding/json looks it up. */
function fieldFor(t: GoStruct, key: string): GoField | undefined {
  for (const f of t.fields) if (f.name === key) return f;
  const folded = goFold(key);
  for (const f of t.fields) if (f.folded === folded) return f;
  return undefined;
}

/** Go's kind word for a JSON value in "cannot unmarshal <kind>" messages, from its first character. */
function jsonKind(c: number): string {
  if (c === QUOTE) return 'string';
  if (c === LBRACE) return 'object';
  if (c === LBRACKET) return 'array';
  if (c === 0x74 || c === 0x66) return 'bool';
  return 'number';
}

function typeError(
  t: GoStruct,
  field: GoField,
  what: string,
  goType = GO_TYPE_NAMES[field.kind],
): { ok: false; message: string } {
  return {
    ok: false,
    message: `json: cannot unmarshal ${what} into Go struct field ${t.short}.${field.name} of type ${goType}`,
  };
}

/** Index just past the string starting at `start` (a quote), or -1 if the text ends first. */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i + 1;
  }
  return -1;
}

/**
 * Index just past the value starting at `start`, found leniently: strings
 * are skipped (escapes honoured) and brackets counted. For well-formed JSON
 * this is where Go's scanner ends the value; for malformed JSON the caller's
 * JSON.parse of the span fails, as Go's scanner would have. -1: the text ends
 * first; -2: nesting passes Go's limit.
 */
function valueEnd(text: string, start: number): number {
  const first = text.charCodeAt(start);
  if (first === QUOTE) return stringEnd(text, start);
  if (first !== LBRACE && first !== LBRACKET) {
    let i = start;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === COMMA || c === RBRACE || c === RBRACKET || isGoSpace(c)) break;
      i++;
    }
    return i;
  }
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      if (end < 0) return -1;
      i = end - 1;
    } else if (c === LBRACE || c === LBRACKET) {
      if (++depth > MAX_NESTING_DEPTH) return -2;
    } else if (c === RBRACE || c === RBRACKET) {
      if (--depth === 0) return i + 1;
    }
  }
  return -1;
}

/** The bracket that took nesting past the limit, for Go's message. */
function tooDeep(text: string, start: number): string {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      if (end < 0) break;
      i = end - 1;
    } else if (c === LBRACE || c === LBRACKET) {
      if (++depth > MAX_NESTING_DEPTH) return text[i]!;
    } else if (c === RBRACE || c === RBRACKET) depth--;
  }
  return text[start]!;
}

/** A string token's value; escapes decoded, and lone surrogates become U+FFFD as Go decodes them. */
function stringValue(token: string): string {
  if (!token.includes('\\')) return token.slice(1, -1);
  return (JSON.parse(token) as string).replace(
    /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g,
    '\uFFFD',
  );
}

function syntaxError(span: string): { ok: false; message: string } {
  try {
    JSON.parse(span);
  } catch (err) {
    const message = (err as Error).message;
    // V8 names the position; an error at the very end means the value was cut short.
    const at = /at position (\d+)/.exec(message);
    if (/end of JSON input/.test(message) || (at && Number(at[1]) >= span.length)) {
      return { ok: false, message: 'unexpected EOF' };
    }
    return { ok: false, message: `malformed JSON: ${message}` };
  }
  return { ok: false, message: 'unexpected EOF' };
}

function isValidJson(span: string): boolean {
  try {
    JSON.parse(span);
    return true;
  } catch {
    return false;
  }
}

type GoValue = string | Map<string, string> | null;

function decodeGo(text: string, t: GoStruct): Decoded<Map<string, GoValue>> {
  let i = 0;
  while (i < text.length && isGoSpace(text.charCodeAt(i))) i++;
  if (i === text.length) return { ok: false, message: 'EOF' };
  const first = text.charCodeAt(i);
  const topLevelTypeError = (kind: string) => ({
    ok: false as const,
    message: `json: cannot unmarshal ${kind} into Go value of type ${t.qualified}`,
  });

  if (first === LBRACE || first === LBRACKET || first === QUOTE) {
    const end = valueEnd(text, i);
    if (end === -2)
      return { ok: false, message: `invalid character '${tooDeep(text, i)}' exceeded max depth` };
    if (end === -1) return syntaxError(text.slice(i));
    const span = text.slice(i, end);
    if (!isValidJson(span)) return syntaxError(span);
    return first === LBRACE ? decodeObject(span, t) : topLevelTypeError(jsonKind(first));
  }
  // A scalar: Go's scanner ends it by its grammar, so what follows is never read.
  if (text.startsWith('null', i)) return { ok: true, value: new Map() };
  if (text.startsWith('true', i) || text.startsWith('false', i)) return topLevelTypeError('bool');
  NUMBER_PREFIX.lastIndex = i;
  const number = NUMBER_PREFIX.exec(text);
  if (number) {
    // A "." or exponent the grammar could not complete is a syntax error (`1.x`, `1e+`).
    const next = text[i + number[0].length];
    const exponent = /[eE]/.test(number[0]);
    if (
      !((next === 'e' || next === 'E') && !exponent) &&
      !(next === '.' && !exponent && !number[0].includes('.'))
    ) {
      return topLevelTypeError('number');
    }
  }
  return syntaxError(text.slice(i));
}

/** Decodes a well-formed JSON object into the struct's fields, with encoding/json's rules. */
function decodeObject(span: string, t: GoStruct): Decoded<Map<string, GoValue>> {
  const out = new Map<string, GoValue>();
  let i = skipSpace(span, 1);
  while (span.charCodeAt(i) !== RBRACE) {
    const keyEnd = stringEnd(span, i);
    const key = stringValue(span.slice(i, keyEnd));
    i = skipSpace(span, keyEnd);
    i = skipSpace(span, i + 1); // the colon
    const end = valueEnd(span, i);
    const c = span.charCodeAt(i);
    const field = fieldFor(t, key);
    if (field && c !== 0x6e /* null: leaves strings and numbers alone */) {
      const token = span.slice(i, end);
      if (field.kind === 'string') {
        if (c !== QUOTE) return typeError(t, field, jsonKind(c));
        out.set(field.name, stringValue(token));
      } else if (field.kind === 'int64') {
        if (c === QUOTE || c === LBRACE || c === LBRACKET || c === 0x74 || c === 0x66) {
          return typeError(t, field, jsonKind(c));
        }
        if (!isInt64Literal(token)) return typeError(t, field, `number ${token}`);
        out.set(field.name, token);
      } else {
        if (c !== LBRACE) return typeError(t, field, jsonKind(c));
        const existing = out.get(field.name);
        const map = existing instanceof Map ? existing : new Map<string, string>();
        const failed = decodeStringMap(token, map);
        // Go names the map's element type when an element is wrong.
        if (failed !== undefined) return typeError(t, field, failed, 'string');
        out.set(field.name, map);
      }
    } else if (field?.kind === 'stringMap') {
      out.set(field.name, null);
    }
    i = skipSpace(span, end);
    if (span.charCodeAt(i) === COMMA) i = skipSpace(span, i + 1);
  }
  return { ok: true, value: out };
}

/** Fills `map` from a well-formed object of strings; returns the kind of the first non-string value. */
function decodeStringMap(span: string, map: Map<string, string>): string | undefined {
  let i = skipSpace(span, 1);
  while (span.charCodeAt(i) !== RBRACE) {
    const keyEnd = stringEnd(span, i);
    const key = stringValue(span.slice(i, keyEnd));
    i = skipSpace(span, keyEnd);
    if (span.charCodeAt(i) === COLON) i = skipSpace(span, i + 1);
    const end = valueEnd(span, i);
    const c = span.charCodeAt(i);
    if (c === QUOTE) map.set(key, stringValue(span.slice(i, end)));
    else if (c === 0x6e) map.set(key, '');
    else return jsonKind(c);
    i = skipSpace(span, end);
    if (span.charCodeAt(i) === COMMA) i = skipSpace(span, i + 1);
  }
  return undefined;
}

function isInt64Literal(token: string): boolean {
  if (!INTEGER_LITERAL.test(token)) return false;
  const negative = token.startsWith('-');
  const digits = negative ? token.slice(1) : token;
  const limit = negative ? INT64_MIN_DIGITS : INT64_MAX_DIGITS;
  return digits.length < limit.length || (digits.length === limit.length && digits <= limit);
}

/** Everything after the first "?", as Go's RawQuery holds it. */
export function rawQuery(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? '' : url.slice(q + 1);
}

/** net/url's limit: a query with more parameters is not parsed at all (Go ≥ 1.24). */
const MAX_QUERY_PARAMS = 10_000;

/**
 * The first value of every key, as the seed read them: `r.URL.Query()`
 * (net/url's ParseQuery, its error ignored) then `values[0]`. Pairs holding
 * a ";" or a malformed escape (`%zz`, `%4`) are dropped, not rejected; "+" is
 * a space. Bytes that are not UTF-8 are kept, one lone surrogate U+DC80-DCFF
 * per byte, so they compare unequal to every real attribute, as Go's byte
 * strings do; `goQuote` prints them back as \xNN.
 */
export function goQueryValues(raw: string): Map<string, string> {
  const out = new Map<string, string>();
  let ampersands = 0;
  for (let i = raw.indexOf('&'); i >= 0; i = raw.indexOf('&', i + 1)) ampersands++;
  if (ampersands + 1 > MAX_QUERY_PARAMS) return out;
  for (const pair of raw.split('&')) {
    if (pair === '' || pair.includes(';')) continue;
    const eq = pair.indexOf('=');
    const key = queryUnescape(eq < 0 ? pair : pair.slice(0, eq));
    const value = queryUnescape(eq < 0 ? '' : pair.slice(eq + 1));
    if (key === undefined || value === undefined) continue;
    if (!out.has(key)) out.set(key, value);
  }
  return out;
}

const MALFORMED_ESCAPE = /%(?![0-9A-Fa-f]{2})/;

/** url.QueryUnescape; undefined where Go returns an error. */
function queryUnescape(s: string): string | undefined {
  if (!s.includes('%')) return s.includes('+') ? s.replaceAll('+', ' ') : s;
  if (MALFORMED_ESCAPE.test(s)) return undefined;
  const src = Buffer.from(s, 'utf8');
  const bytes = new Uint8Array(src.length);
  let n = 0;
  for (let i = 0; i < src.length; i++) {
    const b = src[i]!;
    if (b === 0x25) {
      bytes[n++] = parseInt(String.fromCharCode(src[i + 1]!, src[i + 2]!), 16);
      i += 2;
    } else {
      bytes[n++] = b === 0x2b ? 0x20 : b;
    }
  }
  return decodeUtf8Escaping(bytes.subarray(0, n));
}

/** UTF-8 to a string, with each byte Go's DecodeRune rejects kept as U+DC00 + byte. */
function decodeUtf8Escaping(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length;) {
    const [rune, width] = decodeRune(bytes, i);
    out += rune < 0 ? String.fromCharCode(0xdc00 + bytes[i]!) : String.fromCodePoint(rune);
    i += width;
  }
  return out;
}

/** utf8.DecodeRune: the rune and its width, or -1 and width 1 for an invalid byte. */
function decodeRune(b: Uint8Array, i: number): [number, number] {
  const b0 = b[i]!;
  if (b0 < 0x80) return [b0, 1];
  const cont = (k: number, lo = 0x80, hi = 0xbf) => i + k < b.length && b[i + k]! >= lo && b[i + k]! <= hi;
  if (b0 >= 0xc2 && b0 <= 0xdf && cont(1)) return [((b0 & 0x1f) << 6) | (b[i + 1]! & 0x3f), 2];
  if (b0 >= 0xe0 && b0 <= 0xef) {
    const lo = b0 === 0xe0 ? 0xa0 : 0x80;
    const hi = b0 === 0xed ? 0x9f : 0xbf;
    if (cont(1, lo, hi) && cont(2)) {
      return [((b0 & 0x0f) << 12) | ((b[i + 1]! & 0x3f) << 6) | (b[i + 2]! & 0x3f), 3];
    }
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    const lo = b0 === 0xf0 ? 0x90 : 0x80;
    const hi = b0 === 0xf4 ? 0x8f : 0xbf;
    if (cont(1, lo, hi) && cont(2) && cont(3)) {
      const rune =
        ((b0 & 0x07) << 18) | ((b[i + 1]! & 0x3f) << 12) | ((b[i + 2]! & 0x3f) << 6) | (b[i + 3]! & 0x3f);
      return [rune, 4];
    }
  }
  return [-1, 1];
}

/** strconv.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space. */
const GO_PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;
const GO_ESCAPES: Record<number, string> = {
  0x07: '\\a',
  0x08: '\\b',
  0x0c: '\\f',
  0x0a: '\\n',
  0x0d: '\\r',
  0x09: '\\t',
  0x0b: '\\v',
};

/**
 * Go's `%q` (strconv.Quote), which the seed used to echo a bad value back.
 * Lone surrogates U+DC80-DCFF are bytes that were not UTF-8 (see
 * `goQueryValues`) and print as \xNN; any other lone surrogate is U+FFFD.
 */
export function goQuote(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length;) {
    let rune = s.codePointAt(i)!;
    i += rune > 0xffff ? 2 : 1;
    if (rune >= 0xdc80 && rune <= 0xdcff) {
      out += `\\x${(rune - 0xdc00).toString(16).padStart(2, '0')}`;
      continue;
    }
    if (rune >= 0xd800 && rune <= 0xdfff) rune = 0xfffd;
    const ch = String.fromCodePoint(rune);
    if (rune === 0x22 || rune === 0x5c) out += `\\${ch}`;
    else if (GO_PRINTABLE.test(ch)) out += ch;
    else if (GO_ESCAPES[rune]) out += GO_ESCAPES[rune];
    else if (rune < 0x20 || rune === 0x7f) out += `\\x${rune.toString(16).padStart(2, '0')}`;
    else if (rune < 0x10000) out += `\\u${rune.toString(16).padStart(4, '0')}`;
    else out += `\\U${rune.toString(16).padStart(8, '0')}`;
  }
  return `${out}"`;
}
