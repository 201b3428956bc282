/**
 * A real browser for the dashboard's tests: Debian's Chromium headless
 * shell (installed by infra/scripts/install-chromium.sh, which prints its
 * path), driven by playwright-core (no browser download).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

/** The repository (this helper is also used by benches, outside vitest). */
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export function chromiumPath(): string {
  return execFileSync('bash', [join(ROOT, 'infra/scripts/install-chromium.sh')], { encoding: 'utf8' }).trim();
}

export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    // As root in a container there is no user namespace for Chromium's sandbox.
    args: ['--no-sandbox'],
  });
}

/**
 * The cells of a table's body rows as the page shows them now. The page's
 * code is a string: the tests are type-checked without the DOM's types.
 */
export function tableCells(page: Page, label: string): Promise<string[][]> {
  return page.evaluate<string[][]>(
    `[...document.querySelectorAll(${JSON.stringify(`table[aria-label="${label}"] tbody tr`)})].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? ''))`,
  );
}
