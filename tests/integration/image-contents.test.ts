/**
 * What the image holds, run for real: the same tree the Dockerfile builds
 * (tsc into dist/ with the commit baked and the workflows bundled, then a production-only install of
 * package.json + package-lock.json) in a temporary directory with no
 * sources and no dev dependencies; worker, bridge and api started from its
 * bin/egress-proxies.js run a Proxy through its life. A file the image
 * would lack (a workflow module, a runtime dependency filed under
 * devDependencies) fails here; so does one it must not hold (local-servers/,
 * `dev`'s servers).
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import { LEASE_API_LISTENING, ROOT, startCli, type CliProcess, testServerArgs } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  proxyClient,
  deleteProxy,
  isProvisioned,
  kubeConfig,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { uniqueTaskQueue, freshTemporalNamespace } from '../helpers/temporal.js';
import { imageEnvironment } from '../helpers/image-env.js';

const run = promisify(execFile);

describe('the image contents: the built tree with production dependencies only', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-image-'));
  const app = join(dir, 'app');
  const children: CliProcess[] = [];

  beforeAll(async () => {
    // The Dockerfile's build stage: tsc into dist/, then the commit baked.
    await run(
      join(ROOT, 'node_modules/.bin/tsc'),
      ['-p', 'tsconfig.build.json', '--outDir', join(app, 'dist')],
      {
        cwd: ROOT,
      },
    );
    await run(process.execPath, [join(ROOT, 'infra/scripts/write-build-info.mjs')], {
      cwd: app,
      env: { ...process.env, EGRESS_PROXIES_COMMIT: 'feedc0de' },
    });
    // Its final stage: package.json, the lock, bin/, and `npm ci --omit=dev`.
    for (const f of ['package.json', 'package-lock.json', 'bin'])
      cpSync(join(ROOT, f), join(app, f), { recursive: true });
    await run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline'], {
      cwd: app,
      timeout: 300_000,
    });
    // The build stage's last steps: the workflow bundle the worker loads instead of running
    // webpack, and the dashboard's bundle the api serves (the image has no bundler).
    await run(process.execPath, [join(ROOT, 'infra/scripts/bundle-workflows.mjs')], {
      cwd: app,
      timeout: 300_000,
    });
    await run(process.execPath, [join(ROOT, 'infra/scripts/bundle-dashboard.mjs')], {
      cwd: app,
      timeout: 120_000,
    });
  }, 720_000);
  afterAll(async () => {
    for (const c of children) await c.stop(30_000).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  const start = (args: string[], env: Record<string, string> = {}) => {
    // No tsx, no sources: the image's entrypoint, from a directory holding only the tree.
    const child = startCli(args, {
      entry: [join(app, 'bin/egress-proxies.js')],
      cwd: app,
      // The image's ENV (Dockerfile), then what this test sets.
      env: { ...imageEnvironment(), HOME: dir, DISCOVERY_TOKEN: 'image-test', ...env },
    });
    children.push(child);
    return child;
  };

  it('holds no sources and no dev dependencies, and names its version and commit', async () => {
    expect(existsSync(join(app, 'cli'))).toBe(false);
    expect(existsSync(join(app, 'node_modules/typescript'))).toBe(false);
    expect(existsSync(join(app, 'node_modules/tsx'))).toBe(false);
    const version = start(['version']);
    expect(await version.exited(60_000)).toBe(0);
    expect(version.output()).toMatch(/^egress-proxies 0\.1\.0 \(commit feedc0de, node v\d+/);
  });

  it('holds no local servers: `dev` says on one line that it runs from a source checkout', async () => {
    const localServers = readdirSync(join(app, 'dist'), { recursive: true })
      .map(String)
      .filter((path) => path.includes('local-servers'));
    expect(localServers).toEqual([]);
    const stateDir = join(dir, 'dev-state');
    const dev = start(['dev', '--state-dir', stateDir]);
    expect(await dev.exited(60_000), dev.output()).toBe(1);
    expect(dev.stderr()).toBe(
      'egress-proxies: egress-proxies dev runs from a source checkout (make dev); this build has no local servers\n',
    );
    // Refused before anything started.
    expect(existsSync(stateDir)).toBe(false);
  });

  it('runs worker, bridge and api through a Proxy’s life', async () => {
    const providers = join(dir, 'providers.yaml');
    writeFileSync(
      providers,
      `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${privateLoopbackRange()} }\n`,
    );
    const taskQueue = uniqueTaskQueue('image');
    const temporalNamespace = await freshTemporalNamespace('image');
    const kc = kubeConfig();
    const objects = proxyClient(kc);
    const namespace = await createNamespace(kc, 'image');
    // The flags each command offers (a command refuses the flags of parts it does not run).
    const common = (command: string) => [
      ...testServerArgs(temporalNamespace),
      ...(command === 'api' ? [] : ['--task-queue', taskQueue]),
      ...(command === 'worker' ? ['--installation', 'image-test'] : []),
      // Only this test's namespace: other tests' Proxies on the shared apiserver are theirs.
      '--watch-namespaces',
      namespace,
    ];
    const worker = start([
      'worker',
      ...common('worker'),
      '--providers-config',
      providers,
      '--metrics-addr',
      '127.0.0.1:0',
    ]);
    const bridge = start(['bridge', ...common('bridge')]);
    const api = start(['api', ...common('api'), '--discovery-addr', '127.0.0.1:0']);
    const base = (
      await worker.waitFor(/"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*health and metrics listening/, 120_000)
    )[1]!;
    await worker.waitFor(/worker started/, 180_000);
    // It loaded the build's bundle rather than bundling at start.
    expect(worker.output()).toMatch(/"workflowBundle":"[^"]*\/dist\/workflow-bundle\.js"[^\n]*workflow code/);
    await bridge.waitFor(/bridge started/, 120_000);
    const apiUrl = (await api.waitFor(LEASE_API_LISTENING, 120_000))[1]!;
    expect(await (await fetch(`${base}/metrics`)).text()).toContain('commit="feedc0de"');
    // The dashboard from the build's bundle: the page names its script, which is served.
    const page = await (await fetch(`${apiUrl}/ui`)).text();
    const script = /src="(\/ui\/assets\/app\.js\?v=[0-9a-f]+)"/.exec(page)?.[1];
    expect(script, page).toBeDefined();
    const asset = await fetch(`${apiUrl}${script!}`);
    expect(asset.status).toBe(200);
    expect((await asset.arrayBuffer()).byteLength).toBeGreaterThan(10_000);

    await createProxy(objects, namespace, 'from-image', { mode: 'Managed', provider: 'local', port: 18401 });
    const running = await waitForProxy(objects, namespace, 'from-image', 'Running', isProvisioned);
    expect(running.status?.ip).toBeTruthy();
    await deleteProxy(objects, namespace, 'from-image');
    await waitForProxyGone(objects, namespace, 'from-image');
    for (const child of [worker, bridge, api]) expect(await child.stop(60_000), child.output()).toBe(0);
  }, 400_000);
});
