// The workflow bundle's entry point: every workflow the worker registers.
export { proxyWorkflow } from './proxy/workflow.js';
export { orphanGcWorkflow } from './gc/workflow.js';
export { providerChecksWorkflow } from './provider-checks/workflow.js';
export { driftSweepWorkflow } from './drift-sweep/workflow.js';
export { proxyPoolWorkflow } from './pool/workflow.js';
