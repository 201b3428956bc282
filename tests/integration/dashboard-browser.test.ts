/**
 * The dashboard in a real browser (Chromium, driven by playwright-core) on
 * the real `api` process, with this file's control plane (worker, bridge,
 * `local` provider) behind it: the page asks for a token and refuses a
 * wrong one; the Proxies page follows applies, deletes and health verdicts
 * live; an operator scales a pool from the page and the pool follows; a
 * crawler tenant sees only its pool, gets no scale control and is refused
 * a direct POST; an attribute holding markup renders as text. (The
 * README's screenshots come from `make dev`: tests/integration/dev-command.test.ts.)
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { launchBrowser, tableCells } from '../helpers/browser.js';
import { createProxy, providerHealthClient, proxyCondition } from '../helpers/kube.js';
import { startPoolHarness, type PoolHarness } from '../helpers/pools.js';
import { startProbeTarget, type ProbeTarget } from '../helpers/prober-fixtures.js';
import { eventually } from '../helpers/temporal.js';

const OPERATOR_TOKEN = 'dashboard-operator-token';
const CRAWLER_TOKEN = 'dashboard-crawler-token';
const XSS = '<img src=x onerror=alert(1)>';
const sha = (t: string) => createHash('sha256').update(t).digest('hex');

interface Row {
  proxy: string;
  provider: string;
  pool: string;
  phase: string;
  address: string;
  health: string;
  attributes: string;
  state: string;
}

/** The Proxies table as the page shows it now. */
async function proxyRows(page: Page): Promise<Row[]> {
  return (await tableCells(page, 'Proxies')).map((c) => ({
    proxy: c[0]!,
    provider: c[1]!,
    pool: c[2]!,
    phase: c[3]!,
    address: c[4]!,
    health: c[5]!,
    attributes: c[9]!,
    state: c[11]!,
  }));
}

async function signIn(page: Page, url: string, token: string): Promise<void> {
  await page.goto(`${url}/ui#/proxies`);
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('table', { name: 'Proxies' }).waitFor();
}

