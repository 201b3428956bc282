/**
 * ProviderError: the one error type a provider throws (contract §5).
 *
 * Every error carries its class, the operation, the *configured* provider
 * name and the instance (providerID or name). Only `activities/` maps these
 * to Temporal failures; everything else reads the class with `classOf`.
 *
 * Secret hygiene (contract §7): the message is composed by provider code from
 * identifiers only, and the backend error is never kept as is. A backend
 * error's message can echo a request body, a URL with a token, or cloud-init
 * text, so `cause` keeps a *safe summary*: the error's name and its
 * well-known machine codes (`code`, `errno`, `syscall`, HTTP `status`),
 * never its message or stack. The price is that `instanceof` on the original
 * backend error is lost; classify before wrapping.
 */
import { ERROR_CLASSES, type ErrorClass, type ProviderOperation } from './types.js';

/** What survives of a backend error: machine-readable fields only. */
export interface SafeCause {
  name: string;
  code?: string;
  errno?: number;
  syscall?: string;
  status?: number;
}

export interface ProviderErrorInit {
  errorClass: ErrorClass;
  operation: ProviderOperation;
  /** The configured provider name (what spec.provider refers to), not the type. */
  provider: string;
  /** The providerID, or the instance name when no ID exists yet; '' for whole-provider calls. */
  instance: string;
  /** Composed by provider code from identifiers; never backend text, credentials or cloud-init. */
  message: string;
  /** Any backend error; reduced to a SafeCause. */
  cause?: unknown;
}

export class ProviderError extends Error {
  override readonly name = 'ProviderError';
  readonly errorClass: ErrorClass;
  readonly operation: ProviderOperation;
  readonly provider: string;
  readonly instance: string;
  override readonly cause?: SafeCause;

  constructor(init: ProviderErrorInit) {
    const cause = init.cause === undefined ? undefined : safeCause(init.cause);
    const where = init.instance === '' ? '' : ` ${init.instance}`;
    const code = cause?.code === undefined ? '' : ` [${cause.code}]`;
    super(`${init.provider}: ${init.operation}${where}: ${init.message}${code} (${init.errorClass})`);
    this.errorClass = init.errorClass;
    this.operation = init.operation;
    this.provider = init.provider;
    this.instance = init.instance;
    if (cause !== undefined) this.cause = cause;
  }

  /** Structured form for pino (`log.warn({ err: e.toJSON() })`); the same safe fields as the message. */
  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      message: this.message,
      errorClass: this.errorClass,
      operation: this.operation,
      provider: this.provider,
      instance: this.instance,
      ...(this.cause === undefined ? {} : { cause: this.cause }),
    };
  }
}

/** Builds a ProviderError. */
export function providerError(init: ProviderErrorInit): ProviderError {
  return new ProviderError(init);
}

export function isProviderError(err: unknown): err is ProviderError {
  return err instanceof ProviderError;
}

function isErrorClass(value: unknown): value is ErrorClass {
  return typeof value === 'string' && (ERROR_CLASSES as readonly string[]).includes(value);
}

/**
 * The class of any thrown value. Unclassified means Transient (contract §5):
 * the safe default, retried with backoff. A ProviderError that crossed a
 * serialisation boundary (a plain object with `name: 'ProviderError'` and an
 * `errorClass`) keeps its class too.
 */
export function classOf(err: unknown): ErrorClass {
  if (err instanceof ProviderError) return err.errorClass;
  if (typeof err === 'object' && err !== null) {
    const candidate = err as { name?: unknown; errorClass?: unknown };
    if (candidate.name === 'ProviderError' && isErrorClass(candidate.errorClass)) return candidate.errorClass;
  }
  return 'Transient';
}

/** Keeps only the machine-readable fields of a backend error. Never its message or stack. */
export function safeCause(err: unknown): SafeCause {
  if (err instanceof ProviderError) {
    return { name: err.name, code: err.errorClass };
  }
  if (typeof err !== 'object' || err === null) return { name: typeof err };
  const e = err as { name?: unknown; code?: unknown; errno?: unknown; syscall?: unknown; status?: unknown };
  const out: SafeCause = { name: typeof e.name === 'string' && isIdentifier(e.name) ? e.name : 'Error' };
  if ((typeof e.code === 'string' && isIdentifier(e.code)) || typeof e.code === 'number')
    out.code = String(e.code);
  if (typeof e.errno === 'number') out.errno = e.errno;
  if (typeof e.syscall === 'string' && isIdentifier(e.syscall)) out.syscall = e.syscall;
  if (typeof e.status === 'number') out.status = e.status;
  return out;
}

/** Codes and names are short identifiers; anything else might be free text and is dropped. */
function isIdentifier(value: string): boolean {
  return /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/.test(value);
}
