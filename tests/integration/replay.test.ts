/**
 * Determinism guard: every recorded Proxy workflow history in
 * tests/fixtures/histories replays against the current workflow code. These
 * workflows live for months, so a change to workflow logic that would break
 * a running history fails here first (checked: an activity call added to the
 * workflow fails every replay with TMPRL1100). Gate such changes with
 * `patched()` and record a history of the new path.
 *
 * Each history is written by a named `maybeRecord(name, history)` hook at
 * the end of the integration test of its scenario; `npm run
 * record:histories` runs those tests and re-records them all. Before
 * re-recording on a new patch, keep the old path's bytes as
 * `<name>@<patch-id>.binpb` until the patch is retired
 * (docs/architecture.md, Versioning).
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
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const files = readdirSync(DIR).filter((f) => f.endsWith('.binpb'));

describe('recorded Proxy workflow histories replay on the current code', () => {
  it('has histories to replay', () => {
    expect(files.length).toBeGreaterThan(0);
  });

  it('each hook in the tests `npm run record:histories` runs has its history, and each history its hook', () => {
    const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as {
      scripts: Record<string, string>;
    };
    const script = pkg.scripts['record:histories'] ?? '';
    const tests = script.split(/\s+/).filter((word) => word.endsWith('.test.ts'));
    const hooks = tests.flatMap((test) =>
      [...readFileSync(ROOT + test, 'utf8').matchAll(/maybeRecord\(\s*'([^']+)'/g)].map((m) => m[1]),
    );
    expect(new Set(hooks).size).toBe(hooks.length);
    // `<hook>@<patch-id>.binpb`: a history of a patch's old path, kept as recorded.
    const names = files.map((f) => f.replace(/\.binpb$/, ''));
    expect(names.filter((n) => !n.includes('@')).sort()).toEqual([...hooks].sort());
    for (const kept of names.filter((n) => n.includes('@'))) expect(hooks).toContain(kept.split('@')[0]);
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
