/**
 * Reading the example dashboard and alert rules (infra/observability/) for
 * the metric names their queries use, and a scrape for the names it holds,
 * so a test can require every name used to exist in real /metrics output.
 */
import { readFileSync } from 'node:fs';
import type { Registry } from 'prom-client';
import { parse } from 'yaml';

/** Every series name a scrape can answer for: families, and a histogram's _bucket/_sum/_count. */
export function metricsExposed(texts: readonly string[]): Set<string> {
  const names = new Set<string>();
  for (const text of texts) {
    for (const line of text.split('\n')) {
      const type = /^# TYPE (\S+) (\S+)/.exec(line);
      if (type) {
        names.add(type[1]!);
        if (type[2] === 'histogram' || type[2] === 'summary') {
          for (const suffix of ['_bucket', '_sum', '_count']) names.add(`${type[1]}${suffix}`);
        }
        continue;
      }
      const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line);
      if (sample) names.add(sample[1]!);
    }
  }
  return names;
}

const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'and',
  'or',
  'unless',
  'offset',
  'inf',
  'nan',
]);

/**
 * The metric names a PromQL expression selects: identifiers that are not
 * functions, keywords, label names (in matchers or by/without lists),
 * strings, ranges or numbers.
 */
export function metricNamesInExpr(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names: string[] = [];
  const identifier = /[a-zA-Z_:][a-zA-Z0-9_:]*/g;
  for (let m = identifier.exec(stripped); m; m = identifier.exec(stripped)) {
    const name = m[0];
    const after = stripped.slice(m.index + name.length).trimStart();
    if (after.startsWith('(')) continue;
    if (KEYWORDS.has(name.toLowerCase())) continue;
    // Grafana variables ($__rate_interval) and numbers with exponents (1e3) are not names.
    if (stripped[m.index - 1] === '$' || /\d/.test(stripped[m.index - 1] ?? '')) continue;
    names.push(name);
  }
  return names;
}

/** Every PromQL `expr` of the dashboard's panels. */
export function dashboardExprs(dashboard: unknown): string[] {
  const exprs: string[] = [];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node && typeof node === 'object') {
      for (const [key, value] of Object.entries(node)) {
        if (key === 'expr' && typeof value === 'string') exprs.push(value);
        else walk(value);
      }
    }
  };
  walk(dashboard);
  return exprs;
}

export function metricNamesInDashboard(dashboard: unknown): string[] {
  return [...new Set(dashboardExprs(dashboard).flatMap(metricNamesInExpr))];
}

export interface AlertRule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The rules of a Prometheus rule file; throws naming what is malformed. */
export function parseRules(text: string): AlertRule[] {
  const doc = parse(text) as { groups?: Array<{ name?: string; rules?: AlertRule[] }> };
  if (!Array.isArray(doc?.groups) || doc.groups.length === 0) throw new Error('rule file: no groups');
  const rules: AlertRule[] = [];
  for (const [i, group] of doc.groups.entries()) {
    if (!group.name) throw new Error(`rule file: group ${i} has no name`);
    if (!Array.isArray(group.rules) || group.rules.length === 0)
      throw new Error(`rule file: group ${group.name} has no rules`);
    for (const rule of group.rules) {
      if (!rule.alert === !rule.record)
        throw new Error(`rule file: group ${group.name}: a rule needs exactly one of alert or record`);
      if (typeof rule.expr !== 'string' || rule.expr.trim() === '')
        throw new Error(`rule file: ${rule.alert ?? rule.record}: no expr`);
      if (rule.for !== undefined && !/^(\d+(ms|s|m|h|d|w|y))+$/.test(rule.for))
        throw new Error(`rule file: ${rule.alert}: bad for ${rule.for}`);
      rules.push(rule);
    }
  }
  return rules;
}

/** Metric names the rules select (recording rules' own names excluded). */
export function metricNamesInRules(text: string): string[] {
  const rules = parseRules(text);
  const recorded = new Set(rules.flatMap((r) => (r.record ? [r.record] : [])));
  return [...new Set(rules.flatMap((r) => metricNamesInExpr(r.expr)))].filter((n) => !recorded.has(n));
}

export interface MetricFamily {
  type: string;
  /** Label names seen on the family's samples (a histogram's `le` left out). */
  labelNames: Set<string>;
  samples: number;
}

/** Every metric family in Prometheus text scrapes: its TYPE and the label names its samples carry. */
export function metricFamilies(texts: readonly string[]): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  for (const text of texts) {
    for (const line of text.split('\n')) {
      const type = /^# TYPE (\S+) (\S+)/.exec(line);
      if (type) {
        if (!families.has(type[1]!))
          families.set(type[1]!, { type: type[2]!, labelNames: new Set(), samples: 0 });
        continue;
      }
      const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? /.exec(line);
      if (!sample) continue;
      const name = sample[1]!;
      const family =
        families.get(name) ??
        families.get(name.replace(/_(bucket|sum|count)$/, '')) ??
        families.get(name.replace(/_total$/, ''));
      if (!family) continue;
      family.samples++;
      for (const m of (sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) {
        if (m[1] !== 'le') family.labelNames.add(m[1]!);
      }
    }
  }
  return families;
}

export interface SeedMetric {
  name: string;
  type: string;
  labels: string[];
  process: 'worker' | 'api';
}

/** The seed's exported metrics (tests/fixtures/seed-metrics.json). */
export function seedMetrics(): SeedMetric[] {
  const file = new URL('../fixtures/seed-metrics.json', import.meta.url);
  return (JSON.parse(readFileSync(file, 'utf8')) as { metrics: SeedMetric[] }).metrics;
}

/** The value of one series of a metric in a prom-client registry (0 when the series does not exist yet). */
export async function metricValue(
  registry: Registry,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name} in the registry`);
  const { values } = await metric.get();
  const match = values.find((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want));
  return match?.value ?? 0;
}
