/**
 * Every option a command offers reaches the configuration of a part that
 * command runs. The options are read from the commander definition itself
 * (no list kept here): each gets a non-default value made from its
 * placeholder (`<duration>`, `<path>`, ...), the command line is parsed, and
 * the plan the action would start is compared with the plan of the bare
 * command. An option that changes nothing is offered but unused; a new
 * option is covered as soon as it exists, and one with a placeholder this
 * file cannot fill fails until it can.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Option, type Command } from 'commander';
import { afterAll, describe, expect, it } from 'vitest';
import { buildCli } from '../../cli/main.js';
import { COMMANDS, type CommandName, type CommandPlan } from '../../cli/plan.js';

const dir = mkdtempSync(join(tmpdir(), 'ep-cli-options-'));
const tokenFile = join(dir, 'token');
writeFileSync(tokenFile, 'cli-options-token\n');
/** A Temporal client config file (envconfig's TOML) with two profiles at other addresses. */
const temporalToml = join(dir, 'temporal.toml');
writeFileSync(
  temporalToml,
  '[profile.default]\naddress = "127.0.0.9:17233"\n\n[profile.xq7-test]\naddress = "127.0.0.9:27233"\n',
);
/** No setting comes from the environment: every value is the code's default or the flag's. */
const ENV: NodeJS.ProcessEnv = { HOME: dir, EGRESS_PROXIES_CACHE: join(dir, 'cache') };

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * What each command is given before the option under test: api and gateway
 * listen on the loopback, since off it with no token they refuse to start
 * (the ENV has none; `--insecure-no-auth` is walked like any option).
 */
const BASE: Record<string, string[]> = {
  api: ['--discovery-addr', '127.0.0.1:8090'],
  gateway: ['--gateway-addr', '127.0.0.1:8080'],
};
const baseOf = (command: string) => BASE[command] ?? [];

type Build = (deps: { run: (command: CommandName, plan: CommandPlan) => Promise<void> }) => Command;
const realCli: Build = (deps) => buildCli(ENV, deps);

async function planOf(build: Build, args: string[]): Promise<CommandPlan> {
  let plan: CommandPlan | undefined;
  const program = build({
    run: (_command, p) => {
      plan = p;
      return Promise.resolve();
    },
  });
  for (const cmd of [program, ...program.commands]) {
    cmd.exitOverride();
    cmd.configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  }
  await program.parseAsync(['node', 'egress-proxies', ...args]);
  if (!plan) throw new Error(`${args.join(' ')}: the action ran nothing`);
  return plan;
}

/** Leaf path -> JSON value, so two plans compare setting by setting. */
function flatten(value: unknown, prefix = '', out = new Map<string, string>()): Map<string, string> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.set(prefix, JSON.stringify(value));
  }
  return out;
}

/** The settings that differ, with their new values. */
function changes(base: CommandPlan, next: CommandPlan): Map<string, string> {
  const a = flatten(base);
  const b = flatten(next);
  const out = new Map<string, string>();
  for (const key of new Set([...a.keys(), ...b.keys()])) {
    if (a.get(key) !== b.get(key)) out.set(key, b.get(key) ?? 'undefined');
  }
  return out;
}

/** Options that mean something only with another one, and that other one's value. */
/** Options given only together (neither alone is valid): compared with a plan that has neither. */
const PAIRED: Record<string, string[]> = {
  '--temporal-tls-cert': ['--temporal-tls-key', tokenFile],
  '--temporal-tls-key': ['--temporal-tls-cert', tokenFile],
};

const PREREQUISITES: Record<string, string[]> = {
  '--temporal-profile': ['--temporal-config-file', temporalToml],
  '--lease-store-password-file': ['--lease-store', 'redis://127.0.0.9:16379/2'],
  '--lease-store-ca-file': ['--lease-store', 'rediss://127.0.0.9:16379/2'],
};

