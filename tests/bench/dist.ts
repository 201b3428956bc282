/**
 * The compiled tree a user runs (`npm run build`, the image's
 * `node dist/cli/entry.js`), for the benches that measure what ships rather
 * than the TypeScript through tsx (whose transform and loader cost every
 * process CPU and memory no user pays).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

/**
 * The path of `file` (e.g. `gateway/server.js`) in dist/, after building it
 * when dist/ is missing or older than a source file: a fresh clone has no
 * dist/, and a user should not be sent off to run another command first.
 */
export function distPath(file: string, log: (line: string) => void = console.log): string {
  const why = distOutOfDate();
  if (why !== undefined) {
    log(`${why}: running \`npm run build\``);
    const built = spawnSync('npm', ['run', 'build', '--silent'], { cwd: REPO, stdio: 'inherit' });
    if (built.status !== 0) throw new Error(`npm run build failed (exit ${built.status ?? built.signal})`);
    const still = distOutOfDate();
    if (still !== undefined) throw new Error(`${still} after npm run build`);
  }
  return join(REPO, 'dist', file);
}

/** Why dist/ cannot be measured as it is (missing, or older than a source file), or undefined. */
export function distOutOfDate(): string | undefined {
  const built = join(REPO, 'dist/build-info.json');
  if (!existsSync(join(REPO, 'dist/cli/entry.js')) || !existsSync(built)) return 'dist/ is missing';
  const builtAt = statSync(built).mtimeMs;
  const newer: string[] = [];
  const walk = (d: string) => {
    if (!existsSync(d)) return;
    if (statSync(d).isFile()) {
      if (statSync(d).mtimeMs > builtAt) newer.push(d.slice(REPO.length));
      return;
    }
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, e.name);
      if (e.isDirectory()) walk(path);
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && statSync(path).mtimeMs > builtAt)
        newer.push(path.slice(REPO.length));
    }
  };
  // What the build compiles: tsconfig.build.json's include, and what those import (a folder dist/ has).
  const { include } = JSON.parse(readFileSync(join(REPO, 'tsconfig.build.json'), 'utf8')) as {
    include: string[];
  };
  const roots = new Set(include.map((pattern) => pattern.replace(/\/\*\*.*$/, '')));
  for (const d of readdirSync(join(REPO, 'dist'), { withFileTypes: true }))
    if (d.isDirectory() && existsSync(join(REPO, d.name))) roots.add(d.name);
  for (const root of roots) walk(join(REPO, root));
  if (newer.length === 0) return undefined;
  return `dist/ is older than ${newer.slice(0, 3).join(', ')}${newer.length > 3 ? ' ...' : ''}`;
}
