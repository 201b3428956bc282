/**
 * Prices in the providers config (issue 53): a bad price is refused at load
 * naming its field, an absent one stays unknown (never zero), and the
 * lookups pick the machine type's and the market's price.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  loadProvidersConfig,
  parseProvidersConfig,
  priceBookOf,
  ProvidersConfigError,
} from '../../providers/config.js';
import { instanceHourPrice, perGiBPrice, perSessionPrice } from '../../providers/prices.js';

function issuesOf(yaml: string): string[] {
  try {
    parseProvidersConfig(yaml, 'prices.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ProvidersConfigError);
    return (err as ProvidersConfigError).issues;
  }
  throw new Error('expected the config to be rejected');
}

const local = (prices: string, head = 'currency: USD\n') =>
  `${head}providers:\n  - name: cheap\n    type: local\n    prices: ${prices}\n`;

describe('prices in the providers config', () => {
  it.each([
    [
      'a price of the wrong type',
      local('{ perInstanceHour: { onDemand: "ten" } }'),
      'providers[0].prices.perInstanceHour.onDemand: must be a number',
    ],
    ['a negative price', local('{ perGiB: -0.09 }'), 'providers[0].prices.perGiB: must not be negative'],
    [
      'a negative machine-type price',
      local('{ machineTypes: { small: { spot: -1 } } }'),
      'providers[0].prices.machineTypes.small.spot: must not be negative',
    ],
    ['an unknown price field', local('{ perMonth: 3 }'), 'providers[0].prices.perMonth: unknown field'],
    [
      'a per-session price on a local entry',
      local('{ perSession: 0.1 }'),
      'providers[0].prices.perSession: is for vendor entries only',
    ],
    [
      'prices with no currency',
      local('{ perGiB: 0.09 }', ''),
      'currency: is required when an entry has prices (providers[0].prices)',
    ],
    [
      'a currency that is not a code',
      local('{ perGiB: 0.09 }', 'currency: dollars\n'),
      'currency: must be a three-letter ISO 4217 code',
    ],
  ])('%s is refused naming the field', (_what, yaml, expected) => {
    const issues = issuesOf(yaml);
    expect(
      issues.some((line) => line.startsWith(expected)),
      issues.join('\n'),
    ).toBe(true);
  });

  it('picks the machine type, then the default; spot where the entry makes Spot instances', () => {
    const config = parseProvidersConfig(
      `currency: EUR
providers:
  - name: od
    type: aws
    aws: { region: eu-west-1, imageId: ami-0123456789abcdef0, subnetIds: [subnet-0123456789abcdef0] }
    prices:
      perInstanceHour: { onDemand: 0.01, spot: 0.004 }
      machineTypes: { t3.small: { onDemand: 0.02 } }
      perGiB: 0.09
  - name: sp
    type: gcp
    gcp: { project: my-project-1, provisioningModel: SPOT }
    prices: { perInstanceHour: { onDemand: 0.01, spot: 0.003 } }
  - name: unpriced
    type: local
`,
      'p.yaml',
    );
    const book = priceBookOf(config);
    expect(book.currency).toBe('EUR');
    expect(instanceHourPrice(book, 'od')).toBe(0.01);
    expect(instanceHourPrice(book, 'od', 't3.small')).toBe(0.02);
    expect(instanceHourPrice(book, 'od', 't3.large')).toBe(0.01);
    expect(instanceHourPrice(book, 'sp')).toBe(0.003);
    expect(perGiBPrice(book, 'od')).toBe(0.09);
    // Unknown, not zero.
    expect(perGiBPrice(book, 'sp')).toBeUndefined();
    expect(instanceHourPrice(book, 'unpriced')).toBeUndefined();
    expect(perSessionPrice(book, 'unpriced')).toBeUndefined();
  });

  it('a zero price is a price (free), distinct from none', () => {
    const book = priceBookOf(parseProvidersConfig(local('{ perInstanceHour: { onDemand: 0 } }'), 'p.yaml'));
    expect(instanceHourPrice(book, 'cheap')).toBe(0);
  });

  it('a file with a negative price is refused at load, naming the file and the field', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ep-prices-'));
    try {
      const path = join(dir, 'providers.yaml');
      await writeFile(path, local('{ perInstanceHour: { onDemand: -0.5 } }'));
      await expect(loadProvidersConfig(path)).rejects.toThrow(
        `${path}: invalid providers config:\n  providers[0].prices.perInstanceHour.onDemand: must not be negative`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
