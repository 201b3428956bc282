/**
 * What an open dashboard costs the api process (issue 52): its CPU with
 * one page open against none, while 1,000 Ready Proxies change health.
 *
 *   npm run bench:dashboard -- [--proxies 1000] [--flips-per-second 50] [--window-seconds 20] [--rounds 3]
 *
 * Starts its own Temporal dev server and kube-apiserver (with etcd), makes
 * N Ready External Proxies (status written directly, as the workflows
 * would), and runs the real `api` (`--no-prober`, through tsx) watching
 * their namespace. A driver flips Proxies' health by status writes at a
 * steady rate for the whole run. Rounds alternate: a window with no page
 * open, then a window with one Chromium page on the Proxies table (opened
 * before the window, so its first load is not counted); the api's CPU
 * (user + system, /proc) per window. Prints each round and the medians,
 * the ratio, and the load average.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { createProxyClient } from '../../kube/proxies.js';
import { startForwardProxy } from '../../providers/local/forward-proxy.js';
import { launchBrowser } from '../helpers/browser.js';
import { applyReadyFleet, readyStatus } from '../helpers/ready-fleet.js';
import { CLOCK_TICKS_PER_SECOND, readProc } from './proc.js';

const { values } = parseArgs({
  options: {
    proxies: { type: 'string', default: '1000' },
    'flips-per-second': { type: 'string', default: '50' },
    'window-seconds': { type: 'string', default: '20' },
    rounds: { type: 'string', default: '3' },
  },
});
const N = Number(values.proxies);
const FLIPS = Number(values['flips-per-second']);
const WINDOW_S = Number(values['window-seconds']);
const ROUNDS = Number(values.rounds);
const ROOT = new URL('../../', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const dir = mkdtempSync(join(tmpdir(), 'ep-bench-dashboard-'));
const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
const [temporal, kube] = await Promise.all([
  startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
  startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
]);
const kc = new KubeConfig();
kc.loadFromFile(kube.kubeconfigPath);
await installCrds(kc);
const namespace = 'bench-dashboard';
await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
const upstream = await startForwardProxy({ host: '127.0.0.1', port: 0 });
const proxies = createProxyClient(kc);
const fleet = await applyReadyFleet(proxies, namespace, N, upstream.port);
console.log(`${N} Ready External Proxies applied`);

const api = spawn(
  process.execPath,
  [
    '--import',
    'tsx',
    join(ROOT, 'cli/entry.ts'),
    'api',
    '--discovery-addr',
    '127.0.0.1:0',
    '--kubeconfig',
    kube.kubeconfigPath,
    '--temporal-address',
    temporal.address,
    '--watch-namespaces',
    namespace,
    '--no-prober',
  ],
  { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] },
);
let output = '';
api.stdout.on('data', (d: Buffer) => (output += d.toString()));
api.stderr.on('data', (d: Buffer) => (output += d.toString()));
let apiUrl: string | undefined;
for (let i = 0; i < 600 && !apiUrl; i++) {
  apiUrl = /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(output)?.[1];
  if (!apiUrl) await sleep(100);
}
if (!apiUrl) {
  throw new Error(`the api did not say where it listens:\n${output.slice(-2000)}`);
}

// The churn: FLIPS status writes a second, round the fleet, each one's health the opposite of its last.
let stop = false;
let flips = 0;
const healthy = new Map(fleet.map((p) => [p.metadata.name, true]));
const churn = (async () => {
  let i = 0;
  while (!stop) {
    const started = Date.now();
    await Promise.all(
      Array.from({ length: FLIPS }, async () => {
        const p = fleet[i++ % fleet.length]!;
        const next = !healthy.get(p.metadata.name);
        healthy.set(p.metadata.name, next);
        await proxies.writeStatus(
          { namespace, name: p.metadata.name, uid: p.metadata.uid! },
          readyStatus(next),
        );
        flips++;
      }),
    );
    await sleep(Math.max(0, 1000 - (Date.now() - started)));
  }
})();

const cpuSeconds = async (): Promise<number> => {
  const before = readProc(api.pid!)!.cpuTicks;
  await sleep(WINDOW_S * 1000);
  return (readProc(api.pid!)!.cpuTicks - before) / CLOCK_TICKS_PER_SECOND;
};

const browser = await launchBrowser();
const none: number[] = [];
const one: number[] = [];
await sleep(5_000);
for (let r = 1; r <= ROUNDS; r++) {
  const flipsBefore = flips;
  none.push(await cpuSeconds());
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(`${apiUrl}/ui#/proxies`);
  await page.getByText(`${N} of ${N} Proxies`).waitFor({ timeout: 60_000 });
  one.push(await cpuSeconds());
  await page.close();
  console.log(
    `round ${r}: api CPU ${none.at(-1)!.toFixed(2)} s with no page, ${one.at(-1)!.toFixed(2)} s with one page open, per ${WINDOW_S} s window; ${((flips - flipsBefore) / (2 * WINDOW_S)).toFixed(0)} health changes/s; load ${load()}`,
  );
}
stop = true;
await churn;
await browser.close();
const a = median(none);
const b = median(one);
console.log(
  `\napi CPU, ${N} Proxies changing health at ${FLIPS}/s: no page ${((a / WINDOW_S) * 100).toFixed(1)} % of a core, one page open ${((b / WINDOW_S) * 100).toFixed(1)} % (median of ${ROUNDS} rounds of ${WINDOW_S} s; ranges ${Math.min(...none).toFixed(2)}–${Math.max(...none).toFixed(2)} s and ${Math.min(...one).toFixed(2)}–${Math.max(...one).toFixed(2)} s); one page costs ${(b / a).toFixed(2)}x; load ${load()}`,
);
api.kill('SIGTERM');
await new Promise((r) => api.once('exit', r));
await upstream.close();
await Promise.allSettled([temporal.stop(), kube.stop()]);
rmSync(dir, { recursive: true, force: true });
