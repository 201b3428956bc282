/**
 * What a crawler puts in its proxy URL's credentials, parsed: the password
 * is the API token (when one is configured); the username carries the
 * connection's options, the convention crawler tools already use for
 * commercial proxy gateways.
 *
 * Grammar (documented in README.md, "The gateway"):
 *
 *   username = "" | option *( "_" option )
 *   option   = name "-" value
 *   name     = lowercase letter *( lowercase letter | digit )    ; ≤ 63
 *   value    = 1*( letter | digit | "-" | "." )                  ; ≤ 128
 *
 * The option splits at its FIRST "-", so values may hold "-" (`geo-local-b`
 * selects geo=local-b) but names may not. Reserved names: `session` (a
 * sticky session id), `ttl` (lease seconds), `pool` (only the members of
 * this ProxyPool, as the lease API's `"pool"`). Every other name is an
 * attribute selector (`geo-eu` selects proxies whose attribute geo is eu).
 * "_" separates options because no value may hold it, and because `,` `;`
 * `:` `@` would need quoting in a proxy URL.
 */

/** The username or the Proxy-Authorization header cannot be understood: a 400 (or 407) with this message. */
export class GatewayCredentialsError extends Error {
  override name = 'GatewayCredentialsError';
  constructor(
    message: string,
    /** 407: the credentials are missing or the token is wrong; 400: the options are malformed. */
    readonly status: 400 | 407,
  ) {
    super(message);
  }
}

export interface ConnectionOptions {
  /** The sticky session id, when the username named one. */
  session?: string;
  /** Lease TTL in seconds, when the username named one (checked against the maximum). */
  ttlSeconds?: number;
  /** Attribute selector pairs, sorted by name (so equal selectors compare equal). */
  selector: Array<[string, string]>;
  /** Only the members of this ProxyPool, when the username named one. */
  pool?: string;
}

const NAME = /^[a-z][a-z0-9]{0,62}$/;
const VALUE = /^[A-Za-z0-9.-]{1,128}$/;
/** Longer usernames are refused before any parsing work. */
export const MAX_USERNAME_LENGTH = 1024;

/**
 * Parses a username per the grammar above. Throws GatewayCredentialsError
 * (400) naming the offending option; never echoes more than the option
 * name, so a password typed into the wrong field does not reach a log.
 */
export function parseUsername(username: string, maxTtlSeconds: number): ConnectionOptions {
  const options: ConnectionOptions = { selector: [] };
  if (username === '') return options;
  if (username.length > MAX_USERNAME_LENGTH) {
    throw new GatewayCredentialsError(`proxy username is longer than ${MAX_USERNAME_LENGTH} characters`, 400);
  }
  const seen = new Set<string>();
  for (const [index, option] of username.split('_').entries()) {
    const dash = option.indexOf('-');
    const name = dash < 0 ? option : option.slice(0, dash);
    const value = dash < 0 ? '' : option.slice(dash + 1);
    const where = `option ${index + 1} of the proxy username`;
    if (!NAME.test(name)) {
      throw new GatewayCredentialsError(
        `${where}: expected name-value with a lowercase name (session-abc, geo-eu, ttl-600); options are separated by "_"`,
        400,
      );
    }
    if (!VALUE.test(value)) {
      throw new GatewayCredentialsError(
        `${where} (${name}): the value must be 1-128 letters, digits, "-" or "."`,
        400,
      );
    }
    if (seen.has(name)) throw new GatewayCredentialsError(`${where}: ${name} is given twice`, 400);
    seen.add(name);
    if (name === 'session') {
      options.session = value;
    } else if (name === 'pool') {
      options.pool = value;
    } else if (name === 'ttl') {
      if (!/^[1-9][0-9]{0,9}$/.test(value) || Number(value) > maxTtlSeconds) {
        throw new GatewayCredentialsError(`ttl must be whole seconds between 1 and ${maxTtlSeconds}`, 400);
      }
      options.ttlSeconds = Number(value);
    } else {
      options.selector.push([name, value]);
    }
  }
  options.selector.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return options;
}

export interface ProxyCredentials {
  username: string;
  password: string;
}

/**
 * Decodes `Proxy-Authorization: Basic base64(user:pass)`. Undefined when
 * the header is absent; throws 407 when it is present but not Basic or not
 * decodable.
 */
export function decodeProxyAuthorization(header: string | undefined): ProxyCredentials | undefined {
  if (header === undefined) return undefined;
  const m = /^\s*basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (!m) throw new GatewayCredentialsError('Proxy-Authorization must be Basic credentials', 407);
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw new GatewayCredentialsError('Proxy-Authorization must hold user:password', 407);
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}
