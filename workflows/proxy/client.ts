/**
 * How code outside the sandbox talks to a Proxy workflow, typed by the
 * workflow's own definitions: its type name, its workflow ID and its
 * signals with their argument types. The client is taken structurally (a
 * Temporal `Client`, or an activity's `Context.current().client`), so this
 * module imports nothing the workflow sandbox forbids and the workflow's
 * messages and callers cannot drift apart.
 */
import type { SignalDefinition } from '@temporalio/workflow';
import { proxyWorkflowId } from './ids.js';
import type { ProxyRef } from './types.js';
import type { proxyWorkflow } from './workflow.js';

/** The workflow's registered type name (the exported function's name): what visibility queries and starts name. */
export const PROXY_WORKFLOW_TYPE = 'proxyWorkflow';

/** The workflow function's type, for `start`/`signalWithStart` to check their arguments against. */
export type ProxyWorkflow = typeof proxyWorkflow;

/** The part of a Temporal client that signals a workflow by ID. */
export interface SignallingClient {
  workflow: {
    getHandle(workflowId: string): {
      signal<Args extends unknown[]>(def: SignalDefinition<Args>, ...args: Args): Promise<void>;
    };
  };
}

/** Signals the Proxy's workflow (the latest run of its ID); WorkflowNotFoundError when none is running. */
export function signalProxy<Args extends unknown[]>(
  client: SignallingClient,
  target: ProxyRef | { workflowId: string },
  signal: SignalDefinition<Args>,
  ...args: Args
): Promise<void> {
  const id = 'workflowId' in target ? target.workflowId : proxyWorkflowId(target);
  return client.workflow.getHandle(id).signal(signal, ...args);
}
