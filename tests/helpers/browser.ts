/**
 * A real browser for the dashboard's tests: Debian's Chromium headless
 * shell (installed by infra/scripts/install-chromium.sh, which prints its
 * path), driven by playwright-core (no browser download).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { ROOT } from './cli.js';

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
