/**
 * The tests' one PKI: a CA of their own and the certificates it signs, EC
 * P-256, made in memory (selfsigned). A server on the loopback (a fake
 * cloud API, Redis, the TLS terminator in front of Temporal) presents one
 * of them, and its client trusts the CA's file; a client certificate and a
 * stranger's (signed by another CA) for a server that requires one.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generate } from 'selfsigned';

interface KeyPair {
  key: string;
  cert: string;
}

async function authority(commonName: string): Promise<KeyPair> {
  const ca = await generate([{ name: 'commonName', value: commonName }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    ],
  });
  return { key: ca.private, cert: ca.cert };
}

async function leaf(
  commonName: string,
  signer: KeyPair,
  use:
    | { server: true; altNames: Array<{ type: 2; value: string } | { type: 7; ip: string }> }
    | { client: true },
): Promise<KeyPair> {
  const cert = await generate([{ name: 'commonName', value: commonName }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    ca: { key: signer.key, cert: signer.cert },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true },
      'server' in use ? { name: 'extKeyUsage', serverAuth: true } : { name: 'extKeyUsage', clientAuth: true },
      ...('server' in use ? [{ name: 'subjectAltName' as const, altNames: use.altNames }] : []),
    ],
  });
  return { key: cert.private, cert: cert.cert };
}

/** A server's certificate for 127.0.0.1, in memory, and its CA's PEM in a file of its own (what a client is given). */
export interface ServerTls extends KeyPair {
  caFile: string;
  /** SHA-256 of the certificate's DER, upper-case hex without separators (a Proxmox fingerprint). */
  fingerprint: string;
}

/** A CA named after `name` and a certificate it signed for 127.0.0.1. */
export async function serverTls(name: string): Promise<ServerTls> {
  const ca = await authority(`egress-proxies ${name} test CA`);
  const server = await leaf('127.0.0.1', ca, { server: true, altNames: [{ type: 7, ip: '127.0.0.1' }] });
  const caFile = join(mkdtempSync(join(tmpdir(), `ep-${name}-ca-`)), 'ca.pem');
  writeFileSync(caFile, ca.cert);
  const der = Buffer.from(
    server.cert.replace(/-----(BEGIN|END) CERTIFICATE-----/g, '').replace(/\s+/g, ''),
    'base64',
  );
  const fingerprint = createHash('sha256').update(der).digest('hex').toUpperCase();
  return { ...server, caFile, fingerprint };
}

/** PEM files under one directory. */
export interface Pki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** Signed by another CA: a server that requires client certificates must refuse it. */
  strangerCert: string;
  strangerKey: string;
}

/** A CA, a server certificate for localhost/127.0.0.1, a client certificate, and one from a stranger CA, as files in `dir`. */
export async function makePki(dir: string): Promise<Pki> {
  const ca = await authority('ca test CA');
  const strangerCa = await authority('stranger-ca test CA');
  const server = await leaf('server', ca, {
    server: true,
    altNames: [
      { type: 2, value: 'localhost' },
      { type: 7, ip: '127.0.0.1' },
    ],
  });
  const client = await leaf('client', ca, { client: true });
  const stranger = await leaf('stranger', strangerCa, { client: true });
  // As openssl writes them: keys readable by their owner only.
  const write = (file: string, pem: string) => {
    const path = join(dir, file);
    writeFileSync(path, pem, { mode: file.endsWith('.key') ? 0o600 : 0o644 });
    return path;
  };
  return {
    ca: write('ca.crt', ca.cert),
    serverCert: write('server.crt', server.cert),
    serverKey: write('server.key', server.key),
    clientCert: write('client.crt', client.cert),
    clientKey: write('client.key', client.key),
    strangerCert: write('stranger.crt', stranger.cert),
    strangerKey: write('stranger.key', stranger.key),
  };
}
