/**
 * The bytes one health probe costs on the wire between the prober and the
 * proxy (what a vendor that bills traffic counts), measured through a real
 * forward proxy (the `local` provider's) with a byte-counting TCP relay in
 * front of it, for an http:// probe URL and an https:// one (a local TLS
 * target with a self-signed certificate: EC P-256, and RSA 2048; a public
 * site's chain adds its intermediate certificates). Each probe is a new
 * connection, as the prober's are.
 *
 *   npx tsx tests/bench/probe-bytes.ts
 */
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer as createNetServer, type AddressInfo, type Server } from 'node:net';
import { generate } from 'selfsigned';
import { startForwardProxy } from '../../providers/local/forward-proxy.js';
import { probeThroughProxy } from '../../prober/probe.js';

/** A TCP relay to `port` that counts the bytes each way, per connection. */
async function countingRelay(host: string, port: number) {
  const totals = { up: 0, down: 0, connections: 0 };
  const server: Server = createNetServer((client) => {
    totals.connections++;
    const upstream = connect({ host, port });
    client.on('data', (b: Buffer) => (totals.up += b.length));
    upstream.on('data', (b: Buffer) => (totals.down += b.length));
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    totals,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const answer204 = (_req: IncomingMessage, res: ServerResponse) => res.writeHead(204).end();

async function listen(server: ReturnType<typeof createHttpServer>): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function main(): Promise<void> {
  const proxy = await startForwardProxy({ host: '127.77.250.1', port: 0 });
  const relay = await countingRelay(proxy.host, proxy.port);
  const http = createHttpServer(answer204);
  const targets: Array<{ name: string; url: string; ca?: string; close: () => void }> = [
    {
      name: 'http://…/generate_204 (plain HTTP, absolute form)',
      url: `http://127.0.0.1:${await listen(http)}/generate_204`,
      close: () => http.close(),
    },
  ];
  for (const keyType of ['ec', 'rsa'] as const) {
    const pems = await generate([{ name: 'commonName', value: '127.0.0.1' }], {
      keyType,
      ...(keyType === 'ec' ? { curve: 'P-256' } : { keySize: 2048 }),
      algorithm: 'sha256',
      extensions: [
        { name: 'basicConstraints', cA: true },
        { name: 'subjectAltName', altNames: [{ type: 7, ip: '127.0.0.1' }] },
      ],
    });
    const https = createHttpsServer({ key: pems.private, cert: pems.cert }, answer204);
    targets.push({
      name: `https://…/generate_204 (CONNECT + TLS 1.3, ${keyType === 'ec' ? 'EC P-256' : 'RSA 2048'} certificate of ${pems.cert.length} PEM chars)`,
      url: `https://127.0.0.1:${await listen(https)}/generate_204`,
      ca: pems.cert,
      close: () => https.close(),
    });
  }
  const runs = 5;
  for (const t of targets) {
    const before = { ...relay.totals };
    for (let i = 0; i < runs; i++) {
      const result = await probeThroughProxy({
        proxyHost: '127.0.0.1',
        proxyPort: relay.port,
        url: new URL(t.url),
        timeoutMs: 5_000,
        expectedStatusCodes: [204],
        ...(t.ca ? { tls: { ca: t.ca } } : {}),
      });
      if (!result.ok) throw new Error(`${t.name}: probe failed: ${result.reason} ${result.message}`);
    }
    const up = (relay.totals.up - before.up) / runs;
    const down = (relay.totals.down - before.down) / runs;
    console.log(`${t.name}: ${up} bytes up, ${down} bytes down, ${up + down} in all per probe`);
    t.close();
  }
  await relay.close();
  await proxy.close();
}

void main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
