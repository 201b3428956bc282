/**
 * The stable `type` of every ApplicationFailure an activity raises. The
 * activity layer is the only place that maps provider errors to these, and
 * the workflow branches only on them, never on message text.
 */
export const FailureType = {
  /** Bad config or argument, auth or permission denied, malformed id: latched until the generation changes. */
  Permanent: 'Permanent',
  /** Quota, rate limit, out of capacity: a condition and a slow wait, never Failed. */
  QuotaExceeded: 'QuotaExceeded',
  /** Retryable; surfaces in the workflow only after the activity's retries are spent. */
  Transient: 'Transient',
  /** spec.provider names no configured provider; retried slowly so adding it to the config recovers the Proxy. */
  ProviderNotConfigured: 'ProviderNotConfigured',
  /** The cloud-init Secret is missing, unlabelled or lacks the key. */
  CloudInitError: 'CloudInitError',
  /** The Proxy object is gone or was recreated under another UID. */
  ProxyGone: 'ProxyGone',
} as const;

export type FailureTypeName = (typeof FailureType)[keyof typeof FailureType];

/** Failures the activity must not retry: retrying cannot change the answer. */
export const NON_RETRYABLE_FAILURES: FailureTypeName[] = [
  FailureType.Permanent,
  FailureType.QuotaExceeded,
  FailureType.ProviderNotConfigured,
  FailureType.CloudInitError,
  FailureType.ProxyGone,
];
