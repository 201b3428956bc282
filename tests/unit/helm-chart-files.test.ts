/**
 * The Helm chart's generated and hand-kept parts agree: the README's values
 * table and the chart's files/ copies are what `npm run gen:helm` writes
 * (infra/scripts/gen-helm.mjs --check), and values.schema.json types and
 * describes every value and refuses unknown keys at every level. helm
 * itself runs the chart in tests/integration/helm-chart.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SCRIPT = join(ROOT, 'infra/scripts/gen-helm.mjs');
const CHART = join(ROOT, 'infra/helm/egress-proxies');

interface SchemaNode {
  type?: string | string[];
  description?: string;
  properties?: Record<string, SchemaNode>;
  additionalProperties?: boolean | SchemaNode;
  items?: SchemaNode;
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function check(readme?: string) {
  return spawnSync('node', [SCRIPT, '--check', ...(readme ? ['--readme', readme] : [])], {
    encoding: 'utf8',
  });
}

describe('the Helm chart files', () => {
  it("README's values table and the chart's files/ are current (run npm run gen:helm)", () => {
    const result = check();
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('a README whose table is stale is refused, with the command that fixes it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ep-helm-readme-'));
    dirs.push(dir);
    const stale = join(dir, 'README.md');
    writeFileSync(
      stale,
      readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/^\| `worker\.replicas` .*\n/m, ''),
    );
    const result = check(stale);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain(`${stale}'s Helm values table is not the one values.schema.json gives`);
    expect(result.stderr).toContain('run npm run gen:helm');
  });

  it('values.schema.json types and describes every value and closes every object', () => {
    const schema = JSON.parse(readFileSync(join(CHART, 'values.schema.json'), 'utf8')) as SchemaNode;
    const defaults = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;
    const walk = (node: SchemaNode, path: string, values: unknown) => {
      for (const [key, child] of Object.entries(node.properties ?? {})) {
        const here = path ? `${path}.${key}` : key;
        expect(child.type, `${here} has a type`).toBeDefined();
        expect(child.description, `${here} has a description`).toMatch(/\S/);
        if (child.properties) {
          expect(child.additionalProperties, `${here} refuses unknown keys`).toBe(false);
        }
        walk(child, here, (values as Record<string, unknown> | undefined)?.[key]);
      }
      // Every default in values.yaml is a documented value.
      if (node.properties && values && typeof values === 'object' && !Array.isArray(values)) {
        for (const key of Object.keys(values))
          expect(node.properties, `${path || '(top)'}.${key}`).toHaveProperty(key);
      }
    };
    expect(schema.additionalProperties).toBe(false);
    walk(schema, '', defaults);
  });
});
