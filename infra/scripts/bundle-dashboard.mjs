// Bundles the dashboard's browser code (dashboard/client/, with uPlot and
// its stylesheet) into dist/dashboard/assets/ after `tsc` (npm run build;
// the Dockerfile's build stage), where the compiled api finds it: the image
// carries no bundler and bundles nothing at start.
import { mkdirSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { ASSET_NAMES, bundleDashboard } from '../../dist/dashboard/server/assets.js';

const { js, css } = await bundleDashboard(new URL('../../dashboard/client/main.ts', import.meta.url));
mkdirSync('dist/dashboard/assets', { recursive: true });
writeFileSync(`dist/dashboard/assets/${ASSET_NAMES.js}`, js);
writeFileSync(`dist/dashboard/assets/${ASSET_NAMES.css}`, css);
const kib = (n) => `${(n / 1024).toFixed(0)} KiB`;
console.log(
  `dist/dashboard/assets: ${ASSET_NAMES.js} ${kib(js.length)} (${kib(gzipSync(js).length)} gzipped), ${ASSET_NAMES.css} ${kib(css.length)}`,
);
