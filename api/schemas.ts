/**
 * Wire schemas of the lease API, and the OpenAPI 3.1 document built from
 * them.
 *
 * The document comes from zod 4's own `z.toJSONSchema` rather than
 * @asteasolutions/zod-to-openapi: OpenAPI 3.1 schema objects are JSON Schema
 * 2020-12, which is exactly what `z.toJSONSchema` emits, so the only code we
 * need is the thin `paths` skeleton below, and there is no extra dependency
 * that must keep pace with zod releases. Request schemas are rendered with
 * `io: 'input'` (unknown fields are accepted and ignored, as the seed's JSON
 * decoder did) and response schemas with `io: 'output'` (closed objects, so
 * a test validating a response against the document catches stray fields).
 *
 * The request schemas only document: the handlers decode bodies with
 * `decodeLeaseRequest`/`decodeReportRequest` (end of this file), which
 * reproduce the seed's Go decoder down to its edge cases.
 */
import { z } from 'zod';
import { PHASES } from '../resources/proxy-schema.js';
import { REPORT_RESULTS } from './lease-store.js';

export const ERROR_CODES = [
  'unauthorized',
  'invalid_query',
  'invalid_body',
  'invalid_ttl',
  'invalid_result',
  'no_match',
  'unknown_lease',
  'not_found',
  'method_not_allowed',
  'unavailable',
  'internal',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

const attributes = z.record(z.string(), z.string());

export const errorSchema = z
  .object({
    error: z.enum(ERROR_CODES).describe('Machine-readable code.'),
    message: z.string().describe('Human-readable explanation.'),
  })
  .meta({ description: 'The envelope every error response uses.' });

export const proxySchema = z.object({
  id: z.string().describe('`namespace/name` of the Proxy resource.'),
  ip: z
    .string()
    .describe('Effective host: spec.endpoint.host (External) or status.ip (Managed); empty until known.'),
  port: z.int().min(1).max(65535),
  attributes: attributes.optional().describe('spec.attributes; omitted when empty.'),
  phase: z.enum([...PHASES, '']).describe('status.phase; empty before the first status write.'),
  healthy: z.boolean().describe('The Healthy condition is True.'),
  latencyMillis: z.int(),
  activeLeases: z.int().min(0),
  maxLeases: z.int().min(0).describe('Lease capacity; 0 means never leased.'),
});
export type ProxyJson = z.output<typeof proxySchema>;

export const proxyListSchema = z.object({
  proxies: z.array(proxySchema).describe('Sorted by id.'),
  count: z.int().min(0),
});

export const leaseSchema = z.object({
  leaseID: z.string(),
  proxy: proxySchema,
  expiresAt: z.iso.datetime().describe('RFC 3339, UTC.'),
  ttlSeconds: z.int().positive(),
});

export const noMatchSchema = z
  .object({
    error: z.literal('no_match'),
    message: z.string(),
    considered: z.int().min(0).describe('Proxies matching the selector (not being deleted).'),
    atCapacity: z.int().min(0),
    inCooldown: z.int().min(0),
    unhealthy: z.int().min(0).describe('Healthy condition not True, or no address yet.'),
  })
  .meta({ description: 'considered = atCapacity + inCooldown + unhealthy.' });

/**
 * Documentation of the request bodies, for the OpenAPI document. The handlers
 * do not validate with these: they decode with `decodeLeaseRequest` and
 * `decodeReportRequest` below, which reproduce the seed's Go decoder. A `null`
 * field means "absent" (a `null` selector value reads as ""), a `null` body
 * means `{}`, and `ttlSeconds` 0 or absent selects the default.
 */
export function leaseRequestSchema(maxLeaseTtlSeconds: number) {
  return z
    .object({
      selector: z
        .record(z.string(), z.string().nullable())
        .nullish()
        .describe(
          'Attribute equality filter; every pair must match, and "" (or null) matches a proxy without that attribute.',
        ),
      ttlSeconds: z
        .int()
        .min(0)
        .max(maxLeaseTtlSeconds)
        .nullish()
        .describe(
          'Lease lifetime in whole seconds, written as an integer (1e2 or 100.0 is invalid_body); 0 or absent selects the default (300).',
        ),
      target: z.string().nullish().describe('Site the lease is for; scopes cooldowns.'),
    })
    .nullable();
}

export const reportRequestSchema = z.object({
  result: z.enum(REPORT_RESULTS).describe('Required: absent, null or any other value is invalid_result.'),
  target: z.string().nullish().describe("Falls back to the lease's target, then to the global pool."),
});

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

type JsonObject = Record<string, unknown>;

function componentSchemas(
  schemas: Record<string, z.ZodType>,
  io: 'input' | 'output',
): Record<string, JsonObject> {
  const registry = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(schemas)) registry.add(schema, { id });
  const { schemas: out } = z.toJSONSchema(registry, {
    target: 'draft-2020-12',
    io,
    uri: (id) => `#/components/schemas/${id}`,
  });
  const cleaned: Record<string, JsonObject> = {};
  for (const [id, schema] of Object.entries(out)) {
    // Components live inside the OpenAPI document; their own $schema/$id
    // would re-root relative references.
    const { $schema: _s, $id: _i, ...rest } = schema as JsonObject;
    cleaned[id] = rest;
  }
  return cleaned;
}

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });
const json = (id: string, description: string) => ({
  description,
  content: { 'application/json': { schema: ref(id) } },
});
const errors = (...codes: Array<[number, string]>) =>
  Object.fromEntries(codes.map(([status, description]) => [String(status), json('Error', description)]));
