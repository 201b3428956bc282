/**
 * One backend request bounded by the caller's signal and by its own
 * timeout. Client libraries do not all honour a signal or their own
 * deadline (the Compute SDK's REST transport ignores both), so the bound is
 * enforced here: the promise settles the moment either fires, and the
 * abandoned request is left to finish on its own. An ended call throws
 * CallEnded, which providers classify as Transient.
 */
import { providerCall } from '../../tracing/seam.js';
import { timeoutSignal } from '../timeout-signal.js';
import type { ErrorClass, ProviderOperation } from '../types.js';

/** How a request ended when it did not answer: the caller's signal or its own timeout. */
export class CallEnded extends Error {
  override readonly name = 'CallEnded';
  constructor(
    readonly by: 'caller' | 'timeout',
    readonly timeoutMs: number,
    /** What timed out, for the message ("apiserver call"). */
    what: string,
  ) {
    super(by === 'caller' ? 'aborted by the caller' : `${what} timed out after ${timeoutMs} ms`);
  }
}

/** `fn` gets the combined signal to hand to its transport; backend errors pass through as they are. */
export async function boundedCall<T>(
  signal: AbortSignal,
  timeoutMs: number,
  what: string,
  fn: (bounded: AbortSignal) => Promise<T>,
): Promise<T> {
  const deadline = timeoutSignal(signal, timeoutMs);
  const bounded = deadline.signal;
  const ended = () => new CallEnded(deadline.timedOut() ? 'timeout' : 'caller', timeoutMs, what);
  if (bounded.aborted) throw ended();
  let onAbort!: () => void;
  const abandoned = new Promise<never>((_resolve, reject) => {
    onAbort = () => reject(ended());
    bounded.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([fn(bounded), abandoned]);
  } catch (err) {
    if (bounded.aborted) throw ended();
    throw err;
  } finally {
    bounded.removeEventListener('abort', onAbort);
    deadline.clear();
  }
}

/**
 * `boundedCall` as one client span of `provider` (tracing on), named by the
 * request; a failure's span result is the class `classify` gives it (an
 * ended call: Transient).
 */
export function tracedCall<T>(
  provider: { type: string; name: string },
  request: string,
  bound: {
    signal: AbortSignal;
    timeoutMs: number;
    /** What timed out, for CallEnded's message ("apiserver call"). */
    what: string;
    operation: ProviderOperation;
    classify: (err: unknown) => ErrorClass;
  },
  fn: (bounded: AbortSignal) => Promise<T>,
): Promise<T> {
  return providerCall(provider, request, () => boundedCall(bound.signal, bound.timeoutMs, bound.what, fn), {
    operation: bound.operation,
    classify: (err) => (err instanceof CallEnded ? 'Transient' : bound.classify(err)),
  });
}

/**
 * `call` raced with the caller's signal only (no bound of its own): an
 * abort rejects at once ("aborted by the caller"), the request is left to
 * finish on its own. For calls already bounded elsewhere (a client's own
 * timeout, a fetch's AbortSignal.timeout) that must still honour the caller.
 */
export async function untilAborted<T>(signal: AbortSignal, call: () => Promise<T>): Promise<T> {
  if (signal.aborted) throw new Error('aborted by the caller');
  let onAbort!: () => void;
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => reject(new Error('aborted by the caller'));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([call(), aborted]);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
