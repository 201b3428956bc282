// Prints vitest's JSON results as one plain closing line: "N passed, N failed, N skipped".
// With --durations, also writes each file's duration (seconds) to
// tests/harness/file-durations.json, the table the longest-first sequencer
// orders files by (tests/harness/longest-first.ts): run it after a full
// suite on this kind of machine and commit the file.
import { readFileSync, writeFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const results = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const passed = results.numPassedTests ?? 0;
const failed = results.numFailedTests ?? 0;
const skipped = (results.numPendingTests ?? 0) + (results.numTodoTests ?? 0);
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);

if (process.argv.includes('--durations')) {
  // The run's own checkout (the results sit in its .tmp/), which may be another clone.
  const runRoot = resolve(process.argv[2], '../..');
  const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
  const seconds = {};
  for (const file of results.testResults ?? []) {
    if (typeof file.startTime !== 'number' || typeof file.endTime !== 'number') continue;
    seconds[relative(runRoot, file.name)] = Math.round((file.endTime - file.startTime) / 100) / 10;
  }
  const sorted = Object.fromEntries(Object.entries(seconds).sort(([a], [b]) => (a < b ? -1 : 1)));
  const out = resolve(root, 'tests/harness/file-durations.json');
  writeFileSync(
    out,
    JSON.stringify(
      { note: 'written by infra/scripts/summarize-tests.mjs --durations', seconds: sorted },
      null,
      2,
    ) + '\n',
  );
  console.log(`durations of ${Object.keys(sorted).length} files written to ${relative(root, out)}`);
}
