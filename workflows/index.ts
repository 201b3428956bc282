// The workflow bundle's entry point: every workflow the worker registers.
export { proxyWorkflow } from './proxy/workflow.js';
