// The baseline for the provisioning benchmark: a workflow that does nothing.
export async function noopWorkflow(): Promise<void> {
  // Intentionally empty: measures start → complete on the same server and worker setup.
}
