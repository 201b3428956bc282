/**
 * Start-time checks and set-up against Temporal, shared by the processes.
 */
import type { Connection } from '@temporalio/client';
import type { Logger } from 'pino';
import { SEARCH_ATTRIBUTES } from '../resources/search-attributes.js';

/** temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD (every attribute of ours is a Keyword). */
const INDEXED_VALUE_TYPE_KEYWORD = 2;

/** gRPC status codes that mean "not allowed here", not "broken". */
const NOT_ALLOWED = new Set([7 /* PERMISSION_DENIED */, 12 /* UNIMPLEMENTED */, 16 /* UNAUTHENTICATED */]);

/** Fails at start, in one line, when the namespace does not exist or cannot be used with these credentials. */
export async function checkNamespace(connection: Connection, namespace: string): Promise<void> {
  try {
    await connection.workflowService.describeNamespace({ namespace });
  } catch (error) {
    const first = (error as Error).message.split('\n')[0];
    throw new Error(`Temporal namespace "${namespace}" cannot be used: ${first}`, { cause: error });
  }
}

/** The command an operator runs when the worker may not register the attributes itself. */
export function searchAttributeCommand(namespace: string): string {
  return (
    `temporal operator search-attribute create --namespace ${namespace} ` +
    Object.keys(SEARCH_ATTRIBUTES)
      .map((name) => `--name ${name} --type Keyword`)
      .join(' ')
  );
}

/**
 * Registers the Proxy search attributes the namespace lacks. Where the
 * credentials may not (Temporal Cloud, a restricted role) it logs the
 * command to run instead: workflows start without them, unfindable by
 * those attributes until they exist.
 */
export async function registerSearchAttributes(
  connection: Connection,
  namespace: string,
  logger: Logger,
): Promise<'present' | 'registered' | 'not-allowed'> {
  try {
    const listed = await connection.operatorService.listSearchAttributes({ namespace });
    const have = new Set(Object.keys(listed.customAttributes ?? {}));
    const missing = Object.keys(SEARCH_ATTRIBUTES).filter((name) => !have.has(name));
    if (missing.length === 0) return 'present';
    await connection.operatorService.addSearchAttributes({
      namespace,
      searchAttributes: Object.fromEntries(missing.map((name) => [name, INDEXED_VALUE_TYPE_KEYWORD])),
    });
    logger.info({ namespace, registered: missing }, 'registered search attributes');
    return 'registered';
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'number' && NOT_ALLOWED.has(code)) {
      logger.warn(
        { namespace, command: searchAttributeCommand(namespace) },
        'may not register the Proxy search attributes; run the command once (see README)',
      );
      return 'not-allowed';
    }
    throw new Error(
      `registering search attributes in "${namespace}": ${(error as Error).message.split('\n')[0]}`,
      {
        cause: error,
      },
    );
  }
}
