/**
 * check() for the local provider: the state directory (writable, its
 * records counted) and the loopback range (its first address bindable).
 */
import { randomUUID } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { providerCall } from '../../tracing/seam.js';
import { ProviderError } from '../errors.js';
import type { Operations } from '../shared/operation.js';
import type { TargetStatus } from '../types.js';
import { formatIPv4, type LocalConfig, type LoopbackRange } from './config.js';
import { errCode, type Listeners } from './listeners.js';
import { ensureStateDir, listRecordNames } from './store.js';

export interface LocalCheckDeps {
  provider: { type: string; name: string };
  ops: Operations;
  config: LocalConfig;
  stateDir: string;
  range: LoopbackRange;
  listeners: Listeners;
}

export async function checkLocal(deps: LocalCheckDeps, signal: AbortSignal): Promise<TargetStatus[]> {
  const { stateDir, range } = deps;
  const firstAddress = formatIPv4(range.base + 1 === 0x7f000001 ? range.base + 2 : range.base + 1);
  return [
    await checkTarget(deps, 'state-dir', stateDir, signal, async () => {
      await ensureStateDir(stateDir);
      const probe = join(stateDir, `.check-${randomUUID()}.tmp`);
      await writeFile(probe, 'ok\n', { flag: 'wx' });
      await rm(probe, { force: true });
      return { instances: String((await listRecordNames(stateDir)).length) };
    }),
    await checkTarget(deps, 'loopback', `${deps.config.addressRange}`, signal, async () => {
      await new Promise<void>((resolve, reject) => {
        const server = createServer();
        server.once('error', reject);
        server.listen({ host: firstAddress, port: 0, exclusive: true }, () => server.close(() => resolve()));
      });
      return { listeners: String(deps.listeners.size), probedAddress: firstAddress };
    }),
  ];
}

async function checkTarget(
  deps: LocalCheckDeps,
  target: string,
  address: string,
  signal: AbortSignal,
  probe: () => Promise<Record<string, string>>,
): Promise<TargetStatus> {
  const started = Date.now();
  const base = { name: target, address };
  if (signal.aborted)
    return { ...base, ready: false, reason: 'Timeout', message: 'check aborted before it ran' };
  try {
    // create/get/delete/list are spans through buildProviders' WithTracing; a check is not an
    // operation it wraps, so the probe is a span of its own here.
    const details = await providerCall(
      deps.provider,
      'check',
      () => deps.ops.run('check', target, signal, probe),
      {
        operation: 'check',
      },
    );
    return { ...base, ready: true, reason: 'Reachable', latencyMillis: Date.now() - started, details };
  } catch (err) {
    const code = err instanceof ProviderError ? err.cause?.code : errCode(err);
    const timedOut =
      signal.aborted || (err instanceof ProviderError && /timed out|aborted/.test(err.message));
    const reason = timedOut
      ? 'Timeout'
      : code === 'EACCES' || code === 'EPERM' || code === 'EROFS'
        ? 'Forbidden'
        : 'Unreachable';
    const message = timedOut ? 'check did not finish in time' : `${target} probe failed (${code ?? 'error'})`;
    return { ...base, ready: false, reason, message, latencyMillis: Date.now() - started };
  }
}
