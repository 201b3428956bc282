/**
 * The example alert rules checked by Prometheus's own tool: `promtool check
 * rules` (the parser Prometheus loads them with: PromQL, durations,
 * templates) and `promtool test rules` (infra/observability/
 * prometheus-rules.test.yaml: series in, which alerts fire when, with what
 * labels and summary). promtool is built from the Go module proxy by
 * infra/scripts/build-promtool.sh (cached; make test builds it first).
 * That each metric a rule names exists on the real processes is
 * observability.test.ts's part.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInfraScript } from '../../local-servers/tools.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const RULES = join(ROOT, 'infra/observability/prometheus-rules.yaml');
const RULE_TESTS = join(ROOT, 'infra/observability/prometheus-rules.test.yaml');

/** promtool's exit code and everything it printed. */
async function promtool(bin: string, args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(bin, args, { timeout: 60_000 });
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, output: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describe('infra/observability alert rules, by promtool', () => {
  let bin: string;
  let scratch: string;

  beforeAll(async () => {
    bin = await runInfraScript('build-promtool.sh', { stderr: 'capture' });
    scratch = mkdtempSync(join(tmpdir(), 'ep-promtool-'));
  }, 1_800_000);
  afterAll(() => {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('check rules: every rule parses', async () => {
    const rules = (readFileSync(RULES, 'utf8').match(/^\s+- alert: /gm) ?? []).length;
    expect(rules).toBeGreaterThanOrEqual(10);
    const { code, output } = await promtool(bin, ['check', 'rules', RULES]);
    expect(output).toContain(`SUCCESS: ${rules} rules found`);
    expect(code).toBe(0);
  });

  it('check rules refuses a broken expression, naming the rule', async () => {
    const broken = join(scratch, 'broken.yaml');
    writeFileSync(
      broken,
      readFileSync(RULES, 'utf8').replace(
        'expr: egress_bridge_workqueue_depth > 100',
        'expr: sum(rate(egress_bridge_workqueue_depth[5m]) > 100',
      ),
    );
    const { code, output } = await promtool(bin, ['check', 'rules', broken]);
    expect(code).not.toBe(0);
    expect(output).toMatch(/EgressBridgeBacklog|unclosed left parenthesis/);
  });

  it('test rules: the alerts fire on the series they are for, and only then', async () => {
    const { code, output } = await promtool(bin, ['test', 'rules', RULE_TESTS]);
    expect(output).toContain('SUCCESS');
    expect(code).toBe(0);
  });

  it('test rules fails when an expectation is wrong (the tester can fail)', async () => {
    copyFileSync(RULES, join(scratch, 'prometheus-rules.yaml'));
    const wrong = join(scratch, 'wrong.test.yaml');
    writeFileSync(
      wrong,
      readFileSync(RULE_TESTS, 'utf8').replace(
        "summary: '3 Proxies are Unhealthy or Failed'",
        "summary: '2 Proxies are Unhealthy or Failed'",
      ),
    );
    const { code, output } = await promtool(bin, ['test', 'rules', wrong]);
    expect(code).not.toBe(0);
    expect(output).toContain('EgressProxiesNotReady');
  });
});