const BODY_DECODING =
  "Decoded as the seed's Go encoding/json did: only the first JSON value is read, field names match case-insensitively, null leaves a field absent, unknown fields are ignored; at most 64 KiB.";
const leaseIdParam = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };

export function buildOpenApiDocument(options: { maxLeaseTtlSeconds: number; version?: string }): JsonObject {
  const components = {
    ...componentSchemas(
      {
        Error: errorSchema,
        Proxy: proxySchema,
        ProxyList: proxyListSchema,
        Lease: leaseSchema,
        NoMatch: noMatchSchema,
      },
      'output',
    ),
    ...componentSchemas(
      { LeaseRequest: leaseRequestSchema(options.maxLeaseTtlSeconds), ReportRequest: reportRequestSchema },
      'input',
    ),
  };
  const common = errors(
    [401, 'Missing or wrong bearer token (`unauthorized`).'],
    [500, 'Unexpected failure (`internal`).'],
  );
  const unavailable = errors([503, 'The proxy cache has not synced yet (`unavailable`).']);
  return {
    openapi: '3.1.0',
    info: {
      title: 'egress-proxies lease API',
      version: options.version ?? '1.0.0',
      description:
        'List healthy egress proxies by attribute, lease one for a TTL, release it, and report how a target treated it.',
    },
    components: {
      schemas: components,
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    },
    security: [{ bearer: [] }],
    paths: {
      '/healthz': {
        get: {
          summary: 'Liveness',
          security: [],
          responses: {
            '200': { description: '`ok`', content: { 'text/plain': { schema: { type: 'string' } } } },
          },
        },
      },
      '/metrics': {
        get: {
          summary: 'Prometheus metrics',
          security: [],
          responses: {
            '200': {
              description: 'Prometheus text format',
              content: { 'text/plain': { schema: { type: 'string' } } },
            },
          },
        },
      },
      '/openapi.json': {
        get: {
          summary: 'This document',
          responses: {
            '200': {
              description: 'OpenAPI 3.1',
              content: { 'application/json': { schema: { type: 'object' } } },
            },
            ...common,
          },
        },
      },
      '/v1/proxies': {
        get: {
          summary: 'List proxies',
          parameters: [
            {
              name: 'healthy',
              in: 'query',
              required: false,
              schema: { type: 'string', enum: ['true', 'false'] },
            },
            {
              name: 'attr.<key>',
              in: 'query',
              required: false,
              description:
                'Exact match on spec.attributes[<key>]; repeatable with different keys, all must match. An empty value matches proxies without that attribute. As with Go\'s url.Query(), a pair with a malformed escape or a ";" is ignored, and of a repeated key the first value counts.',
              schema: { type: 'string' },
            },
          ],
          responses: {
            '200': json('ProxyList', 'Matching proxies, sorted by id.'),
            ...errors([400, 'Bad `healthy` value (`invalid_query`).']),
            ...common,
            ...unavailable,
          },
        },
      },
      '/v1/leases': {
        post: {
          summary: 'Acquire a lease',
          requestBody: {
            required: true,
            description: BODY_DECODING,
            content: { 'application/json': { schema: ref('LeaseRequest') } },
          },
          responses: {
            '201': json('Lease', 'Granted.'),
            '400': json('Error', 'Malformed body (`invalid_body`) or TTL out of range (`invalid_ttl`).'),
            '409': json('NoMatch', 'No healthy proxy with free capacity matched.'),
            ...common,
            ...unavailable,
          },
        },
      },
      '/v1/leases/{id}': {
        delete: {
          summary: 'Release a lease early (idempotent)',
          parameters: [leaseIdParam],
          responses: { '204': { description: 'Released, or already gone.' }, ...common },
        },
      },
      '/v1/leases/{id}/report': {
        post: {
          summary: 'Report how a target treated the proxy',
          parameters: [leaseIdParam],
          requestBody: {
            required: true,
            description: BODY_DECODING,
            content: { 'application/json': { schema: ref('ReportRequest') } },
          },
          responses: {
            '204': { description: 'Recorded.' },
            '400': json('Error', 'Malformed body (`invalid_body`) or unknown result (`invalid_result`).'),
            '404': json(
              'Error',
              'Lease never issued, released, or expired more than one cooldown window ago (`unknown_lease`).',
            ),
            ...common,
          },
        },
      },
    },
  };
}
