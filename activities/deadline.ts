/**
 * A backend call bounded by its own deadline. The race, not only the abort
 * signal, bounds it: a backend that ignores its signal stalls only its own
 * (abandoned) promise.
 */
import { Context } from '@temporalio/activity';

/** The running activity's cancellation, or a signal that never aborts outside an activity. */
export function activityCancellation(): AbortSignal {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return new AbortController().signal;
  }
}

/** The running activity's attempt (1 for the first), or 1 outside an activity. */
export function activityAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return 1;
  }
}

export async function withDeadline<T>(
  timeoutMs: number,
  call: (signal: AbortSignal) => Promise<T>,
  onTimeout: () => Error,
): Promise<T> {
  const deadline = new AbortController();
  const signal = AbortSignal.any([activityCancellation(), deadline.signal]);
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      deadline.abort();
      reject(onTimeout());
    }, timeoutMs);
  });
  try {
    return await Promise.race([call(signal), expired]);
  } finally {
    clearTimeout(timer);
  }
}
