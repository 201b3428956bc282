import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Lifecycle } from '../../cli/lifecycle.js';

/** A scope whose log lines are kept, parsed. */
function scope(stopTimeoutMs?: number): {
  lifecycle: Lifecycle;
  logged: () => Array<Record<string, unknown>>;
} {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  const logger = pino({ level: 'debug' }, sink);
  return {
    lifecycle: new Lifecycle(logger, { name: 'test', ...(stopTimeoutMs ? { stopTimeoutMs } : {}) }),
    logged: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

describe('Lifecycle', () => {
  it('stops what was deferred newest first, each one logged', async () => {
    const { lifecycle, logged } = scope();
    const order: string[] = [];
    for (const name of ['a', 'b', 'c']) lifecycle.defer(name, () => void order.push(name));
    await lifecycle.close();
    expect(order).toEqual(['c', 'b', 'a']);
    expect(logged().map((l) => [l.scope, l.part, l.msg])).toEqual([
      ['test', 'c', 'stopped'],
      ['test', 'b', 'stopped'],
      ['test', 'a', 'stopped'],
    ]);
  });

  it('waits for each stop before the next', async () => {
    const { lifecycle } = scope();
    const order: string[] = [];
    lifecycle.defer('slow, older', () => void order.push('older'));
    lifecycle.defer('slow, newer', async () => {
      await new Promise((r) => setTimeout(r, 30));
      order.push('newer');
    });
    await lifecycle.close();
    expect(order).toEqual(['newer', 'older']);
  });

  it('bounds each stop: one that hangs is logged and the rest still stop', async () => {
    const { lifecycle, logged } = scope(5_000);
    const stopped: string[] = [];
    lifecycle.defer('first', () => void stopped.push('first'));
    lifecycle.defer('hangs', () => new Promise(() => undefined), { timeoutMs: 50 });
    lifecycle.defer('last', () => void stopped.push('last'));
    const started = Date.now();
    await lifecycle.close();
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(stopped).toEqual(['last', 'first']);
    expect(logged().find((l) => l.part === 'hangs')).toMatchObject({
      level: 40,
      timeoutMs: 50,
      msg: 'did not stop in time; going on with the rest',
    });
  });

  it('a stop that fails, or throws at once, does not keep the others from stopping', async () => {
    const { lifecycle, logged } = scope();
    const stopped: string[] = [];
    lifecycle.defer('a', () => void stopped.push('a'));
    lifecycle.defer('rejects', () => Promise.reject(new Error('connection reset')));
    lifecycle.defer('throws', () => {
      throw new Error('already closed');
    });
    lifecycle.defer('d', () => void stopped.push('d'));
    await expect(lifecycle.close()).resolves.toBeUndefined();
    expect(stopped).toEqual(['d', 'a']);
    const failures = logged().filter((l) => l.level === 40);
    expect(failures.map((l) => [l.part, l.err])).toEqual([
      ['throws', 'already closed'],
      ['rejects', 'connection reset'],
    ]);
  });

  it('closing twice is safe: the second call waits for the first and stops nothing again', async () => {
    const { lifecycle } = scope();
    let stops = 0;
    lifecycle.defer('once', async () => {
      await new Promise((r) => setTimeout(r, 20));
      stops += 1;
    });
    const first = lifecycle.close();
    const second = lifecycle.close();
    await second;
    expect(stops).toBe(1);
    await first;
    await lifecycle.close();
    expect(stops).toBe(1);
    expect(lifecycle.closed).toBe(true);
  });

  it('refuses a defer after close: what would start then would never be stopped', async () => {
    const { lifecycle } = scope();
    await lifecycle.close();
    expect(() => lifecycle.defer('late', () => undefined)).toThrow(/late started after the scope was closed/);
  });

  it('a failed start stops what it started, newest first, and the error goes on', async () => {
    const { lifecycle } = scope();
    const stopped: string[] = [];
    await expect(
      lifecycle.start(async () => {
        lifecycle.defer('informer', () => void stopped.push('informer'));
        lifecycle.defer('server', () => void stopped.push('server'));
        await Promise.resolve();
        throw new Error('port in use');
      }),
    ).rejects.toThrow('port in use');
    expect(stopped).toEqual(['server', 'informer']);
    expect(lifecycle.closed).toBe(true);
  });

  it('a start that succeeds leaves everything running until close', async () => {
    const { lifecycle } = scope();
    const stopped: string[] = [];
    const value = await lifecycle.start(() => {
      lifecycle.defer('server', () => void stopped.push('server'));
      return Promise.resolve(42);
    });
    expect(value).toBe(42);
    expect(stopped).toEqual([]);
    await lifecycle.close();
    expect(stopped).toEqual(['server']);
  });

  it('stops one part early when asked, and not again at close', async () => {
    const { lifecycle } = scope();
    const stopped: string[] = [];
    lifecycle.defer('server', () => void stopped.push('server'));
    const stopClient = lifecycle.defer('client', () => void stopped.push('client'));
    lifecycle.defer('worker', () => void stopped.push('worker'));
    await stopClient();
    await stopClient();
    expect(stopped).toEqual(['client']);
    await lifecycle.close();
    expect(stopped).toEqual(['client', 'worker', 'server']);
  });
});
