/**
 * A small typed client of the Proxmox VE API (`/api2/json`) over undici.
 *
 * Why our own: the one general npm client (`proxmox-api`) retries every
 * request once on a transport error, a clone POST included (a second VM, or
 * a collision on our own VMID), throws untyped strings and cannot take a CA
 * or a dispatcher. This one:
 *
 * - authenticates with an API token (`Authorization: PVEAPIToken=ID=SECRET`),
 *   the secret read from its file on each request (rotation needs no
 *   restart) and never put in an error, a log line or a span;
 * - trusts only the configured CA (`caFile`) and, when configured, only a
 *   server certificate with the pinned SHA-256 fingerprint; verification is
 *   never turned off;
 * - never retries anything (undici's Agent does not; nor does this code);
 * - bounds every request by its own timeout and the caller's signal;
 * - follows a task (UPID) to its exit status: `OK` and `WARNINGS: n`
 *   succeed, anything else is a PveTaskError carrying the exit status and
 *   the tail of the task log, for classification only.
 *
 * Errors carry PVE's text (`reason`, `errors`) for classify.ts; the provider
 * never copies that text into a ProviderError.
 */
import { readFile } from 'node:fs/promises';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { Agent, fetch, FormData } from 'undici';
import { providerCall } from '../../tracing/seam.js';
import { boundedCall } from '../shared/bounded-call.js';

export type PveParams = Record<string, string | number | boolean | undefined>;

/** An HTTP answer other than 2xx. `reason` is PVE's message (reason phrase, else the body's `message`). */
export class PveHttpError extends Error {
  override readonly name = 'PveHttpError';
  constructor(
    readonly status: number,
    readonly method: string,
    /** The path template (`/nodes/{node}/qemu/{vmid}/clone`): no values. */
    readonly template: string,
    /** PVE's message: free text, for classification only. */
    readonly reason: string,
    /** The parameter errors of a 400 (`{ vmid: 'VM 218 already exists' }`), for classification only. */
    readonly errors: Record<string, string>,
  ) {
    super(`PVE ${method} ${template}: HTTP ${status}`);
  }
}

/** A task that ended with an exit status other than OK or WARNINGS. */
export class PveTaskError extends Error {
  override readonly name = 'PveTaskError';
  constructor(
    /** The task type (`qmclone`, `qmstart`, `imgupload`). */
    readonly taskType: string,
    /** PVE's exit status text: for classification only. */
    readonly exitStatus: string,
    /** The last lines of the task log: for classification only. */
    readonly logTail: string[],
  ) {
    super(`PVE task ${taskType} failed`);
  }
}

/** A task that was still running when its wait ran out. */
export class PveTaskTimeout extends Error {
  override readonly name = 'PveTaskTimeout';
  constructor(
    readonly taskType: string,
    readonly waitedMs: number,
  ) {
    super(`PVE task ${taskType} still running after ${waitedMs} ms`);
  }
}

/** No answer: connection, TLS or pin failure. `code` is Node's or undici's code. */
export class PveTransportError extends Error {
  override readonly name = 'PveTransportError';
  constructor(
    readonly code: string,
    readonly method: string,
    readonly template: string,
  ) {
    super(`PVE ${method} ${template}: no answer (${code})`);
  }
}

/** Node's TLS codes for a certificate the configured trust refuses, and our pin's. */
export const TLS_TRUST_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'ERR_PVE_FINGERPRINT_MISMATCH',
]);

export interface ProxmoxClientOptions {
  url: string;
  tokenId: string;
  tokenSecretFile: string;
  caFile: string;
  /** Uppercase hex without colons. */
  fingerprint?: string;
  callTimeoutMs: number;
  taskPollMs: number;
  /** For spans: the provider's type and configured name. */
  provider: { type: string; name: string };
}

/** `AB:CD:…` (Node's fingerprint256) → `ABCD…`. */
function normaliseFingerprint(f: string): string {
  return f.replace(/:/g, '').toUpperCase();
}

function errorCode(err: unknown): string {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && typeof e === 'object' && e !== null; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,63}$/.test(code)) return code;
    e = (e as { cause?: unknown }).cause;
  }
  return 'UNKNOWN';
}

/** Form or query encoding as PVE reads it: booleans as 0/1, undefined left out. */
export function encodeParams(params: PveParams): URLSearchParams {
  const out = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    out.append(k, typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
  }
  return out;
}

export class ProxmoxClient {
  private agent: Agent | undefined;
  private agentCa: string | undefined;
  private readonly base: string;

  constructor(private readonly options: ProxmoxClientOptions) {
    this.base = new URL('/api2/json', options.url).toString();
  }

  /** The dispatcher for the current CA file (a changed CA builds a new one). */
  private async dispatcher(): Promise<Agent> {
    const ca = await readFile(this.options.caFile, 'utf8');
    if (this.agent !== undefined && this.agentCa === ca) return this.agent;
    const old = this.agent;
    const pin = this.options.fingerprint;
    this.agent = new Agent({
      connect: {
        ca,
        rejectUnauthorized: true,
        // Called only after the chain verified against `ca`: the pin narrows trust, never widens it.
        checkServerIdentity: (host: string, cert: PeerCertificate) => {
          const identity = checkServerIdentity(host, cert);
          if (identity !== undefined) return identity;
          if (pin !== undefined && normaliseFingerprint(cert.fingerprint256 ?? '') !== pin) {
            const err = new Error('certificate fingerprint mismatch') as Error & { code: string };
            err.code = 'ERR_PVE_FINGERPRINT_MISMATCH';
            return err;
          }
          return undefined;
        },
      },
      headersTimeout: this.options.callTimeoutMs,
      bodyTimeout: this.options.callTimeoutMs,
    });
    this.agentCa = ca;
    if (old !== undefined) void old.close().catch(() => undefined);
    return this.agent;
  }

