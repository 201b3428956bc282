/**
 * A one-node Kubernetes cluster's node beside a local kube-apiserver: a real
 * kubelet and kube-scheduler (built from the same Kubernetes module as the
 * apiserver), Debian's containerd and runc, and a CNI bridge network whose
 * pod addresses exist only inside the network namespaces the node creates.
 * Images are imported from OCI archives built here
 * (infra/scripts/build-node-images.sh); nothing is ever pulled.
 *
 * Everything the node makes is named from one random id and lives under its
 * data directory, so several nodes (parallel test files, two `dev`
 * instances) never share a socket, a bridge, a cgroup or a mount:
 *
 *   bridge        epn<id>, the pods' gateway on it (the node's InternalIP)
 *   cgroups       /egress-node-<id> in every hierarchy (the kubelet's cgroupRoot)
 *   containerd    <dataDir>/containerd.sock, root and state under <dataDir>;
 *                 runc's state and the pods' network namespaces too
 *   kubelet       <dataDir>/kubelet (root dir), <dataDir>/pod-logs
 *
 * What outlives a SIGKILL of its starter: the containerd shims (they
 * daemonize) and the pods' processes, the mounts, the bridge and the cgroups.
 * `node.json` in the data directory records the names, and `reapNode` (run
 * by stop(), by the next start on the same directory, by the tests' start
 * for any node whose owner died, and by node-reaper.ts when the owner dies
 * however it dies) removes each of them: the processes in the node's
 * cgroups, every process whose command line names the data directory,
 * every mount under it, the bridge, the cgroups.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions, type V1Node } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { stringify } from 'yaml';
import { Lifecycle } from '../cli/lifecycle.js';
import { processRunning } from './instance.js';
import { healthz } from './kube.js';
import { freePort } from './ports.js';
import { spawnServer, waitUntil, type ManagedProcess } from './process.js';

const execFileAsync = promisify(execFile);

/** The images build-node-images.sh makes, by file and by the reference a pod names. */
export const NODE_IMAGES = {
  squid: { file: 'squid.oci.tar', ref: 'egress-proxies.local/squid:debian12' },
  nosquid: { file: 'nosquid.oci.tar', ref: 'egress-proxies.local/nosquid:debian12' },
  pause: { file: 'pause.oci.tar', ref: 'egress-proxies.local/pause:1' },
} as const;

/** The kernel tunables the kubelet writes at start (container_manager_linux.go setupKernelTunables). */
const KUBELET_TUNABLES = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];

/** Where Debian's containernetworking-plugins installs the CNI plugins. */
const CNI_BIN_DIR = '/usr/lib/cni';
/** Each server's SIGTERM grace before SIGKILL. */
const SERVER_STOP_TIMEOUT_MS = 15_000;
const CGROUP_FS = '/sys/fs/cgroup';

export interface LocalNodeOptions {
  /** kubelet and kube-scheduler (build-kube.sh node). */
  binDir: string;
  /** build-node-images.sh's output directory. */
  imagesDir: string;
  /** An admin kubeconfig of the apiserver the node joins. */
  kubeconfigPath: string;
  /** The node's own directory; emptied first (after reaping what a dead run left in it). */
  dataDir: string;
  /** Record the servers' pids here (dev: reaped by the next start if we die). */
  pidDir?: string;
  /** Which images to import (default: all of NODE_IMAGES). */
  images?: ReadonlyArray<keyof typeof NODE_IMAGES>;
  /** Bound on the whole start (default 120 s). */
  timeoutMs?: number;
  /**
   * Six hex digits naming the node, its bridge and cgroups; random by
   * default. A fixed one (dev's) brings the same Node back after a restart.
   */
  id?: string;
  /** A /24 to use for the pods when no address or route here overlaps it; otherwise a free one is chosen. */
  preferredPodCidr?: string;
  /** Where each part's stop is logged; default nowhere. */
  logger?: Logger;
}

