import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import {
  buildProviders,
  devProvidersConfig,
  loadProvidersConfig,
  parseProvidersConfig,
  notImplemented,
  PROVIDER_TYPES,
  ProvidersConfigError,
  type ProviderDeps,
} from '../../providers/config.js';
import { firewallRuleName } from '../../providers/gcp/firewall-rule.js';
import { candidateAddresses, parseLoopbackCidr } from '../../providers/local/config.js';

function issuesOf(yaml: string): string[] {
  try {
    parseProvidersConfig(yaml, 'test.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ProvidersConfigError);
    expect((err as Error).message).toContain('test.yaml');
    return (err as ProvidersConfigError).issues;
  }
  throw new Error('expected the config to be rejected');
}

const entry = (extra: string) => `providers:\n  - name: ok\n    type: local\n${extra}`;

describe('parseProvidersConfig: every bad input names its field', () => {
  it.each([
    [
      'an unknown field in a block',
      entry('    local:\n      startDelay: 3\n'),
      'providers[0].local.startDelay: unknown field',
    ],
    ['an unknown field in an entry', entry('    zone: x\n'), 'providers[0].zone: unknown field'],
    ['an unknown top-level field', 'providers: []\nextra: 1\n', 'extra: unknown field'],
    ['a missing providers list', 'other: 1\n', 'providers:'],
    ['an unknown type', 'providers:\n  - name: a\n    type: openstack\n', 'providers[0].type:'],
    ['a missing type', 'providers:\n  - name: a\n', 'providers[0].type:'],
    ['a missing name', 'providers:\n  - type: local\n', 'providers[0].name:'],
    [
      'an uppercase name',
      'providers:\n  - name: Local\n    type: local\n',
      'providers[0].name: must be a lowercase DNS-1123 label',
    ],
    [
      'a name with a dot',
      'providers:\n  - name: a.b\n    type: local\n',
      'providers[0].name: must be a lowercase DNS-1123 label',
    ],
    [
      'a name ending in a dash',
      'providers:\n  - name: a-\n    type: local\n',
      'providers[0].name: must be a lowercase DNS-1123 label',
    ],
    [
      'a 64-character name',
      `providers:\n  - name: ${'a'.repeat(64)}\n    type: local\n`,
      'providers[0].name: must be at most 63 characters',
    ],
    [
      'a duplicate name',
      'providers:\n  - name: a\n    type: local\n  - name: a\n    type: local\n',
      'providers[1].name: duplicate provider name "a" (first used at providers[0].name)',
    ],
    [
      'a block for another type',
      entry('    gcp:\n      project: my-project\n'),
      'providers[0].gcp: block does not match type "local"',
    ],
    [
      'a negative start delay',
      entry('    local:\n      startDelaySeconds: -1\n'),
      'providers[0].local.startDelaySeconds:',
    ],
    [
      'a string start delay',
      entry('    local:\n      startDelaySeconds: soon\n'),
      'providers[0].local.startDelaySeconds:',
    ],
    [
      'an unknown failure mode',
      entry('    local:\n      failureMode: sometimes\n'),
      'providers[0].local.failureMode:',
    ],
    [
      'a non-loopback range',
      entry('    local:\n      addressRange: 10.0.0.0/8\n'),
      'providers[0].local.addressRange: "10.0.0.0/8" is not inside 127.0.0.0/8',
    ],
    [
      'a range with host bits',
      entry('    local:\n      addressRange: 127.77.0.1/16\n'),
      'providers[0].local.addressRange: "127.77.0.1/16" has host bits set',
    ],
    [
      'a /31 range',
      entry('    local:\n      addressRange: 127.77.0.0/31\n'),
      'providers[0].local.addressRange: "127.77.0.0/31" is too small',
    ],
    [
      'a non-boolean egress flag',
      entry('    local:\n      allowNonLoopbackEgress: "yes"\n'),
      'providers[0].local.allowNonLoopbackEgress:',
    ],
    [
      'a zero operation timeout',
      entry('    local:\n      operationTimeoutSeconds: 0\n'),
      'providers[0].local.operationTimeoutSeconds:',
    ],
  ])('%s', (_what, yaml, expected) => {
    const issues = issuesOf(yaml);
    expect(issues.some((line) => line.startsWith(expected))).toBe(true);
  });

  it('reports every problem at once, each with its path', () => {
    const issues = issuesOf(
      'providers:\n  - name: A\n    type: local\n    local: {bogus: 1}\n  - name: b\n    type: nope\n',
    );
    expect(issues).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^providers\[0\]\.name: /),
        'providers[0].local.bogus: unknown field',
        expect.stringMatching(/^providers\[1\]\.type: /),
      ]),
    );
  });

  it('rejects invalid YAML and duplicate keys', () => {
    expect(issuesOf('providers: [\n')[0]).toMatch(/^\(yaml\): /);
    expect(issuesOf('providers: []\nproviders: []\n')[0]).toMatch(/^\(yaml\): /);
  });
});

