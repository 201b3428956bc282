import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { DesiredSpec, DriftReport, HealthReport, LeasesDrainedReport, ProxyStateView } from './types.js';

/** The bridge saw a new generation, a changed Secret hash or a changed annotation. */
export const specChangedSignal = defineSignal<[DesiredSpec]>('specChanged');
/** The bridge saw a deletionTimestamp (or the object disappeared). */
export const deletionRequestedSignal = defineSignal<[{ skipCleanup: boolean }]>('deletionRequested');
/** The prober's verdict changed (transitions only, never one per probe). */
export const healthChangedSignal = defineSignal<[HealthReport]>('healthChanged');

/** The drift sweep found this Proxy's instance different from what its status records. */
export const driftDetectedSignal = defineSignal<[DriftReport]>('driftDetected');

/** The lease API saw no lease left on this draining proxy (sent by the api process). */
export const leasesDrainedSignal = defineSignal<[LeasesDrainedReport]>('leasesDrained');

export const stateQuery = defineQuery<ProxyStateView>('state');
