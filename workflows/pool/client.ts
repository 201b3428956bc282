/** How code outside the sandbox names the ProxyPool workflow: its type, and the function's type for typed starts. */
import type { proxyPoolWorkflow } from './workflow.js';

export const POOL_WORKFLOW_TYPE = 'proxyPoolWorkflow';
export type PoolWorkflow = typeof proxyPoolWorkflow;
