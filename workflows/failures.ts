/**
 * An activity's failure as one line of text, for the reports and logs of the
 * GC and provider-check workflows. Sandbox-safe.
 */
import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';

/** One line: a report or log field must not carry a library's multi-line text (OpenSSL's, for one). */
export function describeFailure(error: unknown): string {
  const cause = error instanceof ActivityFailure && error.cause ? error.cause : error;
  const text =
    cause instanceof ApplicationFailure
      ? `${cause.type ?? 'Error'}: ${cause.message}`
      : cause instanceof Error
        ? cause.message
        : String(cause);
  return text.replace(/\s+/g, ' ').trim();
}
