/**
 * The kubernetes provider's error classification and check() reasons, one
 * table each. Errors are thrown the way client-node 1.4 throws them
 * (ApiException: HTTP code in `code`, the Status JSON as text in `body`; a
 * 401 comes with no body), with bodies captured from the real
 * kube-apiserver 1.36.3 the integration tests run (404, 409, both 403s,
 * 422), and shaped like them for codes a healthy apiserver cannot be made
 * to return on demand (429, 5xx, 410, 400). The integration test provokes
 * the real 403, 404 and 409 paths end to end.
 */
import { AbortError, ApiException, FetchError } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { apiReason, checkReason, classify, httpStatus } from '../../providers/kubernetes/classify.js';

function apiError(code: number, body?: string): ApiException<unknown> {
  return new ApiException(code, code === 401 ? 'Unauthorized' : 'Unknown API Status Code!', body, {});
}

/** Status bodies shaped like the apiserver's, for codes a healthy test apiserver cannot be made to return. */
const status = (code: number, reason: string, message: string) =>
  JSON.stringify({
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    code,
  }) + '\n';

/** Captured verbatim from kube-apiserver 1.36.3 (the 422 is trimmed where marked). */
const captured = {
  notFound:
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"nope\\" not found","reason":"NotFound","details":{"name":"nope","kind":"pods"},"code":404}\n',
  namespaceNotFound:
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces \\"no-such-ns\\" not found","reason":"NotFound","details":{"name":"no-such-ns","kind":"namespaces"},"code":404}\n',
  alreadyExists:
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"proxy-abc\\" already exists","reason":"AlreadyExists","details":{"name":"proxy-abc","kind":"pods"},"code":409}\n',
  forbidden:
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \\"system:serviceaccount:exp2-lfyee:sa\\" cannot list resource \\"pods\\" in API group \\"\\" at the cluster scope","reason":"Forbidden","details":{"kind":"pods"},"code":403}\n',
  quota:
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"x\\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0","reason":"Forbidden","details":{"name":"x","kind":"pods"},"code":403}\n',
  // Trimmed: the real message goes on to quote the regex.
  invalid:
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Pod \\"Bad_Name\\" is invalid: metadata.name: Invalid value: \\"Bad_Name\\"","reason":"Invalid","code":422}\n',
  tooMany: status(429, 'TooManyRequests', 'too many requests, please try again later'),
  timeout: status(504, 'Timeout', 'Timeout: request did not complete within requested timeout'),
  internal: status(500, 'InternalError', 'Internal error occurred: etcdserver: leader changed'),
  unavailable: status(503, 'ServiceUnavailable', 'the server is currently unable to handle the request'),
  expired: status(410, 'Expired', 'The provided continue parameter is too old'),
  badRequest: status(400, 'BadRequest', 'the object provided is unrecognized'),
};

function systemError(code: string): FetchError {
  // What node-fetch throws when the socket fails: the system error's code copied onto a FetchError.
  const cause = Object.assign(new Error(`connect ${code} 127.0.0.1:6443`), { code, syscall: 'connect' });
  return new FetchError(
    `request to https://127.0.0.1:6443/api/v1/pods failed, reason: ${cause.message}`,
    'system',
    cause,
  );
}

