/**
 * The probe's failure paths that need no server: a port the socket layer
 * rejects makes `net.connect` throw synchronously. The probe must resolve a
 * ConnectFailed result rather than reject, and nothing may fire later (the
 * timeout timer or an abort once touched a socket that was never created,
 * which threw outside any promise and would crash the process).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { probeThroughProxy } from '../../api/prober/probe.js';

describe('probe: connect throws synchronously', () => {
  const uncaught: unknown[] = [];
  const record = (error: unknown) => uncaught.push(error);
  beforeEach(() => {
    uncaught.length = 0;
    process.on('uncaughtException', record);
  });
  afterEach(() => {
    process.off('uncaughtException', record);
  });

  it.each([70_000, Number.NaN, -1])(
    'port %s: a ConnectFailed result, and neither the timeout nor an abort throws afterwards',
    async (port) => {
      const controller = new AbortController();
      const timeoutMs = 50;
      const result = await probeThroughProxy({
        proxyHost: '127.0.0.1',
        proxyPort: port,
        url: new URL('http://127.0.0.1:1/'),
        timeoutMs,
        expectedStatusCodes: [204],
        signal: controller.signal,
      });
      expect(result).toMatchObject({ ok: false, reason: 'ConnectFailed' });
      expect(result.message).toContain('ERR_SOCKET_BAD_PORT');
      controller.abort();
      await new Promise((r) => setTimeout(r, timeoutMs * 3));
      expect(uncaught).toEqual([]);
    },
  );
});
