/**
 * The path rules on their own, with answers recorded from Go 1.26.8's
 * net/http ServeMux (tests/helpers/go-servemux, `go run . TOKEN`, then a raw
 * request per target); tests/integration/api-clean-paths.test.ts compares
 * against the live Go server on every run.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createApi } from '../../api/app.js';
import {
  cleanPathLocation,
  fullCleanPathLocation,
  fullRewrittenByWhatwg,
  goCleanPath,
  isPlainTarget,
} from '../../api/clean-path.js';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';

describe('unclean request paths', () => {
  it.each([
    ['//v1/proxies?healthy=true', '/v1/proxies?healthy=true'],
    ['//v1/leases', '/v1/leases'],
    ['/v1/./proxies', '/v1/proxies'],
    ['/v1//%70roxies', '/v1/%2570roxies'],
    ['//healthz', '/healthz'],
    ['/./healthz', '/healthz'],
    ['/v1/leases/a(b)//report', '/v1/leases/a%28b%29/report'],
    ['/..', '/'],
    ['//', '/'],
    ['/a/b/../../..', '/'],
    ['//x?a=%20&b', '/x?a=%20&b'],
    ['/v1/proxies//', '/v1/proxies/'],
    ['/v1/proxies/.', '/v1/proxies'],
    ['http://h//v1/proxies?q=1', '/v1/proxies?q=1'],
    ['//v1/proxies?', '/v1/proxies'],
  ])('%s redirects to %s', (target, location) => {
    expect(cleanPathLocation(target)).toBe(location);
  });

  it.each(['/v1/proxies', '/v1/proxies/', '/v1/proxies?', '/v1/%2e/proxies', '/v1/%zz//x', '*', '/'])(
    '%s is left alone',
    (target) => {
      expect(cleanPathLocation(target)).toBeUndefined();
    },
  );

  it('cleans like ServeMux, keeping a trailing slash', () => {
    expect(goCleanPath('')).toBe('/');
    expect(goCleanPath('a/b/')).toBe('/a/b/');
    expect(goCleanPath('/a/./b/../c//')).toBe('/a/c/');
    expect(goCleanPath('/../')).toBe('/');
  });

  it('redirects in the app too when served without Node (the URL keeps "//")', async () => {
    const app = createApi({
      catalog: createStaticProxyCatalog([]),
      leaseStore: new MemoryLeaseStore({}),
      token: '',
      logger: pino({ level: 'silent' }),
      registry: new Registry(),
      processMetrics: false,
    });
    const res = await app.request('http://h//v1/proxies?healthy=true');
    expect(res.status).toBe(307);
    expect(res.headers.get('location')).toBe('/v1/proxies?healthy=true');
    expect(await res.text()).toBe('<a href="/v1/proxies?healthy=true">Temporary Redirect</a>.\n\n');
  });
});

describe('the plain-path shortcut', () => {
  // Every target of up to 5 characters over an alphabet with each character the rules treat
  // specially: wherever the shortcut says "plain", the full rules agree (no redirect, no rewrite).
  const alphabet = ['/', '.', 'a', 'Z', '9', '-', '_', '~', '%', '2', 'e', '?', '\\', '(', ' '];
  function* targets(prefix: string, left: number): Generator<string> {
    yield prefix;
    if (left > 0) for (const c of alphabet) yield* targets(prefix + c, left - 1);
  }

  it('agrees with the full rules on every short target', () => {
    let plain = 0;
    let checked = 0;
    for (const t of targets('/', 4)) {
      checked++;
      if (!isPlainTarget(t)) continue;
      plain++;
      expect(fullCleanPathLocation(t), t).toBeUndefined();
      expect(fullRewrittenByWhatwg(t), t).toBe(false);
      expect(cleanPathLocation(t)).toBeUndefined();
    }
    // The shortcut takes a real share of them, and leaves the unusual ones to the full rules.
    expect(plain).toBeGreaterThan(1_000);
    expect(checked - plain).toBeGreaterThan(plain);
    for (const t of ['//v1/leases', '/v1/./proxies', '/v1/%70roxies', '/v1/..', '/a\\b', '/.x', '/a b'])
      expect(isPlainTarget(t), t).toBe(false);
    for (const t of ['/v1/leases', '/v1/leases/abc-123/report', '/v1/proxies/?healthy=true&attr.geo=us', '/'])
      expect(isPlainTarget(t), t).toBe(true);
  });
});