describe('classify', () => {
  const table: Array<[string, unknown, string, number | undefined, string | undefined]> = [
    ['404 pod not found', apiError(404, captured.notFound), 'NotFound', 404, 'NotFound'],
    ['404 namespace not found', apiError(404, captured.namespaceNotFound), 'NotFound', 404, 'NotFound'],
    // create never lets a 409 reach classify (it adopts instead); anywhere else a conflict is retried.
    ['409 already exists', apiError(409, captured.alreadyExists), 'Transient', 409, 'AlreadyExists'],
    ['403 RBAC denial', apiError(403, captured.forbidden), 'Permanent', 403, 'Forbidden'],
    [
      '403 ResourceQuota exhausted (same reason: Permanent too)',
      apiError(403, captured.quota),
      'Permanent',
      403,
      'Forbidden',
    ],
    ['401 (no body)', apiError(401), 'Permanent', 401, undefined],
    ['422 invalid', apiError(422, captured.invalid), 'Permanent', 422, 'Invalid'],
    ['400 bad request', apiError(400, captured.badRequest), 'Permanent', 400, 'BadRequest'],
    ['429 too many requests', apiError(429, captured.tooMany), 'Transient', 429, 'TooManyRequests'],
    ['500 internal error', apiError(500, captured.internal), 'Transient', 500, 'InternalError'],
    ['503 unavailable', apiError(503, captured.unavailable), 'Transient', 503, 'ServiceUnavailable'],
    ['504 timeout', apiError(504, captured.timeout), 'Transient', 504, 'Timeout'],
    ['410 expired continue token', apiError(410, captured.expired), 'Transient', 410, 'Expired'],
    ['408 with a non-JSON body', apiError(408, '<html>proxy timeout</html>'), 'Transient', 408, undefined],
    ['418, a status nobody expects', apiError(418, ''), 'Transient', 418, undefined],
    ['connection refused', systemError('ECONNREFUSED'), 'Transient', undefined, undefined],
    ['connection reset', systemError('ECONNRESET'), 'Transient', undefined, undefined],
    ['TLS: unknown CA', systemError('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), 'Transient', undefined, undefined],
    ['node-fetch abort', new AbortError('The operation was aborted.'), 'Transient', undefined, undefined],
    [
      'DOMException timeout',
      new DOMException('timed out', 'TimeoutError'),
      'Transient',
      undefined,
      undefined,
    ],
    [
      'not a backend error: a TypeError',
      new TypeError("Cannot read properties of undefined (reading 'x')"),
      'Transient',
      undefined,
      undefined,
    ],
    ['not an error at all: a string', 'boom', 'Transient', undefined, undefined],
    ['null', null, 'Transient', undefined, undefined],
  ];

  it.each(table)('%s', (_title, err, cls, code, reason) => {
    const c = classify(err);
    expect(c.errorClass).toBe(cls);
    expect(c.status).toBe(code);
    expect(c.apiReason).toBe(reason);
    expect(httpStatus(err)).toBe(code);
  });

  it('summaries are built from codes and reasons only, never from the Status message', () => {
    const c = classify(apiError(403, captured.forbidden));
    expect(c.summary).toBe(
      'apiserver answered 403 Forbidden (RBAC denial or an exhausted ResourceQuota: both are 403)',
    );
    expect(c.summary).not.toContain('system:serviceaccount');
    expect(classify(systemError('ECONNREFUSED')).summary).toBe('apiserver unreachable (ECONNREFUSED)');
    expect(classify(new TypeError('secret-ish text')).summary).toBe('apiserver call failed');
  });

  it('apiReason ignores a reason that is not a plain identifier', () => {
    expect(
      apiReason(apiError(403, JSON.stringify({ reason: 'Forbidden because token=abc' }))),
    ).toBeUndefined();
    expect(apiReason(apiError(403, JSON.stringify({ reason: 'Forbidden' })))).toBe('Forbidden');
    expect(apiReason({ body: { reason: 'Conflict' } })).toBe('Conflict');
    expect(apiReason({ body: 'not json' })).toBeUndefined();
  });

  it('a system error with a numeric-looking string code is not an HTTP status', () => {
    expect(httpStatus({ code: '404' })).toBeUndefined();
    expect(httpStatus({ code: 404.5 })).toBeUndefined();
    expect(httpStatus({ code: 42 })).toBeUndefined();
  });
});

describe('checkReason', () => {
  const table: Array<[string, unknown, boolean, string]> = [
    ['the check signal fired', systemError('ECONNRESET'), true, 'Timeout'],
    ['node-fetch abort', new AbortError('aborted'), false, 'Timeout'],
    ['401', apiError(401), false, 'Unauthorized'],
    ['403', apiError(403, captured.forbidden), false, 'Forbidden'],
    ['504 from the apiserver', apiError(504, captured.timeout), false, 'Timeout'],
    ['408', apiError(408), false, 'Timeout'],
    ['500', apiError(500, captured.internal), false, 'APIError'],
    ['429', apiError(429, captured.tooMany), false, 'APIError'],
    ['404', apiError(404, captured.notFound), false, 'APIError'],
    ['connection refused', systemError('ECONNREFUSED'), false, 'Unreachable'],
    ['TLS failure', systemError('DEPTH_ZERO_SELF_SIGNED_CERT'), false, 'Unreachable'],
    ['anything else', new Error('x'), false, 'Unreachable'],
  ];
  it.each(table)('%s', (_title, err, aborted, reason) => {
    expect(checkReason(err, aborted)).toBe(reason);
  });
});
