/**
 * A TLS terminator that requires a client certificate, in front of a
 * plaintext TCP service (the Temporal dev server): Debian's nginx stream
 * module from infra/scripts/install-nginx.sh, run from its extracted tree.
 * Its certificates come from the tests' PKI (pki.ts).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { dirname, join } from 'node:path';
import type { Pki } from './pki.js';
import { freePort } from './ports.js';
import { spawnServer, waitUntil } from './process.js';
import { runInfraScript, unpackedPackageEnv } from './tools.js';

export interface TlsTerminator {
  address: string;
  /** The access and error logs so far (connections, refused certificates). */
  log(): string;
  stop(): Promise<void>;
}

/**
 * nginx's stream module on a free loopback port, forwarding to `target`,
 * answering ALPN h2 (Temporal's Rust core requires it) and requiring a
 * client certificate signed by `pki.ca`.
 */
export async function startTlsTerminator(dir: string, pki: Pki, target: string): Promise<TlsTerminator> {
  const binary = await runInfraScript('install-nginx.sh', { stderr: 'capture' });
  const tree = dirname(dirname(dirname(binary)));
  const port = await freePort();
  const prefix = join(dir, 'nginx');
  mkdirSync(join(prefix, 'logs'), { recursive: true });
  const conf = join(prefix, 'nginx.conf');
  writeFileSync(
    conf,
    [
      `load_module ${join(tree, 'usr/lib/nginx/modules/ngx_stream_module.so')};`,
      'daemon off;',
      'master_process off;',
      `pid ${join(prefix, 'nginx.pid')};`,
      `error_log ${join(prefix, 'logs/error.log')} info;`,
      'events { worker_connections 256; }',
      'stream {',
      `  log_format tls '$remote_addr client="$ssl_client_s_dn" verify=$ssl_client_verify alpn=$ssl_alpn_protocol';`,
      `  access_log ${join(prefix, 'logs/access.log')} tls;`,
      '  server {',
      `    listen 127.0.0.1:${port} ssl;`,
      `    ssl_certificate ${pki.serverCert};`,
      `    ssl_certificate_key ${pki.serverKey};`,
      '    ssl_alpn h2;',
      `    ssl_client_certificate ${pki.ca};`,
      // Refuse any peer without a certificate this CA signed.
      '    ssl_verify_client on;',
      `    proxy_pass ${target};`,
      '  }',
      '}',
      '',
    ].join('\n'),
  );
  const logPath = join(prefix, 'logs/nginx.out');
  const proc = spawnServer(
    'nginx',
    binary,
    ['-p', prefix, '-c', conf, '-e', join(prefix, 'logs/error.log')],
    logPath,
    { env: unpackedPackageEnv(tree) },
  );
  const read = (f: string) => {
    try {
      return readFileSync(join(prefix, 'logs', f), 'utf8');
    } catch {
      return '';
    }
  };
  try {
    await waitUntil(
      'nginx to listen',
      () =>
        new Promise<boolean>((resolve) => {
          const socket = createConnection({ host: '127.0.0.1', port }, () => {
            socket.destroy();
            resolve(true);
          });
          socket.on('error', () => resolve(false));
        }),
      { timeoutMs: 20_000, process: proc, logPath },
    );
  } catch (error) {
    await proc.stop();
    throw new Error(`${(error as Error).message}: ${read('error.log')}`, { cause: error });
  }
  return {
    address: `127.0.0.1:${port}`,
    log: () => read('access.log') + read('error.log'),
    stop: () => proc.stop(),
  };
}
