/**
 * Determinism guard: every recorded Proxy workflow history in
 * tests/fixtures/histories replays against the current workflow code. These
 * workflows live for months, so a change to workflow logic that would break
 * a running history fails here first; gate such changes with `patched()`
 * (and record a new history for the new path).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { workflowBundle } from '../helpers/temporal.js';

const DIR = fileURLToPath(new URL('../fixtures/histories/', import.meta.url));
const files = readdirSync(DIR).filter((f) => f.endsWith('.binpb'));

describe('recorded Proxy workflow histories replay on the current code', () => {
  it('has histories to replay', () => {
    expect(files.length).toBeGreaterThan(0);
  });

  it.each(files)('%s', async (file) => {
    // Binary protobuf: the exact bytes the server returned, no JSON dialect to drift.
    const history = temporal.api.history.v1.History.decode(readFileSync(DIR + file));
    expect(history.events?.length).toBeGreaterThan(20);
    await Worker.runReplayHistory({ workflowBundle: workflowBundle() }, history, `replay-${file}`);
  });
});
