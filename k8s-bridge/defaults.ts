/**
 * The bridge's default reconcile period: how long a Proxy whose workflow
 * stopped can stay without one. At most 5 minutes (issue 15); one visibility
 * list per period is cheap next to the drift polls.
 */
export const DEFAULT_RECONCILE_PERIOD_MS = 2 * 60_000;
