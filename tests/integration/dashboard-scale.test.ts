/**
 * The dashboard with 1,000 Ready Proxies, in Chromium, on the real `api`
 * process (`--no-prober`: the Proxies' status is written here, as the
 * workflows would). Prints how long the Proxies page takes to show all of
 * them, how long each filter takes to apply, and the longest task the page
 * ran while 200 Proxies changed health under it: figures, not assertions
 * on time. Asserts what the page shows.
 */
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { launchBrowser, tableCells } from '../helpers/browser.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { createNamespace, kubeConfig, proxyClient } from '../helpers/kube.js';
import { applyReadyFleet, inBatches, readyStatus } from '../helpers/ready-fleet.js';
import { eventually } from '../helpers/temporal.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { loadavg } from 'node:os';

const COUNT = 1000;

describe('dashboard with 1,000 Ready Proxies', () => {
  let api: CliProcess;
  let apiUrl: string;
  let browser: Browser;
  let upstream: ForwardProxy;
  let namespace: string;
  let fleet: Proxy[];
  const proxies = proxyClient();

  beforeAll(async () => {
    namespace = await createNamespace(kubeConfig(), 'ui-scale');
    upstream = await startForwardProxy({ host: '127.0.0.1', port: 0 });
    fleet = await applyReadyFleet(proxies, namespace, COUNT, upstream.port);
    api = startCli([
      'api',
      '--discovery-addr',
      '127.0.0.1:0',
      ...testServerArgs(),
      '--watch-namespaces',
      namespace,
      '--no-prober',
    ]);
    apiUrl = await leaseApiUrl(api, 150_000);
    browser = await launchBrowser();
  }, 300_000);
  afterAll(async () => {
    await browser?.close();
    await api?.stop(30_000).catch(() => undefined);
    await upstream?.close();
  });

  it('shows all of them, filters them, and follows 200 health changes; prints the times', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const count = page.locator('#main p.summary[role="status"]');
    const started = Date.now();
    await page.goto(`${apiUrl}/ui#/proxies`);
    await eventually(
      'all 1,000 on the page',
      async () => ((await count.textContent()) === `${COUNT} of ${COUNT} Proxies` ? true : undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 20,
      },
    );
    const loadMs = Date.now() - started;
    expect((await tableCells(page, 'Proxies')).length).toBe(COUNT);

    // Long tasks (over 50 ms) the page runs from here on.
    await page.evaluate(
      `window.__longest = 0; new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__longest = Math.max(window.__longest, e.duration); }).observe({ type: 'longtask' });`,
    );
    const filter = page.getByLabel('Filter');
    const timings: string[] = [];
    for (const [text, expected] of [
      ['px-0999', 1],
      ['region=eu', 100],
      ['', COUNT],
    ] as const) {
      const t0 = Date.now();
      await filter.fill(text);
      await eventually(
        `filter "${text}"`,
        async () => ((await count.textContent()) === `${expected} of ${COUNT} Proxies` ? true : undefined),
        {
          timeoutMs: 30_000,
          intervalMs: 10,
        },
      );
      timings.push(`"${text}" ${Date.now() - t0} ms`);
    }

    // 200 turn unhealthy while the page is open; the page follows.
    const flipped = fleet.slice(0, 200);
    await inBatches(flipped, 16, (p) =>
      proxies.writeStatus({ namespace, name: p.metadata.name, uid: p.metadata.uid! }, readyStatus(false)),
    );
    await page.getByLabel('Health').selectOption('unhealthy');
    await eventually(
      '200 unhealthy on the page',
      async () => ((await count.textContent()) === `200 of ${COUNT} Proxies` ? true : undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 50,
      },
    );
    const longest = await page.evaluate<number>('window.__longest');
    console.log(
      `dashboard, ${COUNT} Ready Proxies: the Proxies page showed all ${loadMs} ms after navigation; filters applied in ${timings.join(', ')}; longest task while filtering and taking 200 health changes ${longest.toFixed(0)} ms (load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')})`,
    );
    await page.close();
  });
});
