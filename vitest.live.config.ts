import { defineConfig } from 'vitest/config';

// Tests against real cloud APIs, run by hand only (`npm run test:gcp-live`):
// not a project of vitest.config.ts, so `make test` never runs them. They use
// the machine's real credentials (no METADATA_SERVER_DETECTION override).
export default defineConfig({
  test: {
    include: ['tests/live/**/*.test.ts'],
    testTimeout: 15 * 60_000,
    hookTimeout: 15 * 60_000,
    fileParallelism: false,
  },
});