/** Non-default values to try, by the option's placeholder. */
function candidates(opt: Option): string[][] {
  // A negatable flag (`--no-prober`) is its own non-default value, as a plain boolean one is.
  if (opt.isBoolean() || opt.negate) return [[opt.long!]];
  if (opt.argChoices) {
    return opt.argChoices.filter((c) => c !== opt.defaultValue).map((c) => [opt.long!, c]);
  }
  // A path that must hold a particular format.
  if (opt.long === '--temporal-config-file') return [[opt.long, temporalToml]];
  const placeholder = /<([^>]+)>|\[([^\]]+)\]/.exec(opt.flags);
  const kind = placeholder?.[1] ?? placeholder?.[2];
  const values: Record<string, string[]> = {
    duration: ['47m', '3h7m'],
    'host:port': ['127.0.0.9:19999'],
    addr: ['127.0.0.9:19999'],
    path: [tokenFile],
    n: ['17', '1001'],
    ns: ['xq7-test'],
    name: ['xq7-test'],
    id: ['xq7-test'],
    level: ['debug', 'error'],
    'memory|url': ['redis://127.0.0.9:16379/2'],
    'a,b': ['xq7-a,xq7-b'],
    codes: ['429,503'],
    attempts: ['2', '7'],
    cidrs: ['10.77.0.0/16', '192.0.2.7/32,fd07::/16'],
    ports: ['8443', '80,443,9000-9100'],
    'ip:port': ['127.0.0.9:5353'],
    url: ['http://127.0.0.9:18233'],
  };
  const found = kind === undefined ? undefined : values[kind];
  if (!found) throw new Error(`${opt.flags}: no test value for the placeholder <${kind}>; add one here`);
  return found.map((v) => [opt.long!, v]);
}

interface Reached {
  command: string;
  flag: string;
  args: string[];
  changed: Map<string, string>;
  /** What the option needs beside it (in args too, and in the plan it is compared with). */
  prereq: string[];
}

/** For every option of every command: the settings a non-default value changes, or why none. */
async function walkOptions(build: Build): Promise<{ reached: Reached[]; problems: string[] }> {
  const program = build({ run: () => Promise.resolve() });
  const reached: Reached[] = [];
  const problems: string[] = [];
  for (const cmd of program.commands) {
    const options = cmd.options.filter((o) => o.long !== '--help' && o.long !== '--version');
    if (options.length === 0) continue;
    for (const opt of options) {
      const prereq = PREREQUISITES[opt.long!] ?? [];
      const base = await planOf(build, [cmd.name(), ...baseOf(cmd.name()), ...prereq]);
      const errors: string[] = [];
      let hit: Reached | undefined;
      for (const args of candidates(opt)) {
        try {
          const pair = PAIRED[opt.long!] ?? [];
          const changed = changes(
            base,
            await planOf(build, [cmd.name(), ...baseOf(cmd.name()), ...prereq, ...pair, ...args]),
          );
          if (changed.size > 0) {
            hit = {
              command: cmd.name(),
              flag: opt.long!,
              args: [...prereq, ...pair, ...args],
              changed,
              prereq,
            };
            break;
          }
        } catch (error) {
          errors.push(`${args.join(' ')}: ${(error as Error).message}`);
        }
      }
      if (hit) reached.push(hit);
      else
        problems.push(
          `${cmd.name()} ${opt.long}: no value reached any part's configuration${errors.length ? ` (${errors.join('; ')})` : ''}`,
        );
    }
  }
  return { reached, problems };
}

