/**
 * The list of the seed's metrics that the observability test holds the real
 * processes to (tests/fixtures/seed-metrics.json) is the seed's own: every
 * metric its Go source defines is in the list with the same type and
 * labels, and nothing else is. The seed's source is read where the
 * workplace lays it beside the clone (../shared/seeds); a clone without it
 * skips this check and says so.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { seedMetrics } from '../helpers/observability.js';

const SEED_METRICS_GO = join(ROOT, '../shared/seeds/files/internal/metrics/metrics.go');

interface Defined {
  name: string;
  type: string;
  labels: string[];
}

/** Metric definitions in the seed's metrics.go: the Opts/NewDesc constructors with their label lists. */
function definedInGo(source: string): Defined[] {
  const found: Defined[] = [];
  const vec =
    /prometheus\.New(Histogram|Counter|Gauge)Vec\(prometheus\.\w+Opts\{\s*Name:\s*"([^"]+)"[\s\S]*?\},\s*\[\]string\{([^}]*)\}/g;
  for (const m of source.matchAll(vec)) {
    found.push({ name: m[2]!, type: m[1]!.toLowerCase(), labels: quoted(m[3]!) });
  }
  // Scrape-time collectors are gauges: NewDesc(name, help, labels, nil), labels a literal or a variable.
  const labelVars = new Map<string, string[]>();
  for (const m of source.matchAll(/(\w+)\s*:=\s*\[\]string\{([^}]*)\}/g)) labelVars.set(m[1]!, quoted(m[2]!));
  const desc = /prometheus\.NewDesc\("([^"]+)",\s*"[^"]*",\s*(\[\]string\{[^}]*\}|nil|\w+),/g;
  for (const m of source.matchAll(desc)) {
    const arg = m[2]!;
    const labels =
      arg === 'nil' ? [] : arg.startsWith('[]string') ? quoted(arg) : (labelVars.get(arg) ?? ['?']);
    found.push({ name: m[1]!, type: 'gauge', labels });
  }
  return found;
}

function quoted(list: string): string[] {
  return [...list.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
}

describe('the seed metric list', () => {
  it('holds nine metrics, each with a type and labels', () => {
    const list = seedMetrics();
    expect(list.map((m) => m.name)).toHaveLength(9);
    for (const m of list) {
      expect(m.name).toMatch(/^proxy_operator_/);
      expect(['counter', 'gauge', 'histogram']).toContain(m.type);
      expect(['worker', 'api']).toContain(m.process);
    }
  });

  it.skipIf(!existsSync(SEED_METRICS_GO))('is exactly what the seed’s metrics.go defines', () => {
    const defined = definedInGo(readFileSync(SEED_METRICS_GO, 'utf8'));
    const sort = (xs: Defined[]) =>
      xs
        .map((d) => ({ name: d.name, type: d.type, labels: d.labels }))
        .sort((a, b) => a.name.localeCompare(b.name));
    expect(sort(defined)).toEqual(sort(seedMetrics()));
  });
});
