import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './tests/harness/longest-first.js';

// Three layers, one command: `unit` needs no server; `integration` gets one
// Temporal dev server and one kube-apiserver for the whole run from the
// global setup (tests/harness/global-setup.ts).
// No test may find Google credentials by accident or probe a GCE metadata
// server (169.254.169.254): nothing leaves the machine. A test that wants a
// token source starts one on the loopback (tests/helpers/gcp-token-source.ts).
// Child processes (the CLI tests) inherit it. The same for AWS: the SDK never
// asks an instance metadata service for a role (the aws tests give static keys
// and point every client at moto on the loopback).
const env = { METADATA_SERVER_DETECTION: 'none', AWS_EC2_METADATA_DISABLED: 'true' };

export default defineConfig({
  test: {
    // Longest files first, from a committed table of durations: on two workers
    // a long file started last runs alone at the end.
    sequence: { sequencer: LongestFirstSequencer },
    projects: [
      {
        test: {
          name: 'unit',
          env,
          include: ['tests/unit/**/*.test.ts'],
          sequence: { groupOrder: 0 },
          // Pure logic: one module graph for all files (10 s instead of 27 s
          // here, most of it imports).
          isolate: false,
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: 'integration',
          env,
          include: ['tests/integration/**/*.test.ts'],
          sequence: { groupOrder: 1 },
          globalSetup: ['tests/harness/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
          // Three on two cores: the integration tests wait on boots, timers and
          // servers a good part of the time. The two failures that sent it back to
          // two workers are fixed at their cause (a bound that a GC undid; a
          // ramp whose clients spent their time between sessions); four broke
          // one even on a quiet machine (docs/architecture.md, the suite's own time).
          maxWorkers: 3,
          fileParallelism: true,
        },
      },
    ],
  },
});
