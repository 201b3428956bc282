import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { request } from 'node:https';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { stringify } from 'yaml';
import { Lifecycle } from '../cli/lifecycle.js';
import { readyOrStopped, retryWhenPortTaken, spawnServer, type ManagedProcess } from './process.js';
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
  /**
   * Also run kube-controller-manager (from binDir) with the controllers that
   * need no nodes: namespace deletion and owner-reference garbage collection.
   */
  controllerManager?: boolean;
  /** Record the servers' pids here (dev: reaped by the next start if we die). */
  pidDir?: string;
  /** Where each server's stop is logged; default nowhere. */
  logger?: Logger;
}

/**
 * The controllers that work without nodes: a namespace being deleted is
 * emptied and finalized; objects whose owners are gone are collected. Both
 * run under their own service accounts (--use-service-account-credentials),
 * bound by the apiserver's bootstrap RBAC.
 */
export const CONTROLLERS = ['namespace-controller', 'garbage-collector-controller'];
const KCM_USER = 'system:kube-controller-manager';

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
 * kubeconfig it writes. No scheduler and no kubelet (pods stay Pending);
 * with `controllerManager`, the namespace and garbage-collector controllers
 * run, otherwise a deleted namespace stays Terminating.
 */
export async function startLocalKubeApiServer(opts: LocalKubeApiServerOptions): Promise<LocalKubeApiServer> {
  const host = '127.0.0.1';
  const dir = opts.dataDir;
  const scope = new Lifecycle(opts.logger ?? pino({ level: 'silent' }), { name: 'kube-apiserver' });
  return scope.start(async () => {
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
    // One line per user: the admin (ours and the user's kubectl) and the
    // controller-manager, which bootstrap RBAC knows by this name. A file
    // from before the controller-manager gets its line added.
    const tokenFile = join(dir, 'tokens.csv');
    const lines = existsSync(tokenFile) ? readFileSync(tokenFile, 'utf8').split('\n').filter(Boolean) : [];
    const tokenOf = (user: string) => lines.find((l) => l.split(',')[1] === user)?.split(',')[0];
    let token = tokenOf('admin');
    let kcmToken = tokenOf(KCM_USER);
    if (!token || !kcmToken) {
      if (!token) lines.unshift(`${(token = randomBytes(24).toString('hex'))},admin,admin,system:masters`);
      if (!kcmToken) lines.push(`${(kcmToken = randomBytes(24).toString('hex'))},${KCM_USER},${KCM_USER}`);
      writeFileSync(tokenFile, lines.join('\n') + '\n', { mode: 0o600 });
    }

    const etcdLog = join(dir, 'etcd.log');
    const { etcd, etcdClientPort } = await retryWhenPortTaken(etcdLog, async () => {
      const clientPort = await freePort(host);
      const peerPort = await freePort(host);
      const proc: ManagedProcess = spawnServer(
        'etcd',
        join(opts.binDir, 'etcd'),
        [
          '--data-dir',
          etcdDir,
          '--listen-client-urls',
          `http://${host}:${clientPort}`,
          '--advertise-client-urls',
          `http://${host}:${clientPort}`,
          '--listen-peer-urls',
          `http://${host}:${peerPort}`,
          '--initial-advertise-peer-urls',
          `http://${host}:${peerPort}`,
          '--initial-cluster',
          `default=http://${host}:${peerPort}`,
          '--log-level',
          'warn',
          ...(opts.persist ? [] : ['--unsafe-no-fsync']),
        ],
        etcdLog,
        { pidDir: opts.pidDir },
      );
      await readyOrStopped(proc, etcdLog, [
        {
          what: 'etcd /health',
          probe: () => etcdHealthy(`http://${host}:${clientPort}/health`),
          timeoutMs: 60_000,
          intervalMs: 100,
        },
      ]);
      return { etcd: proc, etcdClientPort: clientPort };
    });
    scope.defer('etcd', () => etcd.stop());

    const apiLog = join(dir, 'kube-apiserver.log');
    const caPath = join(certDir, 'apiserver.crt');
    const { apiserver, url } = await retryWhenPortTaken(apiLog, async (attempt) => {
      // The preferred port first; a fresh free one when it was taken meanwhile.
      const port = attempt === 1 ? await preferredOrFreePort(opts.port, host) : await freePort(host);
      const proc = spawnServer(
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
        { pidDir: opts.pidDir },
      );
      const serving = `https://${host}:${port}`;
      await readyOrStopped(proc, apiLog, [
        {
          what: 'kube-apiserver /readyz',
          probe: async () => {
            if (!existsSync(caPath)) return false;
            const res = await get(`${serving}/readyz`, token, readFileSync(caPath));
            return res.status === 200;
          },
          timeoutMs: 90_000,
          intervalMs: 250,
        },
      ]);
      return { apiserver: proc, url: serving };
    });
    scope.defer('kube-apiserver', () => apiserver.stop());

    const ca = readFileSync(caPath).toString('base64');
    const kubeconfigPath = join(dir, 'kubeconfig');
    writeFileSync(kubeconfigPath, kubeconfigYaml(url, ca, 'admin', token), { mode: 0o600 });

    if (opts.controllerManager) {
      const controllerManager = await startControllerManager(
        opts,
        dir,
        kubeconfigYaml(url, ca, KCM_USER, kcmToken),
      );
      scope.defer('kube-controller-manager', () => controllerManager.stop());
    }

    return { url, kubeconfigPath, logDir: dir, stop: () => scope.close() };
  });
}

