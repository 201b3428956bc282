/**
 * The `egress-proxies` executable as a real child process: output captured,
 * exit awaited with a deadline, log lines waited for.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';
import { eventually } from './temporal.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface CliProcess {
  proc: ChildProcess;
  /** stdout and stderr so far, interleaved. */
  output(): string;
  stderr(): string;
  /** The exit code (null when killed by a signal), or a rejection after `timeoutMs`. */
  exited(timeoutMs: number): Promise<number | null>;
  /** Waits for a captured line matching `re`; returns the match. */
  waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** SIGTERM (once; or `signal`) and wait for the exit; at once when it has exited. */
  stop(timeoutMs?: number, signal?: NodeJS.Signals): Promise<number | null>;
}

/** The flags that point a CLI process at this run's apiserver and Temporal (in `temporalNamespace`). */
export function testServerArgs(temporalNamespace: string = inject('temporalNamespace')): string[] {
  return [
    '--kubeconfig',
    inject('kubeconfigPath'),
    '--temporal-address',
    inject('temporalAddress'),
    '--temporal-namespace',
    temporalNamespace,
  ];
}

/** The lease API's log line when it listens; group 1 is its URL. */
export const LEASE_API_LISTENING = /"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*lease API listening/;

/** The URL an `api` (or `dev`) process serves the lease API on, once it listens. */
export async function leaseApiUrl(cli: CliProcess, timeoutMs = 120_000): Promise<string> {
  return (await cli.waitFor(LEASE_API_LISTENING, timeoutMs))[1]!;
}

/** `node` arguments that run the `egress-proxies` CLI as built for this run (tests/harness/test-dist.ts). */
export function cliEntry(): string[] {
  return [inject('cliEntry')];
}

export function startCli(
  args: string[],
  opts: {
    env?: Record<string, string | undefined>;
    entry?: string[];
    cwd?: string;
    /** The apiserver is the test's own: a bridge or api may watch every namespace of it. */
    ownApiserver?: boolean;
  } = {},
): CliProcess {
  // A bridge or api watching every namespace of the shared apiserver takes
  // other files' Proxies: the bridge starts their workflows on its own task
  // queue (which no worker of theirs serves: a flake seen one CI run in five),
  // the api's prober writes their health.
  if (
    (args[0] === 'bridge' || args[0] === 'api') &&
    args.includes('--kubeconfig') &&
    !args.includes('--watch-namespaces') &&
    opts.ownApiserver !== true
  ) {
    throw new Error(
      `startCli(${args[0]}): pass --watch-namespaces (or ownApiserver: true with an apiserver of the test's own)`,
    );
  }
  const entry = opts.entry ?? cliEntry();
  const proc = spawn(process.execPath, [...entry, ...args], {
    cwd: opts.cwd ?? ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...opts.env },
    stdio: 'pipe',
  });
  let output = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr.on('data', (d: Buffer) => {
    output += d.toString();
    stderr += d.toString();
  });
  const exit = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const exited = (timeoutMs: number) =>
    Promise.race([
      exit,
      new Promise<never>((_, reject) => {
        const timer = setTimeout(() => {
          proc.kill('SIGKILL');
          reject(new Error(`still running after ${timeoutMs} ms; output:\n${output}`));
        }, timeoutMs);
        void exit.then(() => clearTimeout(timer));
      }),
    ]);
  return {
    proc,
    output: () => output,
    stderr: () => stderr,
    exited,
    waitFor: (re, timeoutMs = 60_000) =>
      eventually(
        `${re.source} in the output of ${args[0] ?? ''}`,
        () => {
          if (proc.exitCode !== null) throw new Error(`exited ${proc.exitCode}; output:\n${output}`);
          return Promise.resolve(re.exec(output) ?? undefined);
        },
        { timeoutMs, intervalMs: 100 },
      ),
    stop: (timeoutMs = 30_000, signal: NodeJS.Signals = 'SIGTERM') => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited(timeoutMs);
    },
  };
}
