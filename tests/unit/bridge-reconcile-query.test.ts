import { describe, expect, it } from 'vitest';
import { runningProxyWorkflowsQuery } from '../../k8s-bridge/reconcile-pass.js';

describe('the reconcile pass lists only its own running Proxy workflows', () => {
  it('names the workflow type, the task queue and, when scoped, the watched namespaces', () => {
    expect(runningProxyWorkflowsQuery('tq', [])).toBe(
      "WorkflowType = 'proxyWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'tq'",
    );
    expect(runningProxyWorkflowsQuery('tq', ['a'])).toMatch(/ AND ProxyNamespace = 'a'$/);
    expect(runningProxyWorkflowsQuery('tq', ['a', 'b'])).toMatch(/ AND ProxyNamespace IN \('a', 'b'\)$/);
  });
});
