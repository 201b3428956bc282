/**
 * The `local` provider's forward proxy under the egress policy (issue 50):
 * with `allowNonLoopback` off it dials the loopback only, as before; with it
 * on, a target off the loopback is judged by the policy before anything is
 * dialled, so cloud metadata, private ranges (however spelled) and closed
 * ports are refused with 403 naming the rule, and the loopback still works.
 * Only refusals are shown off the loopback: nothing here may leave the
 * machine.
 */
import { request } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEgressPolicy, DEFAULT_EGRESS_POLICY } from '../../forwarding/egress-policy.js';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { startLoopbackTarget, type LoopbackTarget } from './gateway-helpers.js';

/** A CONNECT through the proxy: its status line and body. */
function tunnel(proxy: ForwardProxy, authority: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: proxy.host, port: proxy.port });
    let text = '';
    socket.setEncoding('latin1');
    socket.once('connect', () => socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
    socket.on('data', (chunk: string) => {
      text += chunk;
      if (text.includes('\r\n\r\n') && /^HTTP\/1\.1 200/.test(text)) {
        socket.destroy();
        resolve({ status: 200, text });
      }
    });
    socket.once('end', () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text }));
    socket.once('error', reject);
  });
}

/** An absolute-form GET through the proxy: status and body. */
function get(proxy: ForwardProxy, url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: proxy.host, port: proxy.port, method: 'GET', path: url }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.once('error', reject);
    req.end();
  });
}

describe('the local forward proxy and the egress policy', () => {
  let target: LoopbackTarget;
  let open: ForwardProxy;
  let closed: ForwardProxy;

  beforeAll(async () => {
    target = await startLoopbackTarget();
    open = await startForwardProxy({
      host: '127.0.0.1',
      port: 0,
      allowNonLoopback: true,
      egress: createEgressPolicy(DEFAULT_EGRESS_POLICY),
    });
    closed = await startForwardProxy({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    await open?.close();
    await closed?.close();
    await target?.close();
  });

  it.each([
    ['169.254.169.254:80', '169.254.0.0/16'],
    ['10.0.0.1:443', '10.0.0.0/8'],
    ['[::ffff:10.1.2.3]:443', '10.0.0.0/8'],
    ['[fd00::1]:443', 'fc00::/7'],
    ['0xa.0.0.1:443', '10.0.0.0/8'],
    ['93.184.216.34:25', 'port 25'],
  ])(
    'with allowNonLoopback, CONNECT %s is refused (403, %s) before anything is dialled',
    async (authority, rule) => {
      const answer = await tunnel(open, authority);
      expect(answer.status).toBe(403);
      expect(answer.text).toContain('refused by the egress policy');
      expect(answer.text).toContain(rule);
    },
  );

  it('with allowNonLoopback, plain HTTP to cloud metadata is refused and the loopback still works', async () => {
    const metadata = await get(open, 'http://169.254.169.254/computeMetadata/v1/');
    expect(metadata.status).toBe(403);
    expect(metadata.body).toContain('169.254.0.0/16');
    const home = await get(open, `${target.url}/ip`);
    expect(home.status).toBe(200);
    expect((await tunnel(open, `127.0.0.1:${target.port}`)).status).toBe(200);
  });

  it('without it, anything off the loopback is refused, as before', async () => {
    expect((await tunnel(closed, '169.254.169.254:80')).status).toBe(403);
    expect((await get(closed, 'http://10.0.0.1/')).status).toBe(403);
    expect((await get(closed, `${target.url}/ip`)).status).toBe(200);
  });

  it('the provider config takes an egress block and names a bad one', () => {
    const parsed = localConfigSchema.parse({
      allowNonLoopbackEgress: true,
      egress: { denyCidrs: ['100.80.0.0/16'] },
    });
    expect(parsed.egress.denyCidrs).toEqual(['100.80.0.0/16']);
    expect(() => localConfigSchema.parse({ egress: { denyCidrs: ['10.0.0.0/33'] } })).toThrow(/denyCidrs/);
  });
});
