/**
 * One SSH connection per host, shared by every operation on that host:
 * dialled lazily, kept alive, host key checked against known_hosts. Each
 * remote command runs on its own channel, so a command that times out or
 * whose caller gives up closes *its* channel only; the connection and
 * every other command on it carry on (the seed's cancel-cuts-everything gap).
 *
 * The key and known_hosts files are read at every dial, and their identity
 * (inode, size, mtime) is compared at most once a second before a command:
 * when either changed, the current connection is retired (its running
 * commands finish on it) and the next command dials with the new material.
 */
import { stat, readFile } from 'node:fs/promises';
import type { Readable } from 'node:stream';
// ssh2 is CommonJS and sets `utils` in a way Node's ESM named-export
// detection cannot see: take it from the default export.
import ssh2, { type Client as SshClient, type ClientChannel } from 'ssh2';
import { parseKnownHosts, hostKeyAccepted, hostKeyAlgorithms, type KnownHostEntry } from './known-hosts.js';
import { parseAddress } from './config.js';
import { providerCall } from '../../tracing/seam.js';
import { timeoutSignal } from '../timeout-signal.js';

const { Client, utils } = ssh2;

/** Why an SSH-level step failed; decides the error class and the check reason. */
export type SshStage =
  'material-missing' | 'material-invalid' | 'connect' | 'host-key' | 'auth' | 'timeout' | 'closed';

