/**
 * A TLS terminator that requires a client certificate, in front of a
 * plaintext TCP service (the Temporal dev server): Debian's nginx stream
 * module from infra/scripts/install-nginx.sh, run from its extracted tree. And the
 * certificates for it, made with openssl by the test.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { eventually } from './temporal.js';

const run = promisify(execFile);
const INSTALL_SCRIPT = fileURLToPath(new URL('../../infra/scripts/install-nginx.sh', import.meta.url));

export interface Pki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** Signed by another CA: the terminator must refuse it. */
  strangerCert: string;
  strangerKey: string;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  await run('openssl', args, { cwd });
}

/** A CA, a server certificate for localhost/127.0.0.1, a client certificate, and one from a stranger CA. */
export async function makePki(dir: string): Promise<Pki> {
  const subj = (cn: string) => ['-subj', `/CN=${cn}`];
  const ca = async (name: string) => {
    await openssl(
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        `${name}.key`,
        '-out',
        `${name}.crt`,
        '-days',
        '1',
        ...subj(`${name} test CA`),
      ],
      dir,
    );
  };
  const leaf = async (name: string, signer: string, ext: string) => {
    writeFileSync(join(dir, `${name}.ext`), ext);
    await openssl(
      [
        'req',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        `${name}.key`,
        '-out',
        `${name}.csr`,
        ...subj(name),
      ],
      dir,
    );
    await openssl(
      [
        'x509',
        '-req',
        '-in',
        `${name}.csr`,
        '-CA',
        `${signer}.crt`,
        '-CAkey',
        `${signer}.key`,
        '-CAcreateserial',
        '-out',
        `${name}.crt`,
        '-days',
        '1',
        '-extfile',
        `${name}.ext`,
      ],
      dir,
    );
  };
  await ca('ca');
  await ca('stranger-ca');
  await leaf('server', 'ca', 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  await leaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
  await leaf('stranger', 'stranger-ca', 'extendedKeyUsage=clientAuth\n');
  const p = (f: string) => join(dir, f);
  return {
    ca: p('ca.crt'),
    serverCert: p('server.crt'),
    serverKey: p('server.key'),
    clientCert: p('client.crt'),
    clientKey: p('client.key'),
    strangerCert: p('stranger.crt'),
    strangerKey: p('stranger.key'),
  };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  await new Promise((r) => server.close(r));
  return port;
}

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
  const { stdout } = await run('bash', [INSTALL_SCRIPT], { maxBuffer: 1 << 20 });
  const binary = stdout.trim().split('\n').pop()!;
  const tree = dirname(dirname(dirname(binary)));
  const libs = ['usr/lib', 'lib']
    .flatMap((d) => {
      try {
        return readdirSync(join(tree, d))
          .filter((x) => x.includes('-linux-'))
          .map((x) => join(tree, d, x));
      } catch {
        return [];
      }
    })
    .join(':');
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
  const proc: ChildProcess = spawn(binary, ['-p', prefix, '-c', conf, '-e', join(prefix, 'logs/error.log')], {
    env: { ...process.env, LD_LIBRARY_PATH: libs },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const read = (f: string) => {
    try {
      return readFileSync(join(prefix, 'logs', f), 'utf8');
    } catch {
      return '';
    }
  };
  await eventually(
    'nginx to listen',
    () =>
      new Promise<true | undefined>((resolve, reject) => {
        if (proc.exitCode !== null) {
          reject(new Error(`nginx exited ${proc.exitCode}: ${output} ${read('error.log')}`));
          return;
        }
        const socket = createConnection({ host: '127.0.0.1', port }, () => {
          socket.destroy();
          resolve(true);
        });
        socket.on('error', () => resolve(undefined));
      }),
    { timeoutMs: 20_000 },
  );
  return {
    address: `127.0.0.1:${port}`,
    log: () => read('access.log') + read('error.log'),
    stop: async () => {
      if (proc.exitCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    },
  };
}
