import { defineQuery } from '@temporalio/workflow';
import type { ProviderCheckResult } from './types.js';

/** This round's check results, once the checks have answered (undefined before). */
export const checkResultsQuery = defineQuery<ProviderCheckResult[] | undefined>('checkResults');
