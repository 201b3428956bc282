import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { PoolDesired, PoolStateView } from './types.js';

/** The bridge saw the pool change (spec, scale, deletion) or one of its members change. */
export const poolChangedSignal = defineSignal<[PoolDesired]>('poolChanged');

export const poolStateQuery = defineQuery<PoolStateView>('poolState');
