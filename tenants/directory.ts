/**
 * The tenants a server knows right now: the single token's `default`, those
 * of the tenants file, or the open tenant when neither is set. The file is
 * read at start (a bad file stops the start, naming what is wrong) and again
 * whenever it changes (a stat every `pollMs`, which follows the symlink swap
 * of a mounted Secret, compared with the stat taken before the last read,
 * so a change made right after the start is not missed); a changed file
 * that does not parse is logged and the tenants loaded before stay in force.
 */
import { readFileSync, statSync } from 'node:fs';
import type { Logger } from 'pino';
import { parse, YAMLParseError } from 'yaml';
import {
  DEFAULT_TENANT,
  defaultTenant,
  findTenant,
  parseTenants,
  TenantsFileError,
  type Tenant,
} from './tenants.js';

export const DEFAULT_TENANTS_POLL_MS = 2_000;

export interface TenantDirectoryOptions {
  /** The single token ('' for none): the tenant `default`. */
  token: string;
  /** A YAML tenants file (tenants/tenants.ts for its shape). */
  tenantsFile?: string | undefined;
  logger: Logger;
  /** How often the file is checked for changes (default 2 s). */
  pollMs?: number;
}

export interface TenantDirectory {
  /** No token and no tenants file: every request is the open tenant. */
  readonly open: boolean;
  /** Tenants come from a file (else only the single token's `default`, or the open tenant). */
  readonly fromFile: boolean;
  /**
   * Lease ids are sealed to their tenant (tenants/lease-ids.ts) when tenants
   * come from a file; with the single token they keep the seed's shape.
   */
  readonly sealsLeaseIds: boolean;
  /** The tenant of this token; the open tenant whatever is sent when `open`; undefined for a wrong or missing token. */
  authenticate(token: string | undefined): Tenant | undefined;
  /** Tenant names (for metric labels and the start-up line). */
  names(): string[];
  /** Stops watching the file. */
  close(): void;
}

/** Reads the tenants file (throws TenantsFileError naming the problem) and starts watching it. */
export function createTenantDirectory(opts: TenantDirectoryOptions): TenantDirectory {
  const { token, tenantsFile, logger } = opts;
  const single = token === '' ? [] : [defaultTenant(token)];
  const open = token === '' && tenantsFile === undefined;
  const openTenant = defaultTenant('');
  // The file's identity when it was read, taken before reading it: a change
  // after that moment shows as a different identity at the next check.
  let loaded = tenantsFile === undefined ? '' : identity(tenantsFile);
  let tenants: Tenant[] =
    tenantsFile === undefined ? single : [...single, ...loadTenantsFile(tenantsFile, token)];

  const check = () => {
    const now = identity(tenantsFile!);
    if (now === loaded) return;
    loaded = now;
    try {
      tenants = [...single, ...loadTenantsFile(tenantsFile!, token)];
      logger.info({ tenants: tenants.map((t) => t.name) }, 'tenants file reloaded');
    } catch (error) {
      logger.error(
        { err: (error as Error).message },
        'tenants file changed but cannot be used; the tenants loaded before stay in force',
      );
    }
  };
  const timer =
    tenantsFile === undefined ? undefined : setInterval(check, opts.pollMs ?? DEFAULT_TENANTS_POLL_MS);
  timer?.unref();

  return {
    open,
    fromFile: tenantsFile !== undefined,
    sealsLeaseIds: tenantsFile !== undefined,
    authenticate: (presented) => {
      if (open) return openTenant;
      if (presented === undefined) return undefined;
      return findTenant(tenants, presented);
    },
    names: () => (open ? [DEFAULT_TENANT] : tenants.map((t) => t.name)),
    close() {
      if (timer) clearInterval(timer);
    },
  };
}

/**
 * The tenants of a file. Parse errors give the line and column, never the
 * text around them (the file is a Secret's).
 */
export function loadTenantsFile(path: string, token: string): Tenant[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new TenantsFileError(
      `tenants file ${path}: cannot read it: ${(error as NodeJS.ErrnoException).code ?? 'error'}`,
    );
  }
  let value: unknown;
  try {
    value = parse(text, { prettyErrors: false });
  } catch (error) {
    if (error instanceof YAMLParseError) {
      const before = text.slice(0, error.pos[0]).split('\n');
      throw new TenantsFileError(
        `tenants file ${path}: not YAML (line ${before.length}, column ${before.at(-1)!.length + 1}): ${error.code}`,
      );
    }
    throw error;
  }
  const tenants = parseTenants(value, `tenants file ${path}`);
  if (token !== '' && tenants.some((t) => t.name === DEFAULT_TENANT))
    throw new TenantsFileError(
      `tenants file ${path}: the tenant "${DEFAULT_TENANT}" is the single token's (DISCOVERY_TOKEN or --discovery-token-file); name it otherwise`,
    );
  return tenants;
}

/** What tells one version of the file from another: inode, size and modification time ('' when it cannot be read). */
function identity(path: string): string {
  try {
    const st = statSync(path);
    return `${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch {
    return '';
  }
}
