/**
 * Runs the longest test files first. On two workers the suite's wall time is
 * set by how the files pack: a six-minute file started last runs alone at
 * the end while the other worker idles (a clean clone has no vitest cache,
 * so vitest's own order is by file size). Durations come from
 * tests/harness/file-durations.json, written from a full run by
 * `node infra/scripts/summarize-tests.mjs .tmp/vitest-results.json --durations`;
 * a file it does not know yet counts as a long one, so a new end-to-end test
 * is not left for last. Stale figures only cost packing, never a result.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Seconds assumed for a file missing from the table. */
const UNKNOWN_FILE_SECONDS = 60;

function loadDurations(): Record<string, number> {
  try {
    const parsed = JSON.parse(readFileSync(new URL('./file-durations.json', import.meta.url), 'utf8')) as {
      seconds?: Record<string, number>;
    };
    return parsed.seconds ?? {};
  } catch {
    // No table: vitest's own order.
    return {};
  }
}

export default class LongestFirstSequencer extends BaseSequencer {
  private readonly seconds = loadDurations();

  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const base = await super.sort(files);
    const position = new Map(base.map((spec, i) => [spec, i]));
    const root = this.ctx.config.root;
    const duration = (spec: TestSpecification) =>
      this.seconds[relative(root, spec.moduleId)] ?? UNKNOWN_FILE_SECONDS;
    return [...base].sort(
      (a, b) =>
        // vitest's grouping (unit before integration) stays as it is.
        a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder ||
        (a.project.name < b.project.name ? -1 : a.project.name > b.project.name ? 1 : 0) ||
        duration(b) - duration(a) ||
        position.get(a)! - position.get(b)!,
    );
  }
}