export interface LocalNode {
  /** The Node object's name. */
  name: string;
  /** The pod network (a /24) and its gateway on the host bridge: the node's InternalIP. */
  podCidr: string;
  gateway: string;
  bridge: string;
  /** The image references a pod names (imported into the node's containerd). */
  images: { squid: string; nosquid: string };
  /** Seconds the start took, and of that, the image imports. */
  startSeconds: number;
  importSeconds: number;
  logDir: string;
  stop(): Promise<void>;
}

/** What reapNode needs to undo a node, written before any of it exists. */
interface NodeRecord {
  id: string;
  ownerPid: number;
  dataDir: string;
  bridge: string;
  cgroupRoot: string;
  /** The node-reaper watching the owner: spared by the reap it would run itself. */
  reaperPid?: number;
}

const RECORD = 'node.json';

function readRecord(dataDir: string): NodeRecord | undefined {
  try {
    return JSON.parse(readFileSync(join(dataDir, RECORD), 'utf8')) as NodeRecord;
  } catch {
    return undefined;
  }
}

async function sh(file: string, args: string[], timeoutMs = 30_000): Promise<string> {
  const { stdout } = await execFileAsync(file, args, { timeout: timeoutMs, maxBuffer: 16 << 20 });
  return stdout;
}

/** The cgroup directories of a cgroup path: one per v1 hierarchy, or the one v2 directory. */
function cgroupDirs(cgroupRoot: string): string[] {
  if (existsSync(join(CGROUP_FS, 'cgroup.controllers'))) return [join(CGROUP_FS, cgroupRoot)];
  return readdirSync(CGROUP_FS, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'unified')
    .map((d) => join(CGROUP_FS, d.name, cgroupRoot));
}

/**
 * The kubelet refuses a cgroupRoot that does not exist in every hierarchy.
 * cgroup v1's cpuset starts a new group with no CPUs and no memory nodes:
 * they are copied from the parent, or nothing could join it.
 */
function createCgroups(cgroupRoot: string): void {
  for (const dir of cgroupDirs(cgroupRoot)) {
    mkdirSync(dir, { recursive: true });
    if (dir.includes('/cpuset/')) {
      for (const file of ['cpuset.cpus', 'cpuset.mems']) {
        const parent = readFileSync(join(dir, '..', file), 'utf8').trim();
        if (!readFileSync(join(dir, file), 'utf8').trim()) writeFileSync(join(dir, file), parent);
      }
    }
  }
}

/** Every pid in a cgroup directory and the groups below it. */
function cgroupPids(dir: string): number[] {
  const pids: number[] = [];
  const walk = (d: string) => {
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
      for (const line of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) {
        if (line.trim()) pids.push(Number(line));
      }
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) walk(join(d, e.name));
  };
  walk(dir);
  return pids;
}

/** Removes the groups below and including dir, deepest first (a v1 group goes only when empty). */
function removeCgroupTree(dir: string): void {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
  try {
    rmdirSync(dir);
  } catch {
    // Still has a process (reported by the caller's next pass) or already gone.
  }
}

/** This process and its ancestors: a caller whose own arguments name the directory is never killed. */
function ancestry(): Set<number> {
  const seen = new Set<number>();
  let pid = process.pid;
  while (pid > 1 && !seen.has(pid)) {
    seen.add(pid);
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      pid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      break;
    }
  }
  return seen;
}

