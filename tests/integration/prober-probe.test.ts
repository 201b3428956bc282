/**
 * The probe transport against real sockets: a real forward proxy (the
 * `local` provider's), a real HTTP and HTTPS probe target, and "proxies"
 * that accept TCP and then misbehave.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { probeThroughProxy, type ProbeRequest, type ProbeResult } from '../../prober/probe.js';
import {
  selfSignedCert,
  startFaultProxy,
  startProbeTarget,
  type FaultMode,
  type ProbeTarget,
  type SelfSignedCert,
} from '../helpers/prober-fixtures.js';
import { freePort } from '../../local-servers/ports.js';

describe('probe through a proxy', () => {
  let cert: SelfSignedCert;
  let proxy: ForwardProxy;
  let http: ProbeTarget;
  let https: ProbeTarget;

  beforeAll(async () => {
    cert = await selfSignedCert();
    proxy = await startForwardProxy({ host: '127.0.0.1', port: 0 });
    http = await startProbeTarget();
    https = await startProbeTarget({ tls: cert });
  });
  afterAll(async () => {
    await Promise.all([proxy?.close(), http?.close(), https?.close()]);
  });

  const probe = (over: Partial<ProbeRequest> & { url: URL }): Promise<ProbeResult> =>
    probeThroughProxy({
      proxyHost: proxy.host,
      proxyPort: proxy.port,
      timeoutMs: 2_000,
      expectedStatusCodes: [200, 204],
      tls: { ca: cert.cert },
      ...over,
    });

  it('http: an absolute-form GET through the proxy; success is an expected status', async () => {
    const before = http.requests.length;
    const result = await probe({ url: new URL(`${http.url}health?x=1`) });
    expect(result).toMatchObject({ ok: true, status: 204 });
    expect(result.durationMs).toBeGreaterThan(0);
    expect(http.requests.slice(before)).toHaveLength(1);
    expect(http.requests.at(-1)).toMatchObject({ method: 'GET', url: '/health?x=1' });
  });

  it('https: CONNECT, TLS to the target through the tunnel, then GET', async () => {
    const before = https.requests.length;
    const result = await probe({ url: new URL(`${https.url}generate_204`) });
    expect(result).toMatchObject({ ok: true, status: 204 });
    expect(https.requests.slice(before).map((r) => r.url)).toEqual(['/generate_204']);
  });

  it('sends only Host, User-Agent and Connection: no traceparent, nothing else of ours', async () => {
    await probe({ url: new URL(https.url) });
    await probe({ url: new URL(http.url) });
    const names = (r: { rawHeaders: string[] }) =>
      r.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    // Through CONNECT the target sees our bytes verbatim.
    expect(names(https.requests.at(-1)!)).toEqual(['host', 'user-agent', 'connection']);
    // Absolute-form: the forward proxy drops our hop-by-hop Connection and its own HTTP client sets one.
    expect(names(http.requests.at(-1)!)).toEqual(['host', 'user-agent', 'connection']);
    expect(http.requests.flatMap((r) => names(r))).not.toContain('traceparent');
    expect(https.requests.at(-1)!.rawHeaders).toEqual([
      'Host',
      `127.0.0.1:${https.port}`,
      'User-Agent',
      'egress-proxies-health/1',
      'Connection',
      'close',
    ]);
  });

  it('a status outside expectedStatusCodes is BadStatus with the code', async () => {
    http.status = 500;
    try {
      const result = await probe({ url: new URL(http.url) });
      expect(result).toMatchObject({ ok: false, status: 500, reason: 'BadStatus' });
      expect(result.message).toContain('500');
      expect(await probe({ url: new URL(http.url), expectedStatusCodes: [500] })).toMatchObject({
        ok: true,
        status: 500,
      });
    } finally {
      http.status = 204;
    }
  });

  it('does not follow redirects', async () => {
    for (const target of [http, https]) {
      const result = await probe({ url: new URL(`${target.url}redirect`) });
      expect(result).toMatchObject({ ok: false, status: 302, reason: 'BadStatus' });
      expect(target.requests.some((r) => r.url === '/elsewhere')).toBe(false);
    }
  });

  it('a certificate the prober does not trust is TLSFailed', async () => {
    const result = await probe({ url: new URL(https.url), tls: {} });
    expect(result).toMatchObject({ ok: false, reason: 'TLSFailed' });
    expect(result.message).toMatch(/self.signed|certificate/i);
  });

  it('a proxy that cannot egress: CONNECT refused with 502 (https), 502 from the proxy (http)', async () => {
    const cannot = await startForwardProxy({ host: '127.0.0.1', port: 0, behaviour: 'refuse-egress' });
    try {
      const at = { proxyHost: cannot.host, proxyPort: cannot.port };
      const tunnelled = await probe({ ...at, url: new URL(https.url) });
      expect(tunnelled).toMatchObject({ ok: false, reason: 'ProxyRefused' });
      expect(tunnelled.message).toContain('502');
      expect(await probe({ ...at, url: new URL(http.url) })).toMatchObject({
        ok: false,
        reason: 'BadStatus',
        status: 502,
      });
    } finally {
      await cannot.close();
    }
  });

  it('a proxy that accepts TCP and never answers times out, bounded by the timeout', async () => {
    const hang = await startForwardProxy({ host: '127.0.0.1', port: 0, behaviour: 'hang' });
    try {
      const at = { proxyHost: hang.host, proxyPort: hang.port, timeoutMs: 300 };
      const tunnelled = await probe({ ...at, url: new URL(https.url) });
      expect(tunnelled).toMatchObject({ ok: false, reason: 'Timeout' });
      expect(tunnelled.message).toContain('CONNECT');
      const plain = await probe({ ...at, url: new URL(http.url) });
      expect(plain).toMatchObject({ ok: false, reason: 'Timeout' });
      expect(plain.message).toContain('no response');
    } finally {
      await hang.close();
    }
  });

  it.each<[FaultMode, string, string]>([
    ['close', 'ProtocolError', 'closed'],
    ['garbage', 'ProtocolError', 'not HTTP'],
    ['status-403', 'ProxyRefused', '403'],
    ['status-407', 'AuthFailed', 'asks for credentials and the Proxy has none (407 to CONNECT'],
    ['status-502', 'ProxyRefused', '502'],
  ])('https through a proxy that %s: %s', async (mode, reason, inMessage) => {
    const fault = await startFaultProxy(mode);
    try {
      const result = await probe({ proxyHost: fault.host, proxyPort: fault.port, url: new URL(https.url) });
      expect(result).toMatchObject({ ok: false, reason });
      expect(result.message).toContain(inMessage);
      expect(fault.connections).toBe(1);
    } finally {
      await fault.close();
    }
  });

  it.each<[FaultMode, Partial<ProbeResult>]>([
    ['close', { reason: 'ProtocolError' }],
    ['garbage', { reason: 'ProtocolError' }],
    // Only a proxy answers 407 to a plain request: its own verdict, not the target's status.
    [
      'status-407',
      { reason: 'AuthFailed', message: expect.stringContaining('(407 to GET http://') as string },
    ],
  ])('http through a proxy that %s', async (mode, expected) => {
    const fault = await startFaultProxy(mode);
    try {
      expect(
        await probe({ proxyHost: fault.host, proxyPort: fault.port, url: new URL(http.url) }),
      ).toMatchObject({
        ok: false,
        ...expected,
      });
    } finally {
      await fault.close();
    }
  });

  it('nothing listening is ConnectFailed', async () => {
    const port = await freePort();
    const result = await probe({ proxyHost: '127.0.0.1', proxyPort: port, url: new URL(http.url) });
    expect(result).toMatchObject({ ok: false, reason: 'ConnectFailed' });
    expect(result.message).toContain('ECONNREFUSED');
  });

  it('an abort ends a hanging probe at once', async () => {
    const hang = await startForwardProxy({ host: '127.0.0.1', port: 0, behaviour: 'hang' });
    try {
      const controller = new AbortController();
      const pending = probe({
        proxyHost: hang.host,
        proxyPort: hang.port,
        url: new URL(http.url),
        timeoutMs: 60_000,
        signal: controller.signal,
      });
      // The caller gives up mid-probe (a trigger, not a wait: the assertion is on the outcome).
      setTimeout(() => controller.abort(), 50);
      expect(await pending).toMatchObject({ ok: false, reason: 'Aborted' });
    } finally {
      await hang.close();
    }
  });
});
