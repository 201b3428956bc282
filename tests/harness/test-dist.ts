/**
 * The CLI as the tests run it: the sources compiled to JavaScript once per
 * run, laid out as `npm run build` lays out dist/ (with the workflow bundle
 * beside it), so every `egress-proxies` child process starts the way the
 * image starts one. Through tsx each start compiled the sources again and a
 * worker ran webpack on the workflows: about 2.5 s of CPU per worker process
 * more than this (1.3 s), and the suite starts well over a hundred of them on
 * two cores.
 *
 * esbuild transforms file by file (no bundling), as tsx does, so what runs is
 * the same module graph; tsc still type-checks everything in `make test`.
 */
import { mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { build } from 'esbuild';
import { ASSET_NAMES, bundleDashboard } from '../../dashboard/server/assets.js';

/**
 * The folders `tsconfig.build.json` compiles, and what they import; and
 * local-servers/, which the build leaves out, so `dev` runs from this tree
 * as it does from a checkout.
 */
const SOURCE_DIRS = [
  'activities',
  'api',
  'cli',
  'forwarding',
  'tenants',
  'credentials',
  // The dashboard's server; its browser code (dashboard/client) is bundled below, as the build does.
  'dashboard/server',
  'gateway',
  'k8s-bridge',
  'kube',
  'local-servers',
  'prober',
  'providers',
  'resources',
  'tracing',
  'workflows',
];

function sources(root: string, dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(root, path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts') ? [path] : [];
  });
}

/**
 * Compiles the CLI's sources under `outDir` (inside the repository, so
 * node_modules resolves as it does for dist/), writes the workflow bundle
 * next to them and links what the code reads relative to itself (infra/).
 * Returns the entry point to run with `node`.
 */
export async function buildTestDist(
  root: string,
  outDir: string,
  workflowBundleCode: string,
): Promise<string> {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const entryPoints = SOURCE_DIRS.flatMap((dir) => sources(root, dir));
  await build({
    absWorkingDir: root,
    entryPoints,
    outdir: outDir,
    outbase: root,
    bundle: false,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    tsconfig: join(root, 'tsconfig.json'),
    logLevel: 'warning',
  });
  writeFileSync(join(outDir, 'workflow-bundle.js'), workflowBundleCode);
  // Where the compiled api finds the dashboard's bundle (dist/dashboard/assets after `npm run build`).
  const dashboard = await bundleDashboard();
  mkdirSync(join(outDir, 'dashboard', 'assets'), { recursive: true });
  writeFileSync(join(outDir, 'dashboard', 'assets', ASSET_NAMES.js), dashboard.js);
  writeFileSync(join(outDir, 'dashboard', 'assets', ASSET_NAMES.css), dashboard.css);
  // infra/scripts and infra/k8s/crds are found relative to the modules.
  symlinkSync(relative(outDir, join(root, 'infra')), join(outDir, 'infra'));
  return join(outDir, 'cli', 'entry.js');
}