describe('parseProvidersConfig: valid input', () => {
  it('fills the local defaults, with or without a block', () => {
    // The egress block's defaults (providers/shared/egress-config.ts): nothing more refused or allowed, ports 80 and 443.
    const DEFAULT_EGRESS = {
      denyCidrs: [],
      allowCidrs: [],
      allowPorts: [
        [80, 80],
        [443, 443],
      ],
    };
    const cfg = parseProvidersConfig(
      'providers:\n  - name: a\n    type: local\n  - name: b\n    type: local\n    local:\n      startDelaySeconds: 5\n      failureMode: quota\n',
      'x',
    );
    expect(cfg.providers).toEqual([
      {
        name: 'a',
        type: 'local',
        config: {
          addressRange: '127.77.0.0/16',
          startDelaySeconds: 0,
          failureMode: 'none',
          allowNonLoopbackEgress: false,
          egress: DEFAULT_EGRESS,
          operationTimeoutSeconds: 10,
        },
      },
      {
        name: 'b',
        type: 'local',
        config: {
          addressRange: '127.77.0.0/16',
          startDelaySeconds: 5,
          failureMode: 'quota',
          allowNonLoopbackEgress: false,
          egress: DEFAULT_EGRESS,
          operationTimeoutSeconds: 10,
        },
      },
    ]);
  });

  it("an entry's health: block (the prober's per-entry probe settings) is kept; bad values name their field", () => {
    const cfg = parseProvidersConfig(
      entry('    health:\n      probeURL: http://cheap.example/204\n      intervalSeconds: 300\n'),
      'x',
    );
    expect(cfg.providers[0]!.health).toEqual({ probeURL: 'http://cheap.example/204', intervalSeconds: 300 });
    expect(parseProvidersConfig(entry(''), 'x').providers[0]).not.toHaveProperty('health');
    expect(issuesOf(entry('    health:\n      probeURL: ftp://x/\n      intervalSeconds: 0\n'))).toEqual([
      'providers[0].health.probeURL: must be an absolute http:// or https:// URL',
      'providers[0].health.intervalSeconds: must be at least 1',
    ]);
    expect(issuesOf(entry('    health:\n      timeout: 3\n'))).toEqual([
      'providers[0].health.timeout: unknown field',
    ]);
  });

  it('the embedded dev config is one local provider named local', () => {
    expect(devProvidersConfig().providers.map((p) => [p.name, p.type])).toEqual([['local', 'local']]);
  });

  it('an empty document is rejected (providers is required); an empty list is valid', () => {
    expect(issuesOf('')[0]).toMatch(/^providers: /);
    expect(parseProvidersConfig('providers: []\n', 'x').providers).toEqual([]);
  });

  it('loads from a file, and names the file when it cannot', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ep-config-'));
    try {
      await writeFile(join(dir, 'providers.yaml'), 'providers:\n  - name: a\n    type: local\n');
      expect((await loadProvidersConfig(join(dir, 'providers.yaml'))).providers[0]?.name).toBe('a');
      await expect(loadProvidersConfig(join(dir, 'missing.yaml'))).rejects.toThrow(
        /missing\.yaml: cannot read providers config \(ENOENT\)/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('buildProviders', () => {
  const deps = { logger: pino({ level: 'silent' }), stateRoot: '/nonexistent/never-touched' };

  it('builds by configured name without touching the state dir, and get(unknown) is undefined', async () => {
    const registry = buildProviders(
      parseProvidersConfig(
        'providers:\n  - name: one\n    type: local\n  - name: two\n    type: local\n',
        'x',
      ),
      deps,
    );
    expect(registry.names()).toEqual(['one', 'two']);
    expect(registry.get('one')).toMatchObject({ name: 'one', type: 'local' });
    expect(registry.get('three')).toBeUndefined();
    await registry.close();
  });

  it('an entry whose type this version cannot build fails only that provider, naming why', async () => {
    const cfg = parseProvidersConfig(
      'providers:\n  - name: one\n    type: local\n  - name: cloud\n    type: gcp\n    gcp:\n      project: my-project-1\n',
      'x',
    );
    // Swapped in so the test holds whichever types this version implements.
    const registry = buildProviders(cfg, deps, { gcp: notImplemented('gcp') });
    expect(registry.names()).toEqual(['one']);
    expect(registry.get('cloud')).toBeUndefined();
    expect(registry.unbuilt?.('cloud')).toBe(
      'provider "cloud": type "gcp" is not implemented in this version',
    );
    expect(registry.unbuilt?.('one')).toBeUndefined();
    expect(registry.unbuilt?.('absent')).toBeUndefined();
    await registry.close();
  });

  it('gives every factory the installation and every configured entry, the unbuilt ones too', async () => {
    const cfg = parseProvidersConfig(
      'providers:\n  - name: one\n    type: local\n  - name: cloud\n    type: gcp\n    gcp:\n      project: my-project-1\n',
      'x',
    );
    const seen: ProviderDeps[] = [];
    const local = {
      build: (name: string, config: Parameters<typeof PROVIDER_TYPES.local.build>[1], d: ProviderDeps) => {
        seen.push(d);
        return PROVIDER_TYPES.local.build(name, config, d);
      },
    };
    const registry = buildProviders(
      cfg,
      { ...deps, installation: 'inst-a' },
      { local, gcp: notImplemented('gcp') },
    );
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ installation: 'inst-a' });
    expect(seen[0]!.entries).toEqual([
      { name: 'one', type: 'local' },
      { name: 'cloud', type: 'gcp' },
    ]);
    await registry.close();
  });

  it('the gcp factory passes the installation on: the firewall target is named by it, or Unmanaged without it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'providers-config-'));
    try {
      // A key file that is not there: every call fails on credentials, before anything is dialled.
      const cfg = parseProvidersConfig(
        [
          'providers:',
          '  - name: cloud',
          '    type: gcp',
          '    gcp:',
          '      project: my-project-1',
          '      endpoint: http://127.0.0.1:1',
          `      credentials: { keyFile: ${JSON.stringify(join(dir, 'missing.json'))} }`,
          '      firewall: { sourceRanges: [203.0.113.0/24] }',
          '',
        ].join('\n'),
        'x',
      );
      const targets = async (installation?: string) => {
        const registry = buildProviders(cfg, { ...deps, installation });
        try {
          const checked = await registry.get('cloud')!.check!(AbortSignal.timeout(10_000));
          return checked.map((t) => [t.name, t.reason]);
        } finally {
          await registry.close();
        }
      };
      const [, withIt] = await targets('inst-a');
      expect(withIt?.[0]).toBe(`firewall/${firewallRuleName('inst-a', 'cloud')}`);
      expect(withIt?.[1]).not.toBe('Unmanaged');
      const [, without] = await targets();
      expect(without).toEqual(['firewall', 'Unmanaged']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('an error that is not a config problem still aborts the set', () => {
    const cfg = parseProvidersConfig('providers:\n  - name: one\n    type: local\n', 'x');
    const boom = {
      build(): never {
        throw new Error('boom');
      },
    };
    expect(() => buildProviders(cfg, deps, { local: boom })).toThrow('boom');
  });
});

/** The seed's providers config files, as shipped (copied from /work/shared/seeds/files). */
describe("the seed's providers config files load", () => {
  const deps = { logger: pino({ level: 'silent' }), stateRoot: '/nonexistent/never-touched' };
  const seed = (path: string) =>
    readFileSync(new URL(`../fixtures/seed-providers/${path}`, import.meta.url), 'utf8');
  const types = (cfg: { providers: Array<{ name: string; type: string }> }) =>
    cfg.providers.map((p) => `${p.name}:${p.type}`);

  it('config/samples/providers-config.yaml', () => {
    const cfg = parseProvidersConfig(seed('config/samples/providers-config.yaml'), 'providers-config.yaml');
    expect(types(cfg)).toEqual(['kubernetes:kubernetes', 'gcp-eu:gcp', 'kvm-home:kvm']);
    const k = cfg.providers[0]!;
    expect(k.type === 'kubernetes' && k.config.namespace).toBeUndefined();
  });

  it('hack/providers-dev.yaml', () => {
    const cfg = parseProvidersConfig(seed('hack/providers-dev.yaml'), 'providers-dev.yaml');
    expect(types(cfg)).toEqual(['kubernetes:kubernetes']);
    const registry = buildProviders(cfg, deps);
    expect(registry.names()).toEqual(['kubernetes']);
    return registry.close();
  });

  it('config/manager/providers_config.yaml (the ConfigMap; its providers.yaml key is the file the worker reads)', () => {
    const manifest = parseYaml(seed('config/manager/providers_config.yaml')) as {
      kind: string;
      data: Record<string, string>;
    };
    expect(manifest.kind).toBe('ConfigMap');
    const cfg = parseProvidersConfig(manifest.data['providers.yaml']!, 'providers_config.yaml');
    expect(types(cfg)).toEqual(['kubernetes:kubernetes', 'kvm-home:kvm']);
  });
});

describe('local address range', () => {
  it('never hands out 127.0.0.1, the network or the broadcast address', () => {
    const range = parseLoopbackCidr('127.0.0.0/29');
    if (typeof range === 'string') throw new Error(range);
    const all = [...candidateAddresses(range, 'proxy-abc')];
    expect(all.sort()).toEqual(['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6']);
  });

  it('starts at a name-derived slot, deterministically', () => {
    const range = parseLoopbackCidr('127.77.0.0/16');
    if (typeof range === 'string') throw new Error(range);
    const first = (name: string): string | undefined => {
      for (const address of candidateAddresses(range, name)) return address;
      return undefined;
    };
    expect(first('proxy-aaaa')).toBe(first('proxy-aaaa'));
    expect(first('proxy-aaaa')).not.toBe(first('proxy-bbbb'));
  });
});
