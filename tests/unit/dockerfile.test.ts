import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
// Folders that are not product code compiled into the image.
const NOT_PRODUCT = new Set([
  'tests',
  'infra',
  'docs',
  'bin',
  'dist',
  'node_modules',
  '.tmp',
  'local-servers',
]);

describe('Dockerfile', () => {
  it('copies every product folder into its build stage (a folder left out fails the image build)', () => {
    const dockerfile = readFileSync(`${ROOT}Dockerfile`, 'utf8');
    const product = readdirSync(ROOT, { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.name.startsWith('.') && !NOT_PRODUCT.has(d.name))
      .filter((d) =>
        readdirSync(`${ROOT}${d.name}`, { recursive: true }).some((f) => String(f).endsWith('.ts')),
      )
      .map((d) => d.name);
    expect(product).toContain('prober');
    const missing = product.filter((dir) => !new RegExp(`^COPY ${dir} ${dir}$`, 'm').test(dockerfile));
    expect(missing).toEqual([]);
  });

  it('copies no local servers (dev runs from a source checkout)', () => {
    const dockerfile = readFileSync(`${ROOT}Dockerfile`, 'utf8');
    expect(dockerfile.split('\n').filter((l) => /^COPY\b.*local-servers/.test(l))).toEqual([]);
  });
});
