/**
 * The frame every provider puts around one operation (create, get, delete,
 * list): an already aborted caller gets a Transient failure before anything
 * is sent, every failure leaves as this provider's ProviderError (the
 * provider says how to classify what its backend threw), and it is logged
 * once, at warn unless it is an answer (NotFound: polling to gone is normal)
 * or the caller's own abort.
 */
import type { Logger } from 'pino';
import { ProviderError, providerError } from './errors.js';
import type { ErrorClass, ProviderOperation } from './types.js';

export interface OperationFrame {
  /** The configured provider name. */
  provider: string;
  log: Logger;
  /** Any non-ProviderError thrown inside, as this provider's class and message. */
  classify(operation: ProviderOperation, instance: string, err: unknown, signal: AbortSignal): ProviderError;
  /** Failures the caller caused (its abort), logged at debug like NotFound. */
  callerCaused?(err: unknown, signal: AbortSignal): boolean;
}

export async function runOperation<T>(
  frame: OperationFrame,
  operation: ProviderOperation,
  instance: string,
  signal: AbortSignal,
  fn: () => Promise<T>,
): Promise<T> {
  if (signal.aborted)
    throw providerError({
      errorClass: 'Transient',
      operation,
      provider: frame.provider,
      instance,
      message: 'aborted by the caller',
    });
  try {
    return await fn();
  } catch (err) {
    const wrapped = err instanceof ProviderError ? err : frame.classify(operation, instance, err, signal);
    const quiet = wrapped.errorClass === 'NotFound' || (frame.callerCaused?.(err, signal) ?? false);
    frame.log[quiet ? 'debug' : 'warn']({ error: wrapped.toJSON() }, `${operation} failed`);
    throw wrapped;
  }
}

/** The two things a provider does with its frame: name a failure, and run an operation in it. */
export interface Operations {
  /** A ProviderError of this provider for `operation` on `instance`. */
  fail(
    errorClass: ErrorClass,
    operation: ProviderOperation,
    instance: string,
    message: string,
    cause?: unknown,
  ): ProviderError;
  /** `fn` as one operation: aborted-caller check, classification, one log line (runOperation). */
  run<T>(
    operation: ProviderOperation,
    instance: string,
    signal: AbortSignal,
    fn: () => Promise<T>,
  ): Promise<T>;
}

export function operations(frame: OperationFrame): Operations {
  return {
    fail: (errorClass, operation, instance, message, cause) =>
      providerError({ errorClass, operation, provider: frame.provider, instance, message, cause }),
    run: (operation, instance, signal, fn) => runOperation(frame, operation, instance, signal, fn),
  };
}