describe('every CLI option reaches the part that uses it', () => {
  it('covers dev, worker, bridge, api and gateway, and every option of each reaches a part of its command', async () => {
    const { reached, problems } = await walkOptions(realCli);
    expect(problems).toEqual([]);
    const commands = new Set(reached.map((r) => r.command));
    for (const name of COMMANDS) expect(commands).toContain(name);
    // Each change lands in a part the command runs (the plan holds no other).
    const elsewhere: string[] = [];
    for (const r of reached) {
      const parts =
        r.command === 'dev' ? ['logger', 'worker', 'bridge', 'api', 'gateway', 'dev'] : ['logger', r.command];
      for (const path of r.changed.keys()) {
        if (!parts.includes(path.split('.')[0]!)) elsewhere.push(`${r.command} ${r.flag} -> ${path}`);
      }
    }
    expect(elsewhere).toEqual([]);
  });

  it('dev offers every option of worker, bridge, api and gateway, and each changes that part exactly as there', async () => {
    const { reached } = await walkOptions(realCli);
    const inDev = new Map(reached.filter((r) => r.command === 'dev').map((r) => [r.flag, r]));
    let compared = 0;
    for (const r of reached.filter((x) => x.command !== 'dev')) {
      const dev = inDev.get(r.flag);
      expect(dev, `dev ${r.flag}`).toBeDefined();
      const devPlan = await planOf(realCli, ['dev', ...r.args]);
      const basePlan = await planOf(realCli, ['dev', ...r.prereq]);
      const devChanges = changes(basePlan, devPlan);
      const own = (m: Map<string, string>) =>
        Object.fromEntries(
          [...m].filter(([path]) => path.startsWith(`${r.command}.`) || path.startsWith('logger.')),
        );
      if (r.flag === '--state-dir') {
        // Under dev it names the whole instance; the providers' state is <dir>/state.
        expect(devPlan.dev!.root).toBe(resolve(r.args[1]!));
        expect(devPlan.worker!.stateDir).toBe(join(resolve(r.args[1]!), 'state'));
        compared++;
        continue;
      }
      expect(own(devChanges), `dev ${r.args.join(' ')} vs ${r.command}`).toEqual(own(r.changed));
      compared++;
    }
    expect(compared).toBeGreaterThan(20);
  });

  it('dev --lease-cooldown 10s --max-lease-ttl 10m --discovery-token-file F gives the lease API what api gives it', async () => {
    const args = [
      '--lease-cooldown',
      '10s',
      '--max-lease-ttl',
      '10m',
      '--discovery-token-file',
      tokenFile,
      '--discovery-addr',
      '127.0.0.1:0',
    ];
    const dev = await planOf(realCli, ['dev', ...args]);
    const api = await planOf(realCli, ['api', ...args]);
    expect(dev.api!.options).toEqual(api.api!.options);
    expect(api.api!.options).toMatchObject({
      leaseCooldownMs: 10_000,
      maxLeaseTtlSeconds: 600,
      token: 'cli-options-token',
    });
  });

  it('--watch-namespaces reaches every part that lists Proxies, as a list; a bad name is refused by name', async () => {
    const dev = await planOf(realCli, ['dev', '--watch-namespaces', ' team-a, team-b,team-a ']);
    for (const part of [dev.worker, dev.bridge, dev.api])
      expect(part!.watchNamespaces).toEqual(['team-a', 'team-b']);
    const env = await planOf((deps) => buildCli({ ...ENV, WATCH_NAMESPACES: 'team-c' }, deps), ['bridge']);
    expect(env.bridge!.watchNamespaces).toEqual(['team-c']);
    expect((await planOf(realCli, ['worker'])).worker!.watchNamespaces).toBeUndefined();
    await expect(planOf(realCli, ['api', '--watch-namespaces', 'team-a,Team_B'])).rejects.toThrow(
      '--watch-namespaces: each must be a namespace name (DNS-1123 label), got "team-a,Team_B"',
    );
  });

  it('dev --tracing asks dev for a local Jaeger; no other command offers it', async () => {
    expect((await planOf(realCli, ['dev', '--tracing'])).dev!.tracing).toBe(true);
    expect((await planOf(realCli, ['dev'])).dev!.tracing).toBeUndefined();
    for (const command of ['worker', 'bridge', 'api'])
      await expect(planOf(realCli, [command, '--tracing'])).rejects.toThrow(/unknown option/);
  });

  it('does not offer a flag no part of the command uses', async () => {
    const api = await planOf(realCli, ['api', ...baseOf('api')]);
    expect(Object.keys(api).sort()).toEqual(['api', 'logger']);
    await expect(planOf(realCli, ['api', '--task-queue', 'q'])).rejects.toThrow(/unknown option/);
    await expect(planOf(realCli, ['bridge', '--gc-interval', '1m'])).rejects.toThrow(/unknown option/);
    await expect(planOf(realCli, ['worker', '--lease-cooldown', '1m'])).rejects.toThrow(/unknown option/);
  });

  it('finds an option that reaches nothing, and one whose placeholder it cannot fill', async () => {
    const withUnused: Build = (deps) => {
      const program = buildCli(ENV, deps);
      program.commands
        .find((c) => c.name() === 'bridge')!
        .addOption(new Option('--unused-poll <duration>', 'read by nothing'));
      return program;
    };
    const { problems } = await walkOptions(withUnused);
    expect(problems).toEqual(["bridge --unused-poll: no value reached any part's configuration"]);

    const withOddPlaceholder: Build = (deps) => {
      const program = buildCli(ENV, deps);
      program.commands.find((c) => c.name() === 'api')!.addOption(new Option('--colour <hue>', 'new'));
      return program;
    };
    await expect(walkOptions(withOddPlaceholder)).rejects.toThrow('no test value for the placeholder <hue>');
  });
});