  private async authorization(): Promise<string> {
    const secret = (await readFile(this.options.tokenSecretFile, 'utf8')).trim();
    return `PVEAPIToken=${this.options.tokenId}=${secret}`;
  }

  /**
   * One request. `path` is the concrete path (segments already encoded),
   * `template` its shape for spans and errors. GET and DELETE send `params`
   * as the query, POST and PUT as a form body.
   */
  async call<T>(
    method: 'GET' | 'POST' | 'PUT' | 'DELETE',
    template: string,
    path: string,
    params: PveParams,
    signal: AbortSignal,
    form?: FormData,
  ): Promise<T> {
    return providerCall(this.options.provider, `${method} ${template}`, () =>
      boundedCall(signal, this.options.callTimeoutMs, `PVE ${method} ${template}`, async (bounded) => {
        const query = encodeParams(params);
        const inBody = method === 'POST' || method === 'PUT';
        const url = `${this.base}${path}${!inBody && [...query].length > 0 ? `?${query.toString()}` : ''}`;
        const headers: Record<string, string> = { authorization: await this.authorization() };
        let body: string | FormData | undefined;
        if (form !== undefined) body = form;
        else if (inBody) {
          body = query.toString();
          headers['content-type'] = 'application/x-www-form-urlencoded';
        }
        let res: Awaited<ReturnType<typeof fetch>>;
        try {
          res = await fetch(url, {
            method,
            headers,
            ...(body === undefined ? {} : { body }),
            signal: bounded,
            dispatcher: await this.dispatcher(),
          });
        } catch (err) {
          if (bounded.aborted) throw err;
          throw new PveTransportError(errorCode(err), method, template);
        }
        const text = await res.text();
        let parsed: { data?: unknown; message?: unknown; errors?: unknown } = {};
        try {
          parsed = JSON.parse(text) as typeof parsed;
        } catch {
          // a proxy's HTML error page: the status and reason phrase still classify it
        }
        if (res.status < 200 || res.status > 299) {
          const errors: Record<string, string> = {};
          if (typeof parsed.errors === 'object' && parsed.errors !== null)
            for (const [k, v] of Object.entries(parsed.errors)) if (typeof v === 'string') errors[k] = v;
          // Older servers (before libpve-http-server-perl 5.2.0) send {"data":null}: the reason phrase is the message.
          const reason = [res.statusText, typeof parsed.message === 'string' ? parsed.message : '']
            .filter((s) => s !== '')
            .join('\n');
          throw new PveHttpError(res.status, method, template, reason, errors);
        }
        return parsed.data as T;
      }),
    );
  }

  get<T>(template: string, path: string, params: PveParams, signal: AbortSignal): Promise<T> {
    return this.call<T>('GET', template, path, params, signal);
  }

  /**
   * Uploads `bytes` as `filename` with `content=iso`; returns the task's UPID.
   * The ISO is small (a NoCloud seed), so one in-memory Blob is fine.
   */
  upload(
    node: string,
    storage: string,
    filename: string,
    bytes: Buffer,
    signal: AbortSignal,
  ): Promise<string> {
    const form = new FormData();
    form.append('content', 'iso');
    form.append('filename', new Blob([bytes], { type: 'application/octet-stream' }), filename);
    return this.call<string>(
      'POST',
      '/nodes/{node}/storage/{storage}/upload',
      `/nodes/${encodeURIComponent(node)}/storage/${encodeURIComponent(storage)}/upload`,
      {},
      signal,
      form,
    );
  }

  /**
   * Waits for task `upid` on `node` to stop, polling every taskPollMs for
   * at most `timeoutMs`. Resolves on `OK` and `WARNINGS: n`.
   */
  async waitTask(node: string, upid: string, timeoutMs: number, signal: AbortSignal): Promise<void> {
    const taskType = upid.split(':')[5] ?? 'task';
    const started = Date.now();
    const path = `/nodes/${encodeURIComponent(node)}/tasks/${encodeURIComponent(upid)}`;
    for (;;) {
      const st = await this.get<{ status: string; exitstatus?: string }>(
        '/nodes/{node}/tasks/{upid}/status',
        `${path}/status`,
        {},
        signal,
      );
      if (st.status === 'stopped') {
        const exit = st.exitstatus ?? '';
        if (exit === 'OK' || /^WARNINGS: \d+$/.test(exit)) return;
        let tail: string[] = [];
        try {
          const lines = await this.get<Array<{ n: number; t: string }>>(
            '/nodes/{node}/tasks/{upid}/log',
            `${path}/log`,
            { limit: 50 },
            signal,
          );
          tail = lines.map((l) => l.t).slice(-10);
        } catch {
          // the exit status alone still classifies the failure
        }
        throw new PveTaskError(taskType, exit, tail);
      }
      if (Date.now() - started > timeoutMs) throw new PveTaskTimeout(taskType, Date.now() - started);
      await sleep(this.options.taskPollMs, signal);
    }
  }

  async close(): Promise<void> {
    const a = this.agent;
    this.agent = undefined;
    if (a !== undefined) await a.close().catch(() => undefined);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason as Error);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
