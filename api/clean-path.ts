/**
 * Path canonicalisation as the seed's router (Go's net/http ServeMux)
 * answered it: a request whose path is not clean (`//`, `.` or `..`
 * segments) is redirected with 307 to the cleaned path, query kept, so a
 * client whose base URL ends in "/" still works (every common client follows
 * a 307 and keeps the method and body).
 *
 * The rules are Go's, byte for byte (net/url's EscapedPath, ServeMux's
 * cleanPath, url.URL.String, http.Redirect); tests/integration/
 * api-clean-paths.test.ts checks them against a real Go ServeMux. They work
 * on the request target as the client sent it: the WHATWG URL that Hono sees
 * has already removed dot segments and turned "\" into "/".
 */
import type { Context } from 'hono';

const HEX = '0123456789ABCDEF';

function isAlnum(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

/** net/url shouldEscape(c, encodePath). */
function shouldEscape(c: number): boolean {
  if (isAlnum(c)) return false;
  // - _ . ~
  if (c === 0x2d || c === 0x5f || c === 0x2e || c === 0x7e) return false;
  // $ & + , / : ; = @ are left alone in a path; ? is not.
  if ('$&+,/:;=@'.includes(String.fromCharCode(c))) return false;
  return true;
}

/** net/url validEncoded(s, encodePath): may these bytes stand as an escaped path? */
function validEncoded(s: Uint8Array): boolean {
  for (const c of s) {
    if ("!$&'()*+,;=:@[]%".includes(String.fromCharCode(c))) continue;
    if (shouldEscape(c)) return false;
  }
  return true;
}

function isHex(c: number | undefined): boolean {
  return c !== undefined && (isAlnum(c) ? /[0-9a-fA-F]/.test(String.fromCharCode(c)) : false);
}

/** net/url unescape(s, encodePath); undefined where Go fails (a malformed %-escape). */
function unescape(s: Uint8Array): Uint8Array | undefined {
  const out: number[] = [];
  for (let i = 0; i < s.length; i++) {
    if (s[i] === 0x25) {
      if (!isHex(s[i + 1]) || !isHex(s[i + 2])) return undefined;
      out.push(parseInt(String.fromCharCode(s[i + 1]!, s[i + 2]!), 16));
      i += 2;
    } else {
      out.push(s[i]!);
    }
  }
  return Uint8Array.from(out);
}

/** net/url escape(s, encodePath), as a string of ASCII. */
function escape(s: Uint8Array): string {
  let out = '';
  for (const c of s) out += shouldEscape(c) ? `%${HEX[c >> 4]}${HEX[c & 15]}` : String.fromCharCode(c);
  return out;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** url.URL.EscapedPath() of a request path as sent (bytes); undefined when Go rejects the path. */
function escapedPath(raw: Uint8Array): string | undefined {
  const path = unescape(raw);
  if (path === undefined) return undefined;
  // setPath keeps the raw form when it is not the default encoding; EscapedPath
  // uses it when it is a valid encoding of the same path.
  if (validEncoded(raw)) {
    const again = unescape(raw);
    if (again && sameBytes(again, path)) return Buffer.from(raw).toString('latin1');
  }
  return escape(path);
}

/** path.Clean (Go). */
export function goPathClean(p: string): string {
  if (p === '') return '.';
  const rooted = p.startsWith('/');
  const out: string[] = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      if (out.length > 0 && out[out.length - 1] !== '..') out.pop();
      else if (!rooted) out.push('..');
      continue;
    }
    out.push(seg);
  }
  const joined = out.join('/');
  if (rooted) return `/${joined}`;
  return joined === '' ? '.' : joined;
}

/** ServeMux's cleanPath: path.Clean, with a trailing slash kept. */
export function goCleanPath(p: string): string {
  if (p === '') return '/';
  if (!p.startsWith('/')) p = `/${p}`;
  let np = goPathClean(p);
  if (p.endsWith('/') && np !== '/') np += '/';
  return np;
}