function kubeconfigYaml(url: string, caBase64: string, user: string, token: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      { name: 'egress-proxies-local', cluster: { server: url, 'certificate-authority-data': caBase64 } },
    ],
    users: [{ name: user, user: { token } }],
    contexts: [
      {
        name: 'egress-proxies-local',
        context: { cluster: 'egress-proxies-local', user, namespace: 'default' },
      },
    ],
    'current-context': 'egress-proxies-local',
  });
}

/** kube-controller-manager with its own credentials, ready when its /healthz answers. */
async function startControllerManager(
  opts: LocalKubeApiServerOptions,
  dir: string,
  kubeconfig: string,
): Promise<ManagedProcess> {
  const host = '127.0.0.1';
  const binary = join(opts.binDir, 'kube-controller-manager');
  if (!existsSync(binary)) {
    throw new Error(
      `${binary} is missing: run infra/scripts/build-kube.sh (it adds kube-controller-manager to an older build)`,
    );
  }
  const kubeconfigPath = join(dir, 'controller-manager.kubeconfig');
  writeFileSync(kubeconfigPath, kubeconfig, { mode: 0o600 });
  const certDir = join(dir, 'controller-manager-certs');
  mkdirSync(certDir, { recursive: true });
  const logPath = join(dir, 'kube-controller-manager.log');
  return retryWhenPortTaken(logPath, async () => {
    const port = await freePort(host);
    const proc = spawnServer(
      'kube-controller-manager',
      binary,
      [
        `--kubeconfig=${kubeconfigPath}`,
        `--controllers=${CONTROLLERS.join(',')}`,
        '--use-service-account-credentials=true',
        '--leader-elect=false',
        `--bind-address=${host}`,
        `--secure-port=${port}`,
        `--cert-dir=${certDir}`,
        '--v=0',
      ],
      logPath,
      { pidDir: opts.pidDir },
    );
    await readyOrStopped(proc, logPath, [
      {
        what: 'kube-controller-manager /healthz',
        probe: () => healthz(`https://${host}:${port}/healthz`),
        timeoutMs: 60_000,
        intervalMs: 250,
      },
    ]);
    return proc;
  });
}

/** Its serving cert is self-signed at start; only liveness is asked, nothing is sent. Also node.ts's scheduler. */
export function healthz(url: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const req = request(url, { rejectUnauthorized: false, timeout: 5_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** etcd's own health endpoint: 200 and `"health":"true"` once it serves. */
function etcdHealthy(url: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const req = httpGet(url, { timeout: 5_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve(res.statusCode === 200 && /"health":\s*"true"/.test(body)));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}
