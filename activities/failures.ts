/**
 * The one place provider errors become Temporal failures. Workflows branch on
 * `type` (FailureType), never on message text. Messages are the provider's
 * own, which never carry credentials or cloud-init text.
 */
import { ApplicationFailure } from '@temporalio/common';
import { classOf, isProviderError } from '../providers/errors.js';
import { FailureType } from '../workflows/proxy/failure-types.js';
import { ProviderPausedError } from './provider-circuit.js';

export function toApplicationFailure(error: unknown): ApplicationFailure {
  if (error instanceof ApplicationFailure) return error;
  if (error instanceof ProviderPausedError) {
    return ApplicationFailure.create({
      type: FailureType.Transient,
      message: error.message,
      nonRetryable: true,
    });
  }
  const errorClass = classOf(error);
  // Only a ProviderError's message is known to be safe to record in history.
  const message = isProviderError(error) ? error.message : 'provider call failed with an unclassified error';
  switch (errorClass) {
    case 'Permanent':
      return ApplicationFailure.create({ type: FailureType.Permanent, message, nonRetryable: true });
    case 'QuotaExceeded':
      return ApplicationFailure.create({ type: FailureType.QuotaExceeded, message, nonRetryable: true });
    case 'NotFound':
      // NotFound is a value on get; from create/delete it is a surprise: retry.
      return ApplicationFailure.create({ type: FailureType.Transient, message });
    default:
      return ApplicationFailure.create({ type: FailureType.Transient, message });
  }
}

export function nonRetryable(type: string, message: string): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: true });
}
