/**
 * Determinism guard: every recorded Proxy workflow history in
 * tests/fixtures/histories replays against the current workflow code. These
 * workflows live for months, so a change to workflow logic that would break
 * a running history fails here first; gate such changes with `patched()`
 * (and record a new history for the new path). The first release's patches
 * are being retired (deprecatePatch); histories are recorded by the
 * `maybeRecord` hooks in the integration tests (docs/architecture.md,
 * Versioning).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Resource } from '@opentelemetry/resources';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OpenTelemetryPlugin } from '@temporalio/interceptors-opentelemetry';
import { fileURLToPath } from 'node:url';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { bundleWorkflows } from '../../cli/worker.js';
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

describe('and with tracing on (the OpenTelemetry workflow interceptors in the bundle)', () => {
  // What a worker with OTEL_EXPORTER_OTLP_ENDPOINT set runs: the plugin's
  // workflow interceptors bundled in, its span sink installed.
  const interceptors = createRequire(import.meta.url).resolve(
    '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors',
  );
  const bundle = bundleWorkflows([interceptors]);
  const plugin = new OpenTelemetryPlugin({
    resource: new Resource({ 'service.name': 'replay' }),
    spanProcessor: new SimpleSpanProcessor(new InMemorySpanExporter()),
  });

  it('bundles the interceptors', async () => {
    expect((await bundle).code).toContain('OpenTelemetryInboundInterceptor');
  }, 300_000);

  it.each(files)(
    '%s',
    async (file) => {
      const history = temporal.api.history.v1.History.decode(readFileSync(DIR + file));
      await Worker.runReplayHistory(
        { workflowBundle: await bundle, plugins: [plugin] },
        history,
        `replay-otel-${file}`,
      );
    },
    300_000,
  );
});
