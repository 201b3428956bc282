/**
 * The frame every provider puts around one operation (create, get, delete,
 * list, a check's probe), built the same way by every provider with
 * `providerOperations`:
 *
 * - an already aborted caller gets a Transient failure before anything is sent;
 * - every failure leaves as this provider's ProviderError: a ProviderError as
 *   it is, anything after the caller's abort as "aborted by the caller", a
 *   bounded call that ended (CallEnded) as what ended it, and anything else
 *   as the provider's own classification of its backend's errors;
 * - it is logged once, at warn unless it is an answer (NotFound: polling to
 *   gone is normal) or the caller's own abort;
 * - optionally (the local provider, whose work is local I/O with no request
 *   of its own to bound) the whole operation is bounded: it settles as
 *   Transient the moment the caller's signal or the bound fires, and the
 *   work, handed the bounded signal, is left to notice it.
 */
import type { Logger } from 'pino';
import { ProviderError, providerError } from '../errors.js';
import type { ErrorClass, ProviderOperation } from '../types.js';
import { timeoutSignal } from '../timeout-signal.js';
import { CallEnded } from './bounded-call.js';

/** What a provider says a backend failure is: its class, and a summary composed from identifiers only. */
export interface Classification {
  errorClass: ErrorClass;
  summary: string;
}

export interface ProviderFrame {
  /** The configured provider name. */
  name: string;
  /** The provider type (`kvm`, `gcp`...). */
  type: string;
  /** The process logger; the frame logs through its child naming this provider. */
  logger: Logger;
  /**
   * A backend failure as this provider's class and summary. Never asked
   * about a ProviderError, a CallEnded or anything after the caller's abort.
   */
  classify(err: unknown, operation: ProviderOperation, instance: string): Classification;
  /** When set, each whole operation is bounded by it (see the top of this file). */
  operationTimeoutMs?: number;
}

/** What a provider does with its frame: name a failure, classify one, and run an operation in it. */
export interface Operations {
  /** The configured provider name. */
  readonly provider: string;
  /** The provider's logger (bound to its name and type). */
  readonly log: Logger;
  /** A ProviderError of this provider for `operation` on `instance`. */
  fail(
    errorClass: ErrorClass,
    operation: ProviderOperation,
    instance: string,
    message: string,
    cause?: unknown,
  ): ProviderError;
  /**
   * Any thrown value as this provider's ProviderError, by the frame's rule
   * (for a failure a provider catches itself). With `signal`, a failure after
   * its abort is the caller's.
   */
  wrap(operation: ProviderOperation, instance: string, err: unknown, signal?: AbortSignal): ProviderError;
  /**
   * `fn` as one operation: aborted-caller check, classification, one log
   * line; `fn` gets the signal to honour (the bounded one when the frame
   * bounds operations).
   */
  run<T>(
    operation: ProviderOperation,
    instance: string,
    signal: AbortSignal,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T>;
}

export function providerOperations(frame: ProviderFrame): Operations {
  const provider = frame.name;
  const log = frame.logger.child({ provider, providerType: frame.type });
  const fail: Operations['fail'] = (errorClass, operation, instance, message, cause) =>
    providerError({ errorClass, operation, provider, instance, message, cause });
  const wrap: Operations['wrap'] = (operation, instance, err, signal) => {
    if (err instanceof ProviderError) return err;
    if (signal?.aborted) return fail('Transient', operation, instance, 'aborted by the caller', err);
    if (err instanceof CallEnded) return fail('Transient', operation, instance, err.message, err);
    const c = frame.classify(err, operation, instance);
    return fail(c.errorClass, operation, instance, c.summary, err);
  };
  /** Logged once; quietly when it is an answer or the caller's own doing. */
  const report = (
    operation: ProviderOperation,
    err: unknown,
    wrapped: ProviderError,
    signal: AbortSignal,
  ) => {
    const callerCaused = signal.aborted || (err instanceof CallEnded && err.by === 'caller');
    const quiet = wrapped.errorClass === 'NotFound' || callerCaused;
    log[quiet ? 'debug' : 'warn']({ error: wrapped.toJSON() }, `${operation} failed`);
  };
  const run = async <T>(
    operation: ProviderOperation,
    instance: string,
    signal: AbortSignal,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> => {
    if (signal.aborted) throw fail('Transient', operation, instance, 'aborted by the caller');
    if (frame.operationTimeoutMs !== undefined)
      return bounded(operation, instance, signal, frame.operationTimeoutMs, fn);
    try {
      return await fn(signal);
    } catch (err) {
      const wrapped = wrap(operation, instance, err, signal);
      report(operation, err, wrapped, signal);
      throw wrapped;
    }
  };
  /**
   * The caller's promise settles as soon as the caller's signal or the bound
   * fires, unlogged (the caller knows); the work checks the signal between
   * steps. A failure of the work after that is no longer this operation's
   * answer and is not reported.
   */
  const bounded = <T>(
    operation: ProviderOperation,
    instance: string,
    signal: AbortSignal,
    timeoutMs: number,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> => {
    const deadline = timeoutSignal(signal, timeoutMs);
    const inner = deadline.signal;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () =>
        reject(
          fail(
            'Transient',
            operation,
            instance,
            deadline.timedOut() ? `timed out after ${timeoutMs} ms` : 'aborted by the caller',
          ),
        );
      inner.addEventListener('abort', onAbort, { once: true });
      fn(inner)
        .then(resolve, (err: unknown) => {
          const wrapped = wrap(operation, instance, err, inner);
          if (!inner.aborted) report(operation, err, wrapped, inner);
          reject(wrapped);
        })
        .finally(() => {
          inner.removeEventListener('abort', onAbort);
          deadline.clear();
        });
    });
  };
  return { provider, log, fail, wrap, run };
}