/**
 * A path Go's mux leaves as it is and WHATWG parsing does not rewrite:
 * segments of unreserved characters, none empty or starting with a dot (so
 * no "." or ".." segment), no percent sign, at most a trailing slash, then
 * an optional query. Every route the API serves is requested this way, so
 * the escaping and cleaning below run only for the unusual ones.
 */
const PLAIN_TARGET = /^(?:\/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*\/?(?:\?.*)?$/s;

export function isPlainTarget(target: string): boolean {
  return target.startsWith('/') && PLAIN_TARGET.test(target);
}

/**
 * The Location ServeMux redirects a request target to, or undefined when
 * its path is clean (or Go would reject it before routing). `target` is the
 * request line's target as bytes read as latin1 (Node's `req.url`);
 * origin-form (`/path?query`) or absolute-form (`http://host/path?query`).
 */
export function cleanPathLocation(target: string): string | undefined {
  return isPlainTarget(target) ? undefined : fullCleanPathLocation(target);
}

/** cleanPathLocation without the plain-path shortcut (exported for the test that holds the two equal). */
export function fullCleanPathLocation(target: string): string | undefined {
  let rest = target;
  const absolute = /^https?:\/\/[^/?]*/i.exec(rest);
  if (absolute) rest = rest.slice(absolute[0].length);
  else if (!rest.startsWith('/')) return undefined; // "*" and the like never reach the mux here
  const q = rest.indexOf('?');
  const rawPath = q < 0 ? rest : rest.slice(0, q);
  const rawQuery = q < 0 ? '' : rest.slice(q + 1);
  const escaped = escapedPath(Buffer.from(rawPath, 'latin1'));
  if (escaped === undefined) return undefined;
  const cleaned = goCleanPath(escaped);
  if (cleaned === escaped) return undefined;
  // url.URL{Path: cleaned, RawQuery}.String(): the already-escaped path is
  // escaped again ("%41" becomes "%2541"), as Go does.
  let location = escape(Buffer.from(cleaned, 'latin1'));
  if (rawQuery !== '') location += `?${rawQuery}`;
  return location;
}

/** The request target as sent: Node's `req.url` under @hono/node-server, else the URL's path and query. */
export function requestTarget(c: Context): string {
  const incoming = (c.env as { incoming?: { url?: unknown } } | undefined)?.incoming;
  if (typeof incoming?.url === 'string') return incoming.url;
  const url = new URL(c.req.url);
  return url.pathname + url.search;
}

const HTML_ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&#34;',
  "'": '&#39;',
};

/** http.Redirect's 307: a short HTML body for GET, Content-Type for GET and HEAD, nothing else. */
export function temporaryRedirect(c: Context, location: string): Response {
  const headers: Record<string, string> = { Location: location };
  const method = c.req.method;
  if (method === 'GET' || method === 'HEAD') headers['Content-Type'] = 'text/html; charset=utf-8';
  // No body but a declared empty one, as Go sends (not an empty chunked stream).
  if (method !== 'GET')
    return c.body(null, 307, method === 'HEAD' ? headers : { ...headers, 'Content-Length': '0' });
  const href = location.replace(/[&<>"']/g, (ch) => HTML_ESCAPES[ch]!);
  return c.body(`<a href="${href}">Temporary Redirect</a>.\n\n`, 307, headers);
}

/**
 * A path the WHATWG URL rewrote where Go routes it as sent: a backslash (a
 * "/" to WHATWG) or a dot segment written with %2e (removed by WHATWG; an
 * ordinary segment to Go). Such a path is answered 404: it matches none of
 * the fixed routes in Go, and a lease ID of "." or ".." is never issued.
 */
export function rewrittenByWhatwg(target: string): boolean {
  return !isPlainTarget(target) && fullRewrittenByWhatwg(target);
}

/** rewrittenByWhatwg without the plain-path shortcut (exported for the test that holds the two equal). */
export function fullRewrittenByWhatwg(target: string): boolean {
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  if (path.includes('\\')) return true;
  return path.split('/').some((seg) => /%2e/i.test(seg) && /^(?:\.|%2e){1,2}$/i.test(seg));
}
