import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { spawnServer, waitUntil, type ManagedProcess } from './process.js';
import { freePort, preferredOrFreePort } from './ports.js';

export interface LocalKubeApiServer {
  url: string;
  kubeconfigPath: string;
  logDir: string;
  stop(): Promise<void>;
}

export interface LocalKubeApiServerOptions {
  binDir: string;
  dataDir: string;
  /** Preferred secure port; another free one is taken when in use. */
  port?: number;
  /** Keep etcd data across restarts (dev); tests start empty. */
  persist?: boolean;
}

function get(url: string, token: string, ca: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { authorization: `Bearer ${token}` }, ca, timeout: 5_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/**
 * Runs etcd and kube-apiserver on the loopback the way controller-runtime's
 * envtest does: a generated service-account key, a static admin token in
 * system:masters, the apiserver's self-signed serving cert trusted by the
 * kubeconfig it writes. Nothing but the apiserver runs: no scheduler, no
 * kubelet, no controllers (pods stay Pending, namespaces never finish
 * terminating).
 */
export async function startLocalKubeApiServer(opts: LocalKubeApiServerOptions): Promise<LocalKubeApiServer> {
  const host = '127.0.0.1';
  const dir = opts.dataDir;
  const certDir = join(dir, 'certs');
  const etcdDir = join(dir, 'etcd');
  mkdirSync(certDir, { recursive: true });
  mkdirSync(etcdDir, { recursive: true });

  const saKey = join(dir, 'sa.key');
  const saPub = join(dir, 'sa.pub');
  if (!existsSync(saKey)) {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    writeFileSync(saKey, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    writeFileSync(saPub, publicKey.export({ type: 'spki', format: 'pem' }));
  }
  const tokenFile = join(dir, 'tokens.csv');
  let token: string;
  if (existsSync(tokenFile)) {
    token = readFileSync(tokenFile, 'utf8').split(',')[0]!;
  } else {
    token = randomBytes(24).toString('hex');
    writeFileSync(tokenFile, `${token},admin,admin,system:masters\n`, { mode: 0o600 });
  }

  const etcdClientPort = await freePort(host);
  const etcdPeerPort = await freePort(host);
  const etcdLog = join(dir, 'etcd.log');
  const etcd: ManagedProcess = spawnServer(
    'etcd',
    join(opts.binDir, 'etcd'),
    [
      '--data-dir',
      etcdDir,
      '--listen-client-urls',
      `http://${host}:${etcdClientPort}`,
      '--advertise-client-urls',
      `http://${host}:${etcdClientPort}`,
      '--listen-peer-urls',
      `http://${host}:${etcdPeerPort}`,
      '--initial-advertise-peer-urls',
      `http://${host}:${etcdPeerPort}`,
      '--initial-cluster',
      `default=http://${host}:${etcdPeerPort}`,
      '--log-level',
      'warn',
      ...(opts.persist ? [] : ['--unsafe-no-fsync']),
    ],
    etcdLog,
  );

  const port = await preferredOrFreePort(opts.port, host);
  const apiLog = join(dir, 'kube-apiserver.log');
  const apiserver = spawnServer(
    'kube-apiserver',
    join(opts.binDir, 'kube-apiserver'),
    [
      `--etcd-servers=http://${host}:${etcdClientPort}`,
      `--cert-dir=${certDir}`,
      `--secure-port=${port}`,
      `--bind-address=${host}`,
      `--advertise-address=${host}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--service-account-issuer=https://kubernetes.default.svc',
      `--service-account-key-file=${saPub}`,
      `--service-account-signing-key-file=${saKey}`,
      `--token-auth-file=${tokenFile}`,
      '--authorization-mode=RBAC',
      '--disable-admission-plugins=ServiceAccount',
      '--allow-privileged=true',
      // Open watches (every informer) would hold a graceful stop until the SIGKILL timeout.
      '--shutdown-watch-termination-grace-period=2s',
      '--v=0',
    ],
    apiLog,
  );

  const stop = async () => {
    await apiserver.stop();
    await etcd.stop();
  };

  const url = `https://${host}:${port}`;
  const caPath = join(certDir, 'apiserver.crt');
  try {
    await waitUntil(
      'kube-apiserver /readyz',
      async () => {
        if (!existsSync(caPath)) return false;
        const res = await get(`${url}/readyz`, token, readFileSync(caPath));
        return res.status === 200;
      },
      { timeoutMs: 90_000, intervalMs: 250, process: apiserver, logPath: apiLog },
    );
  } catch (error) {
    await stop();
    throw error;
  }

  const kubeconfigPath = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfigPath,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'egress-proxies-local',
          cluster: { server: url, 'certificate-authority-data': readFileSync(caPath).toString('base64') },
        },
      ],
      users: [{ name: 'admin', user: { token } }],
      contexts: [
        {
          name: 'egress-proxies-local',
          context: { cluster: 'egress-proxies-local', user: 'admin', namespace: 'default' },
        },
      ],
      'current-context': 'egress-proxies-local',
    }),
    { mode: 0o600 },
  );

  return { url, kubeconfigPath, logDir: dir, stop };
}
