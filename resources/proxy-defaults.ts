/**
 * Spec defaults the workflow sandbox needs, apart from the schema literals
 * in proxy-schema.ts: a workflow's modules are evaluated again for each new
 * run, and the schema's object literals are the largest of them.
 */
export const DEFAULT_PORT = 3128;
export const DEFAULT_MAX_LEASES = 5;