export class SshError extends Error {
  override readonly name = 'SshError';
  constructor(
    readonly stage: SshStage,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

export interface SshMaterialOptions {
  keyFile: string;
  knownHostsFile?: string;
  insecureIgnoreHostKey: boolean;
}

interface Material {
  privateKey: Buffer;
  knownHosts?: KnownHostEntry[];
}

async function fileIdentity(path: string | undefined): Promise<string> {
  if (path === undefined) return '-';
  try {
    const s = await stat(path);
    return `${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch (err) {
    return `missing:${String((err as { code?: unknown }).code)}`;
  }
}

function errCode(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : 'error';
}

async function loadMaterial(opts: SshMaterialOptions): Promise<Material> {
  let privateKey: Buffer;
  try {
    privateKey = await readFile(opts.keyFile);
  } catch (err) {
    const code = errCode(err);
    throw new SshError('material-missing', `sshKeyFile cannot be read (${code})`, code);
  }
  const parsed: unknown = utils.parseKey(privateKey);
  const key = (Array.isArray(parsed) ? parsed[0] : parsed) as
    { isPrivateKey?: () => boolean } | Error | undefined;
  if (key === undefined || key instanceof Error || key.isPrivateKey?.() !== true) {
    throw new SshError('material-invalid', 'sshKeyFile is not an unencrypted private key');
  }
  if (opts.insecureIgnoreHostKey) return { privateKey };
  let text: string;
  try {
    text = await readFile(opts.knownHostsFile!, 'utf8');
  } catch (err) {
    const code = errCode(err);
    throw new SshError('material-missing', `knownHostsFile cannot be read (${code})`, code);
  }
  return { privateKey, knownHosts: parseKnownHosts(text) };
}

export interface ExecResult {
  code: number;
  stdout: Buffer;
  stderr: string;
}

export interface ExecOptions {
  /** Sent on the channel's stdin, then EOF. A Readable is piped (streamed, with backpressure). */
  stdin?: Buffer | Readable;
  timeoutMs: number;
  signal: AbortSignal;
  /** Stdout beyond this is an error (a runaway listing must not eat memory). */
  maxStdoutBytes?: number;
  /** The command's name for its span (`virsh define`): never the command line, which may carry values. */
  label?: string;
}

/** A command that ended because of the caller's signal or its own bound. */
export class ExecEnded extends Error {
  override readonly name = 'ExecEnded';
  constructor(readonly by: 'caller' | 'timeout') {
    super(by === 'caller' ? 'aborted by the caller' : 'remote command timed out');
  }
}

interface Connection {
  client: SshClient;
  ready: Promise<void>;
  retired: boolean;
  channels: number;
  closed: boolean;
}

export interface HostLinkOptions extends SshMaterialOptions {
  address: string;
  user: string;
  keepaliveMs?: number;
  /** Channels at once on one connection (sshd's MaxSessions defaults to 10). */
  maxChannels?: number;
  /** Bound for the TCP connect plus the SSH handshake. */
  dialTimeoutMs?: number;
  /** The provider whose commands these are (each command is a span of it when tracing is on). */
  provider?: { type: string; name: string };
  /** The host's name in the providers config (a span attribute). */
  hostName?: string;
}

export class HostLink {
  private conn: Connection | undefined;
  private identity: string | undefined;
  private identityCheckedAt = 0;
  private waiting: (() => void)[] = [];
  private active = 0;
  private closedForGood = false;

  constructor(private readonly opts: HostLinkOptions) {}

  private async materialIdentity(): Promise<string> {
    return `${await fileIdentity(this.opts.keyFile)}|${await fileIdentity(this.opts.knownHostsFile)}`;
  }

  /** Retires the connection when the SSH material changed since it was dialled. */
  private async noticeMaterialChange(): Promise<void> {
    if (this.conn === undefined || Date.now() - this.identityCheckedAt < 1000) return;
    this.identityCheckedAt = Date.now();
    const now = await this.materialIdentity();
    if (this.conn !== undefined && this.identity !== undefined && now !== this.identity)
      this.retire(this.conn);
  }

  private retire(conn: Connection): void {
    conn.retired = true;
    if (this.conn === conn) this.conn = undefined;
    if (conn.channels === 0) conn.client.end();
  }

  private dial(): Connection {
    const target = parseAddress(this.opts.address)!;
    const client = new Client();
    const conn: Connection = { client, ready: Promise.resolve(), retired: false, channels: 0, closed: false };
    conn.ready = (async () => {
      this.identity = await this.materialIdentity();
      this.identityCheckedAt = Date.now();
      const material = await loadMaterial(this.opts);
      await new Promise<void>((resolve, reject) => {
        let hostKeyRejected = false;
        const timer = setTimeout(() => {
          client.end();
          reject(new SshError('timeout', 'SSH connect and handshake timed out'));
        }, this.opts.dialTimeoutMs ?? 15_000);
        client.once('ready', () => {
          clearTimeout(timer);
          resolve();
        });
        client.once('error', (err: Error & { level?: string; code?: string }) => {
          clearTimeout(timer);
          if (hostKeyRejected)
            reject(new SshError('host-key', 'host key is not in knownHostsFile (or changed)'));
          else if (err.level === 'client-authentication')
            reject(new SshError('auth', `user "${this.opts.user}" was not accepted with the configured key`));
          else if (err.level === 'client-timeout') reject(new SshError('timeout', 'SSH handshake timed out'));
          else
            reject(
              new SshError(
                'connect',
                'SSH connection failed',
                typeof err.code === 'string' ? err.code : undefined,
              ),
            );
        });
        const algorithms =
          material.knownHosts === undefined
            ? undefined
            : hostKeyAlgorithms(material.knownHosts, target.host, target.port);
        client.connect({
          ...(algorithms === undefined ? {} : { algorithms: { serverHostKey: algorithms } }),
          host: target.host,
          port: target.port,
          username: this.opts.user,
          privateKey: material.privateKey,
          readyTimeout: this.opts.dialTimeoutMs ?? 15_000,
          keepaliveInterval: this.opts.keepaliveMs ?? 15_000,
          keepaliveCountMax: 3,
          hostVerifier: (key: Buffer) => {
            if (material.knownHosts === undefined) return true;
            const ok = hostKeyAccepted(material.knownHosts, target.host, target.port, key);
            if (!ok) hostKeyRejected = true;
            return ok;
          },
        });
      });
    })();
    const drop = () => {
      conn.closed = true;
      if (this.conn === conn) this.conn = undefined;
    };
    client.on('close', drop);
    // After 'ready', a late error (keepalive timeout, reset) only drops the connection.
    client.on('error', drop);
    conn.ready.catch(drop);
    return conn;
  }

  private async acquireSlot(signal: AbortSignal, ended: () => ExecEnded): Promise<void> {
    const max = this.opts.maxChannels ?? 8;
    if (this.active < max) {
      this.active++;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        this.waiting = this.waiting.filter((w) => w !== wake);
        reject(ended());
      };
      const wake = () => {
        signal.removeEventListener('abort', onAbort);
        this.active++;
        resolve();
      };
      this.waiting.push(wake);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  private releaseSlot(): void {
    this.active--;
    this.waiting.shift()?.();
  }

  /**
   * Runs `command` (already quoted by the caller: see virsh.ts) on its own
   * channel, bounded by `timeoutMs` and `signal`. Rejects with SshError for
   * SSH problems and ExecEnded when bounded out; a non-zero exit is a result.
   */
  exec(command: string, options: ExecOptions): Promise<ExecResult> {
    const provider = this.opts.provider;
    if (provider === undefined) return this.execBounded(command, options);
    // One client span per SSH command; a non-zero exit is its result, not an error.
    return providerCall(
      provider,
      options.label ?? 'ssh exec',
      async (span) => {
        span.setAttributes({ host: this.opts.hostName ?? this.opts.address });
        const res = await this.execBounded(command, options);
        span.setAttributes({
          exit_code: res.code,
          ...(res.code === 0 ? {} : { result: `exit ${res.code}` }),
        });
        return res;
      },
      {
        classify: (err) =>
          err instanceof ExecEnded
            ? `ended by ${err.by}`
            : err instanceof SshError
              ? `ssh ${err.stage}`
              : 'error',
      },
    );
  }

  private async execBounded(command: string, options: ExecOptions): Promise<ExecResult> {
    if (this.closedForGood) throw new SshError('closed', 'provider closed');
    const deadline = timeoutSignal(options.signal, options.timeoutMs);
    const bounded = deadline.signal;
    const ended = () => new ExecEnded(deadline.timedOut() ? 'timeout' : 'caller');
    try {
      if (bounded.aborted) throw ended();
      await this.acquireSlot(bounded, ended);
      try {
        await this.noticeMaterialChange();
        const conn = this.conn ?? (this.conn = this.dial());
        const abandoned = new Promise<never>((_r, reject) => {
          bounded.addEventListener('abort', () => reject(ended()), { once: true });
        });
        abandoned.catch(() => undefined);
        // Waiting for a shared dial ends with this caller's bound; the dial goes on for the others.
        await Promise.race([conn.ready, abandoned]);
        return await this.runOnChannel(conn, command, options, bounded, abandoned, ended);
      } finally {
        this.releaseSlot();
      }
    } finally {
      deadline.clear();
    }
  }

  private async runOnChannel(
    conn: Connection,
    command: string,
    options: ExecOptions,
    bounded: AbortSignal,
    abandoned: Promise<never>,
    ended: () => ExecEnded,
  ): Promise<ExecResult> {
    conn.channels++;
    let channel: ClientChannel | undefined;
    // The command's exit status, listened for as soon as the channel exists:
    // ssh2 parses every packet of one read in a row, so a quick command's
    // exit-status can come in the same read as the exec's reply, before any
    // promise continuation could listen, and would be lost ("ended without an
    // exit status", seen under load).
    const exit: { code?: number } = {};
    try {
      const opened = new Promise<ClientChannel>((resolve, reject) => {
        try {
          conn.client.exec(command, (err, ch) => {
            if (err) return reject(new SshError('closed', 'SSH channel could not be opened'));
            ch.on('exit', (code: number | null) => {
              exit.code ??= code ?? -1;
            });
            resolve(ch);
          });
        } catch {
          reject(new SshError('closed', 'SSH connection is not usable'));
        }
      });
      opened.then(
        (ch) => {
          channel = ch;
          if (bounded.aborted) ch.close();
        },
        () => undefined,
      );
      const ch = await Promise.race([opened, abandoned]);
      const onAbort = () => ch.close();
      bounded.addEventListener('abort', onAbort, { once: true });
      try {
        return await Promise.race([this.collect(ch, exit, options), abandoned]);
      } finally {
        bounded.removeEventListener('abort', onAbort);
      }
    } catch (err) {
      if (bounded.aborted) {
        channel?.close();
        throw ended();
      }
      throw err;
    } finally {
      conn.channels--;
      if (conn.retired && conn.channels === 0) conn.client.end();
    }
  }

  private collect(ch: ClientChannel, exit: { code?: number }, options: ExecOptions): Promise<ExecResult> {
    return new Promise<ExecResult>((resolve, reject) => {
      const out: Buffer[] = [];
      let outBytes = 0;
      const err: Buffer[] = [];
      ch.on('data', (d: Buffer) => {
        outBytes += d.length;
        if (outBytes > (options.maxStdoutBytes ?? 16 * 1024 * 1024)) {
          ch.close();
          reject(new SshError('closed', 'remote output too large'));
          return;
        }
        out.push(d);
      });
      ch.stderr.on('data', (d: Buffer) => {
        if (err.reduce((n, b) => n + b.length, 0) < 64 * 1024) err.push(d);
      });
      ch.on('close', () => {
        const code = exit.code;
        if (code === undefined) reject(new SshError('closed', 'remote command ended without an exit status'));
        else resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') });
      });
      const input = options.stdin;
      if (input === undefined) ch.end();
      else if (Buffer.isBuffer(input)) ch.end(input);
      else {
        input.on('error', () => ch.close());
        input.pipe(ch);
      }
    });
  }

  /** Ends the connection (running commands end with it). */
  close(): void {
    this.closedForGood = true;
    if (this.conn !== undefined) this.conn.client.end();
    this.conn = undefined;
  }
}