describe('dashboard in a real browser', () => {
  let h: PoolHarness;
  let browser: Browser;
  let upstream: ForwardProxy;
  let watched: ProbeTarget;
  const dir = mkdtempSync(join(tmpdir(), 'ep-dashboard-'));
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    const tenantsFile = join(dir, 'tenants.yaml');
    writeFileSync(
      tenantsFile,
      [
        'tenants:',
        `  - name: platform`,
        `    tokenSha256: ${sha(OPERATOR_TOKEN)}`,
        `    role: operator`,
        `  - name: crawl-team`,
        `    tokenSha256: ${sha(CRAWLER_TOKEN)}`,
        `    pools: [crawl]`,
        '',
      ].join('\n'),
    );
    h = await startPoolHarness('ui', {
      apiArgs: ['--tenants-file', tenantsFile, '--temporal-web-url', 'http://127.0.0.1:8233'],
    });
    upstream = await startForwardProxy({ host: '127.0.0.1', port: 0 });
    watched = await startProbeTarget();
    browser = await launchBrowser();
    await h.pools.create(h.cp.namespace, 'crawl', {
      replicas: 3,
      template: {
        spec: {
          mode: 'Managed',
          provider: 'local',
          attributes: { team: 'crawl' },
          healthCheck: { probeURL: h.target.url, intervalSeconds: 1, timeoutSeconds: 2 },
        },
      },
    });
  }, 240_000);
  afterAll(async () => {
    for (const c of cleanups) await c().catch(() => undefined);
    await browser?.close();
    await h?.close();
    await upstream?.close();
    await watched?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('asks for a token: the data answers 401 without one, a wrong one is refused, the page itself is public with a strict CSP', async () => {
    const html = await fetch(`${h.apiUrl}/ui`);
    expect(html.status).toBe(200);
    const csp = html.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    const slash = await fetch(`${h.apiUrl}/ui/`, { redirect: 'manual' });
    expect([slash.status, slash.headers.get('location')]).toEqual([308, '/ui']);
    expect((await fetch(`${h.apiUrl}/ui/api/session`)).status).toBe(401);
    expect((await fetch(`${h.apiUrl}/ui/api/events`)).status).toBe(401);
    const wrong = await fetch(`${h.apiUrl}/ui/api/events`, { headers: { Authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);

    const page = await browser.newPage();
    await page.goto(`${h.apiUrl}/ui`);
    await page.getByLabel('Token').fill('not-a-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent(), { timeout: 15_000 }).toContain('refused');
    await page.getByLabel('Token').fill(OPERATOR_TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    await page.close();
  });

  it('lists the pool with its egress addresses, shows 20 applied Proxies and a deleted one live, without a reload', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await signIn(page, h.apiUrl, OPERATOR_TOKEN);
    const ready = await eventually(
      'the page lists 3 Ready members of crawl with addresses',
      async () => {
        const rows = (await proxyRows(page)).filter((r) => r.pool === 'crawl' && r.phase === 'Ready');
        return rows.length === 3 && rows.every((r) => /^127\.\d+\.\d+\.\d+:\d+$/.test(r.address))
          ? rows
          : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    // The address shown is the one the Proxy's status holds.
    const members = await h.members('crawl');
    for (const r of ready) {
      const m = members.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === r.proxy)!;
      expect(r.address.startsWith(`${m.status!.ip}:`)).toBe(true);
    }

    const names = Array.from({ length: 20 }, (_, i) => `extra-${i}`);
    const appliedAt = Date.now();
    await Promise.all(
      names.map((name) =>
        createProxy(h.proxies, h.cp.namespace, name, {
          mode: 'External',
          endpoint: { host: '127.0.0.1', port: upstream.port },
          healthCheck: { probeURL: h.target.url, intervalSeconds: 5, timeoutSeconds: 2 },
        }),
      ),
    );
    await eventually(
      'the 20 applied Proxies on the page',
      async () => {
        const shown = new Set((await proxyRows(page)).map((r) => r.proxy));
        return names.every((n) => shown.has(`${h.cp.namespace}/${n}`)) || undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    console.log(
      `dashboard: 20 applied Proxies on the page ${((Date.now() - appliedAt) / 1000).toFixed(2)} s after the apply`,
    );

    const deletedAt = Date.now();
    const doomed = (await h.proxies.get(h.cp.namespace, 'extra-7'))!;
    await h.proxies.delete({ namespace: h.cp.namespace, name: 'extra-7', uid: doomed.metadata.uid! });
    await eventually(
      'the deleted Proxy gone from the page',
      async () => !(await proxyRows(page)).some((r) => r.proxy === `${h.cp.namespace}/extra-7`) || undefined,
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    console.log(
      `dashboard: a deleted Proxy left the page ${((Date.now() - deletedAt) / 1000).toFixed(2)} s after the delete`,
    );
    await page.close();
  });

  it('turns a Proxy unhealthy on the page soon after the prober’s verdict', async () => {
    const page = await browser.newPage();
    await signIn(page, h.apiUrl, OPERATOR_TOKEN);
    await createProxy(h.proxies, h.cp.namespace, 'watched', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: upstream.port },
      healthCheck: { probeURL: watched.url, intervalSeconds: 1, timeoutSeconds: 1 },
    });
    const id = `${h.cp.namespace}/watched`;
    await eventually(
      'watched healthy on the page',
      async () => (await proxyRows(page)).find((r) => r.proxy === id && r.health === 'healthy'),
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    watched.status = 503;
    const seenAt = await eventually(
      'watched unhealthy on the page',
      async () =>
        (await proxyRows(page)).find((r) => r.proxy === id && r.health.startsWith('unhealthy'))
          ? Date.now()
          : undefined,
      { timeoutMs: 60_000, intervalMs: 50 },
    );
    const proxy = (await h.proxies.get(h.cp.namespace, 'watched'))!;
    const verdict = proxyCondition(proxy, 'Healthy')!;
    expect(verdict.status).toBe('False');
    const verdictAt = Date.parse(verdict.lastTransitionTime);
    // lastTransitionTime has whole seconds: the figure is within a second.
    console.log(
      `dashboard: unhealthy on the page ${((seenAt - verdictAt) / 1000).toFixed(1)} s after the verdict's lastTransitionTime (whole seconds)`,
    );
    await page.close();
  });

  it('scales a pool from the page: spec.replicas follows and the page shows 5 Ready members', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await signIn(page, h.apiUrl, OPERATOR_TOKEN);
    // From the keyboard: a fresh load (the token stays in the tab's sessionStorage), Tab to the Pools link, Enter.
    await page.goto(`${h.apiUrl}/ui#/fleet`);
    // Only the hash changed: reload, so focus starts at the top of a new document.
    await page.reload();
    await page.getByRole('heading', { name: 'Fleet', level: 1 }).waitFor();
    for (let i = 0; i < 10; i++) {
      await page.keyboard.press('Tab');
      if ((await page.evaluate<string>('document.activeElement?.textContent ?? ""')) === 'Pools') break;
    }
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Pools', level: 1 }).waitFor();
    const input = page.getByLabel(`Replicas for ${h.cp.namespace}/crawl`);
    await input.fill('5');
    await page.getByRole('button', { name: 'Scale' }).click();
    await eventually(
      'spec.replicas 5',
      async () => ((await h.pools.get(h.cp.namespace, 'crawl'))?.spec.replicas === 5 ? true : undefined),
      { timeoutMs: 15_000, intervalMs: 100 },
    );
    await page.getByRole('link', { name: 'Proxies' }).click();
    await eventually(
      'the page shows 5 Ready members of crawl',
      async () =>
        (await proxyRows(page)).filter((r) => r.pool === 'crawl' && r.phase === 'Ready').length === 5 ||
        undefined,
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    // A provider's health, as the worker's checks write it, shows on the Providers page.
    const healths = providerHealthClient();
    const phName = `ui-${h.cp.namespace}`;
    const { object } = await healths.create(phName, { 'ui-test': 'yes' });
    await healths.writeStatus(
      object,
      { key: 'ui-test', value: 'yes' },
      {
        type: 'local',
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            reason: 'CheckPassed',
            message: 'every target answered',
            lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          },
        ],
        targets: [
          {
            name: 'state-dir',
            ready: true,
            reason: 'Writable',
            lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          },
        ],
        lastCheckTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      },
    );
    cleanups.push(async () => {
      const current = await healths.get(phName);
      if (current) await healths.delete(current);
    });
    await page.getByRole('link', { name: 'Providers' }).click();
    await eventually(
      'the provider on the Providers page',
      async () => (await tableCells(page, 'Providers')).find((c) => c[0] === phName && c[2] === 'ready'),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    await page.close();
  });

  it('cordons a Proxy from the page: the annotation is set and the row says so', async () => {
    const page = await browser.newPage();
    await signIn(page, h.apiUrl, OPERATOR_TOKEN);
    const id = `${h.cp.namespace}/extra-3`;
    await page.getByRole('button', { name: `Cordon ${id}` }).click();
    await eventually(
      'the cordon annotation',
      async () =>
        (await h.proxies.get(h.cp.namespace, 'extra-3'))?.metadata.annotations?.[
          'crawl.example.com/cordoned'
        ] === 'true' || undefined,
      { timeoutMs: 15_000, intervalMs: 100 },
    );
    await eventually(
      'cordoned on the page',
      async () =>
        (await proxyRows(page)).find((r) => r.proxy === id)?.state.startsWith('cordoned') || undefined,
      { timeoutMs: 15_000, intervalMs: 100 },
    );
    await page.close();
  });

  it('a crawler tenant sees only its pool, has no scale control, and its direct POST is refused with 403', async () => {
    const page = await browser.newPage();
    await signIn(page, h.apiUrl, CRAWLER_TOKEN);
    const rows = await eventually(
      'the crawler sees the crawl members',
      async () => {
        const r = await proxyRows(page);
        return r.length >= 5 ? r : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(rows.every((r) => r.pool === 'crawl')).toBe(true);
    await page.getByRole('link', { name: 'Pools' }).click();
    await page.getByRole('table', { name: 'Pools' }).locator('tbody tr').first().waitFor();
    expect(await page.getByRole('button', { name: 'Scale' }).count()).toBe(0);
    expect(await page.getByLabel(`Replicas for ${h.cp.namespace}/crawl`).count()).toBe(0);
    await page.close();

    const post = (token: string, headers: Record<string, string> = {}) =>
      fetch(`${h.apiUrl}/ui/api/pools/${h.cp.namespace}/crawl/scale`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ replicas: 1 }),
      });
    expect((await post(CRAWLER_TOKEN)).status).toBe(403);
    expect((await post('wrong')).status).toBe(401);
    // A form posted from another site is refused even with an operator's token.
    expect((await post(OPERATOR_TOKEN, { Origin: 'https://evil.example' })).status).toBe(403);
    expect((await h.pools.get(h.cp.namespace, 'crawl'))?.spec.replicas).toBe(5);
  });

  it('renders an attribute holding markup as text: no dialog, no element made of it', async () => {
    const page = await browser.newPage();
    let dialogs = 0;
    page.on('dialog', (d) => {
      dialogs++;
      void d.dismiss();
    });
    await signIn(page, h.apiUrl, OPERATOR_TOKEN);
    await createProxy(h.proxies, h.cp.namespace, 'markup', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: upstream.port },
      attributes: { note: XSS },
    });
    const row = await eventually(
      'the markup Proxy on the page',
      async () => (await proxyRows(page)).find((r) => r.proxy === `${h.cp.namespace}/markup`),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(row.attributes).toBe(`note=${XSS}`);
    expect(await page.locator('table[aria-label="Proxies"] img').count()).toBe(0);
    // A later change reaching the page proves the page ran past the row's rendering.
    await createProxy(h.proxies, h.cp.namespace, 'after-markup', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: upstream.port },
    });
    await eventually(
      'a later Proxy on the page',
      async () =>
        (await proxyRows(page)).some((r) => r.proxy === `${h.cp.namespace}/after-markup`) || undefined,
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(dialogs).toBe(0);
    // Readable on a phone: the page does not scroll sideways (tables scroll in their own box).
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(391);
    await page.close();
  });
});
