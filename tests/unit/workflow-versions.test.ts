/**
 * workflows/versions.ts is the record of every patch and kept history: it
 * must say what the fixtures directory and the workflow code hold, or it is
 * a table nobody can trust when the time comes to retire a patch.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { KEPT_HISTORIES, PATCHES } from '../../workflows/versions.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const HISTORIES = join(ROOT, 'tests/fixtures/histories');
const histories = readdirSync(HISTORIES).filter((f) => f.endsWith('.binpb'));

function workflowSources(dir = join(ROOT, 'workflows')): Array<{ path: string; text: string }> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return workflowSources(path);
    return entry.name.endsWith('.ts') ? [{ path, text: readFileSync(path, 'utf8') }] : [];
  });
}

describe('workflows/versions.ts', () => {
  const patches = Object.values(PATCHES);

  it('names each patch id once', () => {
    const ids = patches.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('lists only histories the fixtures directory holds, each a kept (`@`) one', () => {
    for (const patch of patches) {
      for (const file of patch.oldPathHistories) {
        expect(histories, `${patch.id}: ${file}`).toContain(file);
        expect(file).toContain('@');
      }
    }
  });

  it('accounts for every kept history: its suffix is a kept change or a patch id', () => {
    const known = new Set<string>([...KEPT_HISTORIES.map((k) => k.suffix), ...patches.map((p) => p.id)]);
    const kept = histories.filter((f) => f.includes('@'));
    expect(kept.length).toBeGreaterThan(0);
    for (const file of kept) expect(known, file).toContain(file.replace(/\.binpb$/, '').split('@')[1]);
  });

  it("lists a patch's own `@<id>` histories under that patch", () => {
    for (const patch of patches) {
      const own = histories.filter((f) => f.endsWith(`@${patch.id}.binpb`));
      for (const file of own) expect(patch.oldPathHistories, file).toContain(file);
    }
  });

  it('is where every patched()/deprecatePatch() call in workflows/ takes its id from', () => {
    const calls = workflowSources()
      .filter((s) => !s.path.endsWith('versions.ts'))
      .flatMap((s) =>
        [...s.text.matchAll(/\b(?:patched|deprecatePatch)\(([^)]*)\)/g)].map((m) => ({
          path: s.path,
          arg: m[1]!.trim(),
        })),
      );
    expect(calls.length).toBeGreaterThanOrEqual(patches.length);
    for (const call of calls) expect(call.arg, call.path).toMatch(/^PATCHES\.\w+\.id$/);
    // And every patch in the table is called somewhere.
    for (const key of Object.keys(PATCHES)) {
      expect(
        calls.some((c) => c.arg === `PATCHES.${key}.id`),
        key,
      ).toBe(true);
    }
  });
});
