import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { PoolDemandReport, PoolDesired, PoolStateView } from './types.js';

/** The bridge saw the pool change (spec, scale, deletion) or one of its members change. */
export const poolChangedSignal = defineSignal<[PoolDesired]>('poolChanged');

export const poolStateQuery = defineQuery<PoolStateView>('poolState');

/**
 * A lease API replica's demand figures for the pool (autoscaling) and the
 * ban reports on its members (rotation). Sent at a bounded rate: see
 * api/pool-demand.ts.
 */
export const poolDemandSignal = defineSignal<[PoolDemandReport]>('poolDemand');