/** Pids (not ours, nor our ancestors') whose command line mentions `needle`: the node's servers and shims. */
function pidsMentioning(needle: string): number[] {
  const found: number[] = [];
  const spared = ancestry();
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue;
    const pid = Number(entry);
    if (spared.has(pid)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(needle)) found.push(pid);
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

function killAll(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** Mount points under dir (the pods' root filesystems, /dev/shm, network namespaces), deepest first. */
function mountsUnder(dir: string): string[] {
  const points = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((p): p is string => Boolean(p))
    // mountinfo escapes spaces and the like as octal; our paths have none.
    .filter((p) => p === dir || p.startsWith(`${dir}/`));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

/**
 * Undoes everything a node made, whatever state it was left in: running,
 * half-started, or its starter SIGKILLed. Idempotent; safe on a directory
 * with no record (does nothing).
 */
export async function reapNode(dataDir: string, opts: { owner?: number } = {}): Promise<void> {
  const record = readRecord(dataDir);
  if (!record) return;
  if (opts.owner !== undefined && record.ownerPid !== opts.owner) return;
  const cgroups = cgroupDirs(record.cgroupRoot);
  // The pods' processes first: with them gone the shims exit, and no
  // container restarts while its mounts are taken away.
  for (let pass = 0; pass < 20; pass++) {
    const pids = [...new Set(cgroups.flatMap(cgroupPids))].filter((p) => p !== process.pid);
    if (pids.length === 0) break;
    killAll(pids);
    await new Promise((r) => setTimeout(r, 100));
  }
  for (let pass = 0; pass < 20; pass++) {
    const pids = pidsMentioning(`${record.dataDir}/`).filter((p) => p !== record.reaperPid);
    if (pids.length === 0) break;
    killAll(pids);
    await new Promise((r) => setTimeout(r, 100));
  }
  for (const point of mountsUnder(record.dataDir)) {
    await sh('umount', ['--lazy', point]).catch(() => undefined);
  }
  await sh('ip', ['link', 'delete', record.bridge]).catch(() => undefined);
  for (const dir of cgroups) removeCgroupTree(dir);
  rmSync(join(dataDir, RECORD), { force: true });
  if (record.reaperPid !== undefined && !ancestry().has(record.reaperPid)) {
    try {
      process.kill(record.reaperPid, 'SIGTERM');
    } catch {
      // gone already
    }
  }
}

/**
 * Starts node-reaper for this node, detached (its own session: no signal
 * to our group reaches it, and it outlives us), its stdin the pipe whose end
 * we hold. Run from source (tsx, vitest) the .ts goes through tsx's loader,
 * resolved from the repository's node_modules; built, the .js runs as is.
 */
function startReaper(dataDir: string): number | undefined {
  const here = fileURLToPath(new URL('.', import.meta.url));
  const fromSource = import.meta.url.endsWith('.ts');
  const script = join(here, fromSource ? 'node-reaper.ts' : 'node-reaper.js');
  const child = spawn(
    process.execPath,
    [...(fromSource ? ['--import', 'tsx'] : []), script, dataDir, String(process.pid)],
    { cwd: join(here, '..'), detached: true, stdio: ['pipe', 'ignore', 'ignore'] },
  );
  child.unref();
  // The pipe stays open (that is the point) without keeping our event loop alive.
  (child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  return child.pid;
}

/**
 * Reaps every node under `root` whose owner process is gone (what a run
 * killed with SIGKILL left behind), and removes its directory: a node's
 * directory is an entry of root, or the `node` directory inside one (an
 * entry holding a node and the apiserver it joined).
 */
export async function reapOrphanNodes(root: string): Promise<void> {
  let entries;
  try {
    entries = readdirSync(root, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    if (!e.isDirectory()) continue;
    const entry = join(root, e.name);
    const dir = existsSync(join(entry, RECORD)) ? entry : join(entry, 'node');
    const record = readRecord(dir);
    // A node already reaped (by its reaper) leaves no record: the entry's
    // owner.json, written by whoever made the entry, says whose it was.
    const owner = record?.ownerPid ?? readOwner(entry);
    if (owner === undefined || processRunning(owner)) continue;
    if (record) await reapNode(dir);
    rmSync(entry, { recursive: true, force: true });
  }
}

/** The pid in `<dir>/owner.json`, if there is one. */
function readOwner(dir: string): number | undefined {
  try {
    const pid = (JSON.parse(readFileSync(join(dir, 'owner.json'), 'utf8')) as { pid?: unknown }).pid;
    return typeof pid === 'number' ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Marks `dir` (an entry under a root reapOrphanNodes looks at) as this process's. */
export function claimNodeEntry(dir: string): void {
  writeFileSync(join(dir, 'owner.json'), JSON.stringify({ pid: process.pid }));
}

/** `preferred` (a /24) if free, else a /24 inside 10.200.0.0/13 that no address or route of this host already overlaps. */
async function choosePodNetwork(preferred?: string): Promise<{ cidr: string; gateway: string }> {
  const taken = await sh('ip', ['-4', '-o', 'route', 'show', 'table', 'all']).catch(() => '');
  const addrs = await sh('ip', ['-4', '-o', 'addr', 'show']).catch(() => '');
  const wanted = preferred ? /^(\d+\.\d+\.\d+\.)0\/24$/.exec(preferred)?.[1] : undefined;
  if (preferred && !wanted) throw new Error(`preferred pod network ${preferred} is not an a.b.c.0/24`);
  if (wanted && !taken.includes(wanted) && !addrs.includes(wanted)) {
    return { cidr: `${wanted}0/24`, gateway: `${wanted}1` };
  }
  for (let attempt = 0; attempt < 50; attempt++) {
    const b = 200 + (randomBytes(1)[0]! % 8);
    const c = randomBytes(1)[0]!;
    const prefix = `10.${b}.${c}.`;
    if (taken.includes(prefix) || addrs.includes(prefix)) continue;
    return { cidr: `${prefix}0/24`, gateway: `${prefix}1` };
  }
  throw new Error('no free /24 for the pod network in 10.200.0.0/13 after 50 tries');
}

function containerdConfig(dataDir: string, pauseRef: string): string {
  // TOML by hand: five tables of plain strings and booleans.
  return `version = 2
root = "${dataDir}/containerd/root"
state = "${dataDir}/containerd/state"
[grpc]
  address = "${dataDir}/containerd.sock"
[ttrpc]
  address = "${dataDir}/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "${pauseRef}"
    # The pods' network namespaces under the data directory, not /run/netns.
    netns_mounts_under_state_dir = true
    # Without CAP_SYS_RESOURCE (a container, this machine's sandbox) runc cannot
    # lower a pod's oom_score_adj to the kubelet's -998; it is kept at ours.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          Root = "${dataDir}/runc"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "${CNI_BIN_DIR}"
      conf_dir = "${dataDir}/cni/net.d"
`;
}

function cniConfig(dataDir: string, bridge: string, cidr: string, gateway: string): string {
  return JSON.stringify(
    {
      cniVersion: '0.4.0',
      name: 'egress-node',
      plugins: [
        {
          type: 'bridge',
          bridge,
          isGateway: true,
          // No NAT: pods reach the host (and what it serves on the gateway
          // address) and nothing beyond it.
          ipMasq: false,
          ipam: {
            type: 'host-local',
            dataDir: join(dataDir, 'cni', 'ipam'),
            ranges: [[{ subnet: cidr, gateway }]],
            routes: [{ dst: '0.0.0.0/0' }],
          },
        },
      ],
    },
    null,
    2,
  );
}

function kubeletConfig(o: {
  dataDir: string;
  gateway: string;
  port: number;
  healthzPort: number;
  cgroupRoot: string;
}): string {
  return stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    address: o.gateway,
    port: o.port,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: o.healthzPort,
    // Nothing but this machine reaches the kubelet's port (it listens on the node's own bridge).
    authentication: { anonymous: { enabled: false }, webhook: { enabled: false } },
    authorization: { mode: 'AlwaysAllow' },
    // containerd 1.6 has no RuntimeConfig call: the kubelet 1.36 falls back to this.
    cgroupDriver: 'cgroupfs',
    cgroupRoot: o.cgroupRoot,
    cgroupsPerQOS: true,
    enforceNodeAllocatable: [],
    failSwapOn: false,
    // cgroup v1 hosts (this machine) are refused by default since 1.35.
    failCgroupV1: false,
    containerRuntimeEndpoint: `unix://${o.dataDir}/containerd.sock`,
    podLogsDir: join(o.dataDir, 'pod-logs'),
    maxPods: 32,
    resolvConf: '',
    // The images are imported, never pulled: image GC must not remove one.
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { 'memory.available': '50Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
    serializeImagePulls: false,
    // Status and pod state within a second or two of a change (defaults: 10 s, 1 m).
    nodeStatusUpdateFrequency: '5s',
    syncFrequency: '10s',
  });
}

/**
 * Starts the node and waits until the Node is Ready and schedulable. On any
 * failure everything started so far is reaped before the error is thrown.
 */
export async function startLocalNode(opts: LocalNodeOptions): Promise<LocalNode> {
  const started = Date.now();
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const dataDir = opts.dataDir;
  // A dead run's node in this directory: undo it before anything else.
  await reapNode(dataDir);
  rmSync(dataDir, { recursive: true, force: true });
  mkdirSync(dataDir, { recursive: true });

  const id = opts.id ?? randomBytes(3).toString('hex');
  if (!/^[0-9a-f]{6}$/.test(id))
    throw new Error(`node id ${JSON.stringify(id)} is not six lowercase hex digits`);
  const name = `egress-node-${id}`;
  const bridge = `epn${id}`;
  const cgroupRoot = `/egress-node-${id}`;
  const record: NodeRecord = { id, ownerPid: process.pid, dataDir, bridge, cgroupRoot };
  writeFileSync(join(dataDir, RECORD), JSON.stringify(record));
  const reaperPid = startReaper(dataDir);
  if (reaperPid !== undefined) writeFileSync(join(dataDir, RECORD), JSON.stringify({ ...record, reaperPid }));

  const scope = new Lifecycle(opts.logger ?? pino({ level: 'silent' }), {
    name,
    stopTimeoutMs: SERVER_STOP_TIMEOUT_MS + 5_000,
  });
  // Deferred first, so run last: whatever the servers left (shims, pods, mounts, the bridge, cgroups).
  scope.defer('reap', () => reapNode(dataDir), { timeoutMs: 60_000 });
  const server = (proc: ManagedProcess) => {
    scope.defer(proc.name, () => proc.stop(SERVER_STOP_TIMEOUT_MS));
    return proc;
  };

  return scope.start(async () => {
    const { cidr, gateway } = await choosePodNetwork(opts.preferredPodCidr);
    // The bridge and its address before the kubelet starts: the node's
    // InternalIP and the kubelet's listen address are the gateway.
    await sh('ip', ['link', 'add', bridge, 'type', 'bridge']);
    await sh('ip', ['addr', 'add', `${gateway}/24`, 'dev', bridge]);
    await sh('ip', ['link', 'set', bridge, 'up']);
    createCgroups(cgroupRoot);

    mkdirSync(join(dataDir, 'cni', 'net.d'), { recursive: true });
    writeFileSync(
      join(dataDir, 'cni', 'net.d', '10-egress-node.conflist'),
      cniConfig(dataDir, bridge, cidr, gateway),
    );
    writeFileSync(join(dataDir, 'containerd.toml'), containerdConfig(dataDir, NODE_IMAGES.pause.ref));
    const socket = join(dataDir, 'containerd.sock');
    const containerdLog = join(dataDir, 'containerd.log');
    const containerd = server(
      spawnServer('containerd', 'containerd', ['--config', join(dataDir, 'containerd.toml')], containerdLog, {
        pidDir: opts.pidDir,
      }),
    );
    const ctr = (...args: string[]) =>
      sh('ctr', ['--address', socket, '--namespace', 'k8s.io', ...args], 120_000);
    await waitUntil(
      'containerd',
      async () => existsSync(socket) && (await ctr('version')).includes('Server'),
      {
        timeoutMs: 30_000,
        process: containerd,
        logPath: containerdLog,
      },
    );

    const importStarted = Date.now();
    const wanted = opts.images ?? (Object.keys(NODE_IMAGES) as Array<keyof typeof NODE_IMAGES>);
    const files = [...new Set<keyof typeof NODE_IMAGES>(['pause', ...wanted])].map((k) =>
      join(opts.imagesDir, NODE_IMAGES[k].file),
    );
    // One at a time: squid and nosquid share their root layer, unpacked once.
    for (const file of files) await ctr('images', 'import', '--snapshotter', 'overlayfs', file);
    const importSeconds = (Date.now() - importStarted) / 1000;

    const kubeconfigPath = join(dataDir, 'node.kubeconfig');
    writeFileSync(kubeconfigPath, readFileSync(opts.kubeconfigPath), { mode: 0o600 });
    const kubeletPort = await freePort(gateway);
    const healthzPort = await freePort();
    writeFileSync(
      join(dataDir, 'kubelet.yaml'),
      kubeletConfig({ dataDir, gateway, port: kubeletPort, healthzPort, cgroupRoot }),
    );
    mkdirSync(join(dataDir, 'kubelet'), { recursive: true });
    const kubeletLog = join(dataDir, 'kubelet.log');
    // The kubelet sets six kernel tunables at start (vm.overcommit_memory=1,
    // kernel.panic=10, kernel.panic_on_oops=1...), host-wide: a test node
    // would change the machine for everything else (QEMU then accepts a 1 TiB
    // guest). It runs in a mount namespace of its own where those files are
    // bind mounts of copies in the node's directory: it writes the copies.
    const sysctlDir = join(dataDir, 'sysctl');
    mkdirSync(sysctlDir, { recursive: true });
    const binds: string[] = [];
    for (const tunable of KUBELET_TUNABLES) {
      const source = join('/proc/sys', tunable);
      if (!existsSync(source)) continue;
      const copy = join(sysctlDir, tunable.replace(/\//g, '.'));
      writeFileSync(copy, readFileSync(source));
      binds.push(`mount --bind '${copy}' '${source}'`);
    }
    const kubelet = server(
      spawnServer(
        'kubelet',
        'unshare',
        [
          '--mount',
          // Mounts made on the host (containerd's, for pods) still reach the kubelet's view.
          '--propagation',
          'slave',
          '--',
          'sh',
          '-c',
          `${[...binds, 'exec "$0" "$@"'].join(' && ')}`,
          join(opts.binDir, 'kubelet'),
          `--config=${join(dataDir, 'kubelet.yaml')}`,
          `--kubeconfig=${kubeconfigPath}`,
          `--root-dir=${join(dataDir, 'kubelet')}`,
          `--hostname-override=${name}`,
          `--node-ip=${gateway}`,
          '--v=0',
        ],
        kubeletLog,
        { pidDir: opts.pidDir },
      ),
    );

    const schedulerPort = await freePort();
    const schedulerLog = join(dataDir, 'kube-scheduler.log');
    const scheduler = server(
      spawnServer(
        'kube-scheduler',
        join(opts.binDir, 'kube-scheduler'),
        [
          `--kubeconfig=${kubeconfigPath}`,
          `--authentication-kubeconfig=${kubeconfigPath}`,
          `--authorization-kubeconfig=${kubeconfigPath}`,
          '--leader-elect=false',
          '--bind-address=127.0.0.1',
          `--secure-port=${schedulerPort}`,
          `--cert-dir=${join(dataDir, 'scheduler-certs')}`,
          '--v=0',
        ],
        schedulerLog,
        { pidDir: opts.pidDir },
      ),
    );
    await waitUntil('kube-scheduler /healthz', () => healthz(`https://127.0.0.1:${schedulerPort}/healthz`), {
      timeoutMs: 60_000,
      process: scheduler,
      logPath: schedulerLog,
    });

    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfigPath);
    const core = kc.makeApiClient(CoreV1Api);
    const remaining = () => Math.max(5_000, timeoutMs - (Date.now() - started));
    let node: V1Node | undefined;
    await waitUntil(
      `node ${name} Ready`,
      async () => {
        node = await core.readNode({ name });
        return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
      },
      { timeoutMs: remaining(), intervalMs: 250, process: kubelet, logPath: kubeletLog },
    );
    // The kubelet registers with the not-ready taint; the node lifecycle
    // controller, which this cluster does not run, would lift it once Ready.
    const taints = (node?.spec?.taints ?? []).filter((t) => t.key !== 'node.kubernetes.io/not-ready');
    if (taints.length !== (node?.spec?.taints ?? []).length) {
      await core.patchNode(
        { name, body: [{ op: 'replace', path: '/spec/taints', value: taints }] },
        setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
      );
    }

    return {
      name,
      podCidr: cidr,
      gateway,
      bridge,
      images: { squid: NODE_IMAGES.squid.ref, nosquid: NODE_IMAGES.nosquid.ref },
      startSeconds: (Date.now() - started) / 1000,
      importSeconds,
      logDir: dataDir,
      stop: () => scope.close(),
    };
  });
}
