/**
 * The page and its two assets. The browser code (dashboard/client/) and
 * the npm packages it uses are bundled by esbuild: at build time into
 * dist/dashboard/assets/ (`npm run build`, so the image needs no bundler),
 * or, run from a source checkout, once when the api starts. Nothing is
 * fetched at run time, by the server or by the page.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { BuildOptions } from 'esbuild';

export interface DashboardAssets {
  html: string;
  js: Buffer;
  css: Buffer;
  /** Content hash, in the assets' URLs so a new build is never served from a stale cache. */
  version: string;
}

export const ASSET_NAMES = { js: 'app.js', css: 'app.css' } as const;

/**
 * Bundles dashboard/client/ with esbuild, with the build script's options
 * (infra/scripts/bundle-dashboard.mjs: one definition). Both are
 * devDependencies' and the source tree's: a source checkout and the build
 * only; the image serves the bundle the build wrote.
 */
export async function bundleDashboard(): Promise<{ js: Buffer; css: Buffer }> {
  const esbuild = await import('esbuild');
  const script = new URL('../../infra/scripts/bundle-dashboard.mjs', import.meta.url);
  const { DASHBOARD_BUILD_OPTIONS } = (await import(script.href)) as {
    DASHBOARD_BUILD_OPTIONS: BuildOptions & { write: false };
  };
  const result = await esbuild.build(DASHBOARD_BUILD_OPTIONS);
  const js = result.outputFiles.find((f) => f.path.endsWith('.js'));
  const css = result.outputFiles.find((f) => f.path.endsWith('.css'));
  if (!js || !css) throw new Error('the dashboard bundle lacks its JavaScript or its stylesheet');
  return { js: Buffer.from(js.contents), css: Buffer.from(css.contents) };
}

/** The prebuilt bundle beside the compiled server, else one made now from the source. */
export async function loadDashboardAssets(): Promise<DashboardAssets> {
  const prebuilt = new URL('../assets/', import.meta.url);
  const js = new URL(ASSET_NAMES.js, prebuilt);
  const css = new URL(ASSET_NAMES.css, prebuilt);
  const bundle =
    existsSync(fileURLToPath(js)) && existsSync(fileURLToPath(css))
      ? { js: readFileSync(js), css: readFileSync(css) }
      : await bundleDashboard();
  const version = createHash('sha256').update(bundle.js).update(bundle.css).digest('hex').slice(0, 12);
  return { ...bundle, version, html: page(version) };
}

function page(version: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>egress-proxies</title>
<link rel="stylesheet" href="/ui/assets/${ASSET_NAMES.css}?v=${version}">
<script type="module" src="/ui/assets/${ASSET_NAMES.js}?v=${version}"></script>
</head>
<body>
<noscript>The dashboard needs JavaScript; the same figures are on the lease API's /v1/proxies and /metrics.</noscript>
</body>
</html>
`;
}
