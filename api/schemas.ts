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
 * `decodeLeaseRequest`/`decodeReportRequest` (api/go-compat.ts), which
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
  'forbidden',
  'too_many_requests',
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
  pool: z.string().optional().describe('The ProxyPool that made this proxy; omitted for a standalone Proxy.'),
  draining: z
    .boolean()
    .optional()
    .describe(
      'True while the proxy drains before its replacement or deletion: held leases keep working, no new lease is granted. Omitted otherwise.',
    ),
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
  proxyURL: z
    .string()
    .optional()
    .describe(
      '`http://user:password@host:port`: the proxy with its credentials, for a direct client. Only for a proxy that asks for credentials (its Secret is readable), and never from an API served without a token off the loopback. Omitted otherwise.',
    ),
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
 * `decodeReportRequest` (api/go-compat.ts), which reproduce the seed's Go decoder. A `null`
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

export interface OpenApiOptions {
  maxLeaseTtlSeconds: number;
  version?: string;
  /** A bearer token is configured: declare the security scheme and the 401s (default true). */
  bearer?: boolean;
  /** `/metrics` is served on this port (default true). */
  metrics?: boolean;
}

export function buildOpenApiDocument(options: OpenApiOptions): JsonObject {
  const bearer = options.bearer ?? true;
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
    ...(bearer
      ? [
          [401, 'Missing or wrong bearer token (`unauthorized`); the connection is closed.'] as [
            number,
            string,
          ],
          [
            429,
            'Too many wrong tokens from this address in the last minute, or the tenant is over its requests per second (`too_many_requests`); see Retry-After.',
          ] as [number, string],
        ]
      : []),
    [500, 'Unexpected failure (`internal`).'],
  );
  const storeDown = 'the lease store (Redis) is unreachable (`unavailable`)';
  const unavailable = errors([503, `The proxy cache has not synced yet, or ${storeDown}.`]);
  const storeUnavailable = errors([503, `${storeDown[0]!.toUpperCase()}${storeDown.slice(1)}.`]);
  const open = bearer ? { security: [] } : {};
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
      ...(bearer ? { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } } : {}),
    },
    ...(bearer ? { security: [{ bearer: [] }] } : {}),
    paths: {
      '/healthz': {
        get: {
          summary: 'Liveness',
          ...open,
          responses: {
            '200': { description: '`ok`', content: { 'text/plain': { schema: { type: 'string' } } } },
          },
        },
      },
      ...((options.metrics ?? true)
        ? {
            '/metrics': {
              get: {
                summary: 'Prometheus metrics',
                ...open,
                responses: {
                  '200': {
                    description: 'Prometheus text format',
                    content: { 'text/plain': { schema: { type: 'string' } } },
                  },
                },
              },
            },
          }
        : {}),
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
            '403': json('Error', 'The tenant may not use the pool named (`forbidden`).'),
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
          responses: { '204': { description: 'Released, or already gone.' }, ...common, ...storeUnavailable },
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
            ...storeUnavailable,
          },
        },
      },
    },
  };
}
