/**
 * moto's server (getmoto/moto, from PyPI through infra/scripts/install-moto.sh)
 * as the EC2 backend of the aws provider's tests: started by the test on
 * 127.0.0.1 with a free port (nothing is assumed running), stopped by its
 * own pid. The SDK talks to it through the provider's `endpoint` with real
 * SigV4 signing (moto accepts any key).
 *
 * What moto does not do (docs/providers/aws.md): ClientToken idempotency,
 * a pending phase, eventual consistency, throttling, capacity, limit and
 * auth errors. Those are the relay's job (tests/helpers/ec2-relay.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { DescribeImagesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { existsSync } from 'node:fs';
import { request } from 'node:http';
import { freePort } from '../../local-servers/ports.js';
import { runInfraScript } from '../../local-servers/tools.js';

/** Fake, static credentials: moto accepts any; the SDK signs with them and never looks further. */
export const MOTO_CREDENTIALS = {
  accessKeyId: 'AKIAEGRESSTEST000000',
  secretAccessKey: 'egress-proxies-test-secret',
};
export const MOTO_REGION = 'us-east-1';

/** A raw client on moto, one attempt a call: the tests' hands in the backend, as a user with the console would be. */
export function motoClient(endpoint: string): EC2Client {
  return new EC2Client({ region: MOTO_REGION, endpoint, credentials: MOTO_CREDENTIALS, maxAttempts: 1 });
}

/** The first AMI moto lists (it ships a catalogue of public images). */
export async function motoImage(ec2: EC2Client): Promise<string> {
  const images = await ec2.send(new DescribeImagesCommand({}));
  const id = images.Images?.map((i) => i.ImageId ?? '').find((i) => /^ami-[0-9a-f]{8,17}$/.test(i));
  if (id === undefined) throw new Error('moto lists no AMI');
  return id;
}

export interface RunningMoto {
  /** `http://127.0.0.1:<port>`: the provider's `aws.endpoint`. */
  endpoint: string;
  port: number;
  pid: number;
  /** Everything moto wrote (its request log), for a failing test's message. */
  output(): string;
  /** Drops every resource moto holds (its /moto-api/reset). */
  reset(): Promise<void>;
  stop(): Promise<void>;
}

/** Path of the pinned `moto_server`: $MOTO_SERVER, or installed into the cache on first use. */
export async function ensureMotoServer(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.MOTO_SERVER && existsSync(env.MOTO_SERVER)) return env.MOTO_SERVER;
  return runInfraScript('install-moto.sh', { env, stderr: 'capture', timeoutMs: 300_000 });
}

/** One HTTP request to moto; resolves with the status, rejects when nothing answers. */
function httpStatusOf(port: number, method: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, timeout: 2_000 }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode ?? 0));
    });
    req.once('timeout', () => req.destroy(new Error('timeout')));
    req.once('error', reject);
    req.end();
  });
}

/**
 * The environment moto runs with: none of the caller's AWS settings (moto
 * needs none, and must never see real keys), AMI validation on so an
 * unknown image is refused as EC2 refuses it.
 */
function motoEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('AWS_')) env[k] = v;
  return { ...env, MOTO_ENABLE_AMI_VALIDATION: 'true', PYTHONUNBUFFERED: '1' };
}

export async function startMoto(options: { startWithinMs?: number } = {}): Promise<RunningMoto> {
  const bin = await ensureMotoServer();
  const startWithinMs = options.startWithinMs ?? 30_000;
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    let log = '';
    const child: ChildProcess = spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], {
      env: motoEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-200_000)));
    child.stderr!.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-200_000)));
    let exited: number | string | null | undefined;
    child.once('exit', (code, signal) => (exited = code ?? signal));
    const deadline = Date.now() + startWithinMs;
    let up = false;
    while (!up && exited === undefined && Date.now() < deadline) {
      up = await httpStatusOf(port, 'GET', '/moto-api/').then(
        (s) => s === 200,
        () => false,
      );
      if (!up) await new Promise((r) => setTimeout(r, 100));
    }
    const stop = async (): Promise<void> => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await gone;
      clearTimeout(force);
    };
    if (!up) {
      await stop();
      // A port taken between freePort() and the bind: another one.
      if (attempt < 2 && /Address already in use/.test(log)) continue;
      throw new Error(
        `moto_server did not answer on ${port} within ${startWithinMs} ms (exit ${String(exited)}): ${log.slice(-2_000)}`,
      );
    }
    return {
      endpoint: `http://127.0.0.1:${port}`,
      port,
      pid: child.pid!,
      output: () => log,
      reset: async () => {
        const status = await httpStatusOf(port, 'POST', '/moto-api/reset');
        if (status !== 200) throw new Error(`moto reset answered ${status}`);
      },
      stop,
    };
  }
}
