// Bundles the dashboard's browser code (dashboard/client/, with uPlot and
// its stylesheet) into dist/dashboard/assets/ under the current directory
// after `tsc` (npm run build; the Dockerfile's build stage), where the
// compiled api finds it: the image carries no bundler and bundles nothing
// at start. esbuild comes from this repository's devDependencies. Its
// options are the one definition: a source checkout's api bundles with them
// at start (dashboard/server/assets.ts).
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

export const DASHBOARD_ENTRY = fileURLToPath(new URL('../../dashboard/client/main.ts', import.meta.url));

/** The esbuild options of the dashboard's bundle (write: false: the caller writes). */
export const DASHBOARD_BUILD_OPTIONS = {
  entryPoints: [DASHBOARD_ENTRY],
  bundle: true,
  format: 'esm',
  minify: true,
  target: ['es2022'],
  outdir: 'out',
  entryNames: 'app',
  write: false,
  logLevel: 'silent',
  legalComments: 'none',
};

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const result = await build(DASHBOARD_BUILD_OPTIONS);
  const js = result.outputFiles.find((f) => f.path.endsWith('.js'));
  const css = result.outputFiles.find((f) => f.path.endsWith('.css'));
  mkdirSync('dist/dashboard/assets', { recursive: true });
  writeFileSync('dist/dashboard/assets/app.js', js.contents);
  writeFileSync('dist/dashboard/assets/app.css', css.contents);
  const kib = (n) => `${(n / 1024).toFixed(0)} KiB`;
  console.log(
    `dist/dashboard/assets: app.js ${kib(js.contents.length)} (${kib(gzipSync(js.contents).length)} gzipped), app.css ${kib(css.contents.length)}`,
  );
}
