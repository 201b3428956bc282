import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, type WorkflowBundleOption } from '@temporalio/worker';
import { inject } from 'vitest';

/** The workflow bundle built once by the global setup. */
export function workflowBundle(): WorkflowBundleOption {
  return { codePath: inject('workflowBundlePath') };
}

export async function temporalClient(): Promise<{ client: Client; connection: Connection }> {
  const connection = await Connection.connect({ address: inject('temporalAddress') });
  return { client: new Client({ connection, namespace: inject('temporalNamespace') }), connection };
}

export async function workerConnection(): Promise<NativeConnection> {
  return NativeConnection.connect({ address: inject('temporalAddress') });
}

export function uniqueTaskQueue(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

/** Polls `fn` until it returns a value that is not undefined, or fails with the last seen value. */
export async function eventually<T>(
  what: string,
  fn: () => Promise<T | undefined>,
  { timeoutMs = 30_000, intervalMs = 100 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last instanceof Error ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
