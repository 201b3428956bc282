import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  dashboardExprs,
  metricNamesInExpr,
  metricNamesInRules,
  metricsExposed,
  parseRules,
} from '../helpers/observability.js';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

describe('the metric-name reader the examples are checked with', () => {
  it('finds metric names, not functions, keywords, labels, ranges or Grafana variables', () => {
    expect(
      metricNamesInExpr(
        'histogram_quantile(0.95, sum by (le, provider) (rate(egress_provider_request_duration_seconds_bucket{result=~"ok|transient"}[$__rate_interval]))) > 1e3',
      ),
    ).toEqual(['egress_provider_request_duration_seconds_bucket']);
    expect(metricNamesInExpr('a_total / on (job) group_left b_info unless c offset 5m')).toEqual([
      'a_total',
      'b_info',
      'c',
    ]);
  });

  it('reads families and histogram series from exposition text', () => {
    const names = metricsExposed(['# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 0\nplain 1\n']);
    expect([...names].sort()).toEqual(['h', 'h_bucket', 'h_count', 'h_sum', 'plain']);
  });

  it('rejects a malformed rule file, naming what is wrong', () => {
    expect(() => parseRules('groups: []')).toThrow('no groups');
    expect(() => parseRules('groups:\n  - name: g\n    rules:\n      - alert: A\n')).toThrow('A: no expr');
    expect(() =>
      parseRules('groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: x\n        for: soon\n'),
    ).toThrow('bad for soon');
  });
});

describe('infra/observability examples', () => {
  it('the alert rules parse, each with a severity and a summary', () => {
    const rules = parseRules(read('infra/observability/prometheus-rules.yaml'));
    expect(rules.length).toBeGreaterThanOrEqual(10);
    for (const rule of rules) {
      expect(rule.alert).toMatch(/^Egress[A-Za-z]+$/);
      expect(rule.labels?.severity).toMatch(/^(critical|warning|info)$/);
      expect(rule.annotations?.summary).toBeTruthy();
    }
    expect(metricNamesInRules(read('infra/observability/prometheus-rules.yaml'))).toContain(
      'proxy_operator_provider_requests_total',
    );
  });

  it('the dashboard is Grafana JSON whose panels each query Prometheus through the datasource variable', () => {
    const dashboard = JSON.parse(read('infra/observability/grafana-dashboard.json')) as {
      uid: string;
      panels: Array<{ type: string; targets?: Array<{ expr: string; datasource: { uid: string } }> }>;
    };
    expect(dashboard.uid).toBe('egress-proxies');
    const graphs = dashboard.panels.filter((p) => p.type !== 'row');
    expect(graphs.length).toBeGreaterThanOrEqual(16);
    for (const panel of graphs) expect(panel.targets?.[0]?.datasource.uid).toBe('${datasource}');
    expect(dashboardExprs(dashboard)).toHaveLength(graphs.length);
  });
});
