/**
 * Tenants (tenants/): the file's shape and its errors, finding a tenant by
 * its token, what a tenant's scope lets it lease, lease ids sealed to their
 * tenant, the wrong-token limiter, the per-tenant rate, and a file changed
 * while a server runs.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createTenantDirectory, loadTenantsFile } from '../../tenants/directory.js';
import { createGuessLimiter } from '../../tenants/guess-limiter.js';
import { openLeaseId, sealLeaseId } from '../../tenants/lease-ids.js';
import { createTenantRates } from '../../tenants/rate.js';
import {
  defaultTenant,
  findTenant,
  inScope,
  parseTenants,
  poolAllowed,
  TenantsFileError,
} from '../../tenants/tenants.js';
import { eventually } from '../helpers/temporal.js';

const digest = (token: string) => createHash('sha256').update(token).digest('hex');
const dir = mkdtempSync(join(tmpdir(), 'ep-tenants-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const twoTenants = {
  tenants: [
    { name: 'team-a', tokenSha256: digest('token-a'), pools: ['pool-a'] },
    {
      name: 'team-b',
      tokenSha256: digest('token-b').toUpperCase(),
      selector: { geo: 'eu' },
      limits: { tunnels: 2 },
    },
  ],
};

describe('the tenants file', () => {
  it('parses names, digests (any case), pools, selectors and limits', () => {
    const [a, b] = parseTenants(twoTenants, 'test');
    expect(a!.name).toBe('team-a');
    expect([...a!.pools!]).toEqual(['pool-a']);
    expect(b!.selector).toEqual([['geo', 'eu']]);
    expect(b!.limits).toEqual({ tunnels: 2 });
    expect(b!.digest.toString('hex')).toBe(digest('token-b'));
  });

  it.each([
    [{ tenants: [{ name: 'A', tokenSha256: digest('x') }] }, 'test: tenants[0].name: a lowercase DNS label'],
    [
      { tenants: [{ name: 'a', tokenSha256: 'token-in-clear' }] },
      'test: tenants[0].tokenSha256: the SHA-256',
    ],
    [{ tenants: [{ name: 'a', tokenSha256: digest('x'), extra: 1 }] }, 'test: tenants[0]: Unrecognized key'],
    [
      { tenants: [{ name: 'a', tokenSha256: digest('x'), limits: { tunnels: 0 } }] },
      'tenants[0].limits.tunnels',
    ],
    [
      {
        tenants: [
          { name: 'a', tokenSha256: digest('x') },
          { name: 'a', tokenSha256: digest('y') },
        ],
      },
      'test: tenants[1].name: a is given twice',
    ],
    [
      {
        tenants: [
          { name: 'a', tokenSha256: digest('x') },
          { name: 'b', tokenSha256: digest('x') },
        ],
      },
      'test: tenants[1].tokenSha256: the same token as an earlier tenant',
    ],
    [{ nope: [] }, 'test: '],
  ])('refuses %j naming the place', (value, message) => {
    let error: unknown;
    try {
      parseTenants(value, 'test');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(TenantsFileError);
    expect((error as Error).message).toContain(message);
    // A digest never reaches the message.
    expect((error as Error).message).not.toContain(digest('x'));
  });

  it('a file that is not YAML is named by line and column, never by its text', () => {
    const path = join(dir, 'broken.yaml');
    writeFileSync(path, `tenants:\n  - name: a\n    tokenSha256: "${digest('secret')}\n  bad: [\n`);
    expect(() => loadTenantsFile(path, '')).toThrow(
      /^tenants file .*broken\.yaml: not YAML \(line \d+, column \d+\)/,
    );
    try {
      loadTenantsFile(path, '');
    } catch (e) {
      expect((e as Error).message).not.toContain(digest('secret'));
    }
  });

  it('a tenant is a crawler unless the file makes it an operator; the single token is the operator; another role is refused', () => {
    const [plain, operator] = parseTenants(
      {
        tenants: [
          { name: 'plain', tokenSha256: digest('p') },
          { name: 'ops', tokenSha256: digest('o'), role: 'operator' },
        ],
      },
      'test',
    );
    expect(plain!.role).toBe('crawler');
    expect(operator!.role).toBe('operator');
    expect(defaultTenant('single').role).toBe('operator');
    expect(() =>
      parseTenants({ tenants: [{ name: 'x', tokenSha256: digest('x'), role: 'admin' }] }, 'test'),
    ).toThrow(/tenants\[0\]\.role/);
  });

  it('a tenant named default beside the single token is refused', () => {
    const path = join(dir, 'default.yaml');
    writeFileSync(path, `tenants:\n  - name: default\n    tokenSha256: ${digest('z')}\n`);
    expect(() => loadTenantsFile(path, 'single')).toThrow('the tenant "default" is the single token\'s');
    expect(loadTenantsFile(path, '')).toHaveLength(1);
  });
});

describe('finding a tenant and its scope', () => {
  const tenants = parseTenants(twoTenants, 'test');

  it('finds each tenant by its token and nobody by another', () => {
    expect(findTenant(tenants, 'token-a')?.name).toBe('team-a');
    expect(findTenant(tenants, 'token-b')?.name).toBe('team-b');
    expect(findTenant(tenants, 'token-c')).toBeUndefined();
    expect(findTenant(tenants, '')).toBeUndefined();
  });

  it('a pool list limits the pools named and the proxies leased; a selector the attributes', () => {
    const [a, b] = tenants;
    expect(poolAllowed(a!, 'pool-a')).toBe(true);
    expect(poolAllowed(a!, 'pool-b')).toBe(false);
    expect(poolAllowed(a!, undefined)).toBe(true);
    expect(inScope(a!, { pool: 'pool-a', attributes: {} })).toBe(true);
    expect(inScope(a!, { pool: '', attributes: {} })).toBe(false);
    expect(inScope(b!, { pool: 'anything', attributes: { geo: 'eu' } })).toBe(true);
    expect(inScope(b!, { pool: '', attributes: { geo: 'us' } })).toBe(false);
    expect(inScope(defaultTenant('t'), { pool: 'x', attributes: {} })).toBe(true);
  });
});

describe('lease ids sealed to their tenant', () => {
  const [a, b] = parseTenants(twoTenants, 'test');
  const id = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';

  it('opens for its own tenant only; unsealed and tampered ids are nobody’s', () => {
    const sealed = sealLeaseId(true, a!, id);
    expect(sealed).toMatch(/^ABCDEFGHIJKLMNOPQRSTUVWXYZ\.[A-Za-z0-9_-]{16}$/);
    expect(openLeaseId(true, a!, sealed)).toBe(id);
    expect(openLeaseId(true, b!, sealed)).toBeUndefined();
    expect(openLeaseId(true, a!, id)).toBeUndefined();
    expect(
      openLeaseId(true, a!, `${sealed.slice(0, -1)}${sealed.endsWith('A') ? 'B' : 'A'}`),
    ).toBeUndefined();
    expect(openLeaseId(true, a!, `.${sealed.split('.')[1]}`)).toBeUndefined();
  });

  it('without a tenants file the id is the seed’s, as it was', () => {
    expect(sealLeaseId(false, a!, id)).toBe(id);
    expect(openLeaseId(false, b!, id)).toBe(id);
  });
});

describe('wrong tokens per address', () => {
  it('the 21st failure in a minute is refused until the oldest leaves the window; other addresses are not affected', () => {
    let now = 1_000_000;
    const limiter = createGuessLimiter({ maxFailures: 20, windowMs: 60_000, now: () => now });
    for (let i = 0; i < 19; i++) {
      limiter.failed('10.0.0.1');
      now += 1_000;
    }
    expect(limiter.blocked('10.0.0.1')).toBeUndefined();
    limiter.failed('10.0.0.1');
    expect(limiter.blocked('10.0.0.1')).toEqual({ retryAfterSeconds: 41 });
    expect(limiter.blocked('10.0.0.2')).toBeUndefined();
    now = 1_000_000 + 60_000;
    expect(limiter.blocked('10.0.0.1')).toBeUndefined();
  });

  it('0 turns it off; memory is bounded by the address count', () => {
    const off = createGuessLimiter({ maxFailures: 0 });
    for (let i = 0; i < 50; i++) off.failed('a');
    expect(off.blocked('a')).toBeUndefined();
    const small = createGuessLimiter({ maxFailures: 1, maxAddresses: 2 });
    small.failed('a');
    small.failed('b');
    small.failed('c');
    expect(small.blocked('a')).toBeUndefined();
    expect(small.blocked('c')).toBeDefined();
  });
});

describe('requests per second', () => {
  it('a bucket one second deep per tenant, refilled by time; no limit, no bucket', () => {
    let now = 0;
    const rates = createTenantRates(() => now);
    const [limited] = parseTenants(
      { tenants: [{ name: 'r', tokenSha256: digest('r'), limits: { requestsPerSecond: 3 } }] },
      'test',
    );
    expect([1, 2, 3, 4].map(() => rates.take(limited!))).toEqual([true, true, true, false]);
    now += 334;
    expect(rates.take(limited!)).toBe(true);
    expect(rates.take(limited!)).toBe(false);
    const free = defaultTenant('t');
    expect(Array.from({ length: 100 }, () => rates.take(free)).every(Boolean)).toBe(true);
  });
});

describe('the directory', () => {
  const logger = pino({ level: 'silent' });

  it('with no token and no file everyone is the open tenant; with a token only it is default', () => {
    const open = createTenantDirectory({ token: '', logger });
    expect(open.open).toBe(true);
    expect(open.authenticate('anything')?.name).toBe('default');
    const single = createTenantDirectory({ token: 'tok', logger });
    expect(single.open).toBe(false);
    expect(single.sealsLeaseIds).toBe(false);
    expect(single.authenticate('tok')?.name).toBe('default');
    expect(single.authenticate('other')).toBeUndefined();
    expect(single.authenticate(undefined)).toBeUndefined();
  });

  it('reads the file beside the token, and a changed file takes effect; a broken change keeps the last good', async () => {
    const path = join(dir, 'live.yaml');
    writeFileSync(path, `tenants:\n  - name: team-a\n    tokenSha256: ${digest('token-a')}\n`);
    const lines: string[] = [];
    const directory = createTenantDirectory({
      token: 'tok',
      tenantsFile: path,
      pollMs: 50,
      logger: pino({ level: 'info' }, { write: (l: string) => lines.push(l) }),
    });
    try {
      expect(directory.sealsLeaseIds).toBe(true);
      expect(directory.names()).toEqual(['default', 'team-a']);
      expect(directory.authenticate('token-b')).toBeUndefined();
      writeFileSync(
        path,
        `tenants:\n  - name: team-a\n    tokenSha256: ${digest('token-a')}\n  - name: team-b\n    tokenSha256: ${digest('token-b')}\n`,
      );
      await eventually('team-b known', () => Promise.resolve(directory.authenticate('token-b')?.name));
      writeFileSync(path, `tenants:\n  - name: Team-C\n    tokenSha256: ${digest('token-c')}\n`);
      await eventually('the broken change logged', () =>
        Promise.resolve(lines.some((l) => l.includes('cannot be used')) || undefined),
      );
      expect(directory.authenticate('token-b')?.name).toBe('team-b');
      expect(lines.join('\n')).not.toContain(digest('token-c'));
    } finally {
      directory.close();
    }
  });
});
