import { defineQuery } from '@temporalio/workflow';

export interface GcProgress {
  phase: 'listing-instances' | 'listing-proxies' | 'deleting' | 'done';
  /** Providers whose listByTag has not answered yet (a hung backend shows up here). */
  pendingProviders: string[];
  pendingDeletions: number;
}

/** Where a running sweep is: which providers it still waits for. */
export const gcProgressQuery = defineQuery<GcProgress>('gcProgress');
