/**
 * The user-data a VM gets when its Proxy has credentials (issue 51): the
 * Proxy's own cloud-init, unchanged, and one cloud-config part of ours that
 * writes the htpasswd Squid checks those credentials against. The two travel
 * as a MIME multipart, cloud-init's standard way to carry more than one
 * document; no credentials, no change at all (byte for byte).
 *
 * Only the htpasswd line (an Apache MD5 `$apr1$` hash) goes into it, never
 * the password: user-data is readable by whoever can read the VM's metadata
 * or its seed ISO. Pure and synchronous; the text is never logged.
 */
import { stringify } from 'yaml';
import { htpasswdLine, type ProxyCredentials } from '../../credentials/proxy-credentials.js';

/** Where the VM providers write the htpasswd: the path a Proxy's Squid config names. */
export const VM_HTPASSWD_PATH = '/etc/squid/egress-proxies.htpasswd';
/**
 * Readable by Squid's helpers (they run as `proxy` on Debian and Ubuntu,
 * where base-passwd makes that account on every system), by nobody else.
 */
export const VM_HTPASSWD_OWNER = 'root:proxy';
export const VM_HTPASSWD_PERMISSIONS = '0640';
/** Our part's file name, which cloud-init records in the merged config it keeps. */
export const CREDENTIALS_PART_FILENAME = 'egress-proxies-credentials.cfg';

/**
 * Our part is merged after the user's cloud-config (cloud-init merges parts
 * in order): lists appended, existing keys kept, so the user's `write_files`
 * stay and ours join them. The default merge would replace the user's list.
 */
const MERGE_HOW = [
  { name: 'list', settings: ['append'] },
  { name: 'dict', settings: ['no_replace', 'recurse_list'] },
];

/** cloud-init parses a user-data as MIME when this appears in its first 4,096 bytes (user_data.convert_string). */
const MIME_MARKER = 'mime-version:';
const MIME_SNIFF_BYTES = 4096;

/**
 * Our cloud-config: the htpasswd written in cloud-init's final stage
 * (`defer: true`), after `packages:` are installed and before `runcmd` and
 * user scripts run, so a Squid that the user's cloud-init starts finds it;
 * basic_ncsa_auth re-reads it whenever it changes.
 */
export function credentialsCloudConfig(credentials: ProxyCredentials): string {
  const doc = {
    merge_how: MERGE_HOW,
    write_files: [
      {
        path: VM_HTPASSWD_PATH,
        content: `${htpasswdLine(credentials)}\n`,
        owner: VM_HTPASSWD_OWNER,
        permissions: VM_HTPASSWD_PERMISSIONS,
        defer: true,
      },
    ],
  };
  return `#cloud-config\n# egress-proxies: the Proxy's credentials, as the htpasswd its Squid reads.\n${stringify(doc)}`;
}

/**
 * The user-data for a VM: `cloudInit` itself without credentials; with
 * them, our part alone when there is no cloud-init, else a multipart of the
 * user's document (first, kept byte for byte) and ours.
 */
export function userDataWithCredentials(
  cloudInit: string | undefined,
  credentials: ProxyCredentials | undefined,
): string | undefined {
  if (credentials === undefined) return cloudInit;
  const ours = credentialsCloudConfig(credentials);
  if (cloudInit === undefined || cloudInit === '') return ours;
  const boundary = boundaryFor(cloudInit);
  const ourPart = [
    'Content-Type: text/cloud-config; charset="us-ascii"',
    'MIME-Version: 1.0',
    'Content-Transfer-Encoding: 7bit',
    `Content-Disposition: attachment; filename="${CREDENTIALS_PART_FILENAME}"`,
    '',
    ours,
  ].join('\n');
  // The newline before a delimiter belongs to it (RFC 2046 5.1.1): each body is exactly what precedes it.
  return (
    `Content-Type: multipart/mixed; boundary="${boundary}"\nMIME-Version: 1.0\n\n` +
    `--${boundary}\n${userPart(cloudInit)}\n` +
    `--${boundary}\n${ourPart}\n` +
    `--${boundary}--\n`
  );
}

/**
 * The user's document as a part. A MIME document already is one (its own
 * headers head the part; cloud-init walks nested multiparts). Anything else
 * goes as `text/plain`, whose type cloud-init reads from its first line
 * (`#cloud-config`, `#!`, `#include`...), as it does for a whole user-data
 * that is not MIME. Non-ASCII text goes in base64: cloud-init decodes an
 * unencoded part's payload in a way that garbles non-ASCII characters.
 */
function userPart(cloudInit: string): string {
  const head = Buffer.from(cloudInit, 'utf8').subarray(0, MIME_SNIFF_BYTES).toString('latin1');
  if (head.toLowerCase().includes(MIME_MARKER)) return cloudInit;
  // eslint-disable-next-line no-control-regex
  const ascii = /^[\x00-\x7f]*$/.test(cloudInit);
  return [
    `Content-Type: text/plain; charset="${ascii ? 'us-ascii' : 'utf-8'}"`,
    'MIME-Version: 1.0',
    `Content-Transfer-Encoding: ${ascii ? '7bit' : 'base64'}`,
    '',
    ascii ? cloudInit : base64Lines(cloudInit),
  ].join('\n');
}

/** Base64 in lines of 76 characters, as MIME wants them. */
function base64Lines(text: string): string {
  return (
    Buffer.from(text, 'utf8')
      .toString('base64')
      .match(/.{1,76}/g) ?? []
  ).join('\n');
}

/** A boundary that occurs nowhere in the user's text (a delimiter line must not appear inside a part). */
function boundaryFor(cloudInit: string): string {
  for (let n = 0; ; n++) {
    const boundary = `==egress-proxies-user-data${n === 0 ? '' : `-${n}`}==`;
    if (!cloudInit.includes(boundary)) return boundary;
  }
}
