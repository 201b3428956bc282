/**
 * Reads back the user-data the VM providers make with credentials
 * (providers/shared/cloud-init-credentials.ts): the multipart's parts, each
 * with its headers, its body as sent and its body decoded. Enough MIME for
 * that one shape (one level, LF line ends); the unit test also hands the text
 * to Python's email package, the parser cloud-init itself uses.
 */
import { parse as parseYaml } from 'yaml';

export interface MimePart {
  headers: Record<string, string>;
  /** The body between the part's blank line and the next delimiter, as it stands in the text. */
  raw: string;
  /** The body after its Content-Transfer-Encoding (base64 or none), as UTF-8. */
  text: string;
}

/** The parts of a `multipart/mixed` user-data; throws on anything else. */
export function userDataParts(userData: string): MimePart[] {
  const [head, ...rest] = userData.split('\n\n');
  const boundary = /boundary="([^"]+)"/.exec(head ?? '')?.[1];
  if (!head?.startsWith('Content-Type: multipart/mixed') || boundary === undefined)
    throw new Error('not a multipart/mixed user-data');
  const body = rest.join('\n\n');
  const end = body.lastIndexOf(`\n--${boundary}--`);
  if (!body.startsWith(`--${boundary}\n`) || end < 0) throw new Error('no delimiters around the parts');
  return body
    .slice(`--${boundary}\n`.length, end)
    .split(`\n--${boundary}\n`)
    .map((chunk) => {
      const blank = chunk.indexOf('\n\n');
      const headers: Record<string, string> = {};
      for (const line of chunk.slice(0, blank).split('\n')) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      const raw = chunk.slice(blank + 2);
      const text =
        headers['content-transfer-encoding'] === 'base64'
          ? Buffer.from(raw.replace(/\n/g, ''), 'base64').toString('utf8')
          : raw;
      return { headers, raw, text };
    });
}

/** The `write_files` entry of our credentials part (the last part, or the whole user-data) for `path`. */
export function credentialsWriteFile(
  userData: string,
  path: string,
): { content: string; owner: string; permissions: string; defer: boolean } {
  // Without a cloud-init of the Proxy's own, our cloud-config is the whole user-data.
  const ours = userData.startsWith('#cloud-config') ? userData : userDataParts(userData).at(-1)!.text;
  const doc = parseYaml(ours) as {
    write_files: { path: string; content: string; owner: string; permissions: string; defer: boolean }[];
  };
  const entry = doc.write_files.find((f) => f.path === path);
  if (entry === undefined) throw new Error(`no write_files entry for ${path}`);
  return entry;
}
