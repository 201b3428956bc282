/**
 * The VM providers' user-data with credentials (issue 51):
 * providers/shared/cloud-init-credentials.ts. The user's document is kept
 * byte for byte beside our htpasswd part, the password is nowhere, and
 * Python's email package (the parser cloud-init uses) reads the parts back
 * the way cloud-init would.
 */
import { execFileSync } from 'node:child_process';
import apacheMd5 from 'apache-md5';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import {
  CREDENTIALS_PART_FILENAME,
  userDataWithCredentials,
  VM_HTPASSWD_PATH,
} from '../../providers/shared/cloud-init-credentials.js';
import { buildSeedIso } from '../../providers/shared/seed.js';
import { credentialsWriteFile, userDataParts } from '../helpers/user-data-mime.js';
import { readIso9660 } from '../../providers/shared/iso9660.js';

const aprMd5 = apacheMd5 as unknown as (password: string, salt: string) => string;
const credentials = { username: 'ep-0123456789abcdef', password: 'SENTINEL-pw_0123456789abcdefXYZ' };

const CLOUD_CONFIG =
  '#cloud-config\nwrite_files:\n  - path: /etc/squid/squid.conf\n    content: |\n      http_port 3128\nruncmd: [systemctl restart squid]\n';
const SCRIPT = '#!/bin/sh\napt-get install -y squid\n';
const UNICODE = '#cloud-config\nwrite_files: [{path: /x, content: "é ünïcode ☃"}]\n';
const MULTIPART =
  'Content-Type: multipart/mixed; boundary="user-b"\nMIME-Version: 1.0\n\n' +
  '--user-b\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho one\n' +
  '--user-b\nContent-Type: text/cloud-config\n\n#cloud-config\nruncmd: [echo two]\n' +
  '--user-b--\n';

/** The htpasswd line our part writes, checked: owner, mode, deferred, and Apache MD5 of the password. */
function expectHtpasswd(userData: string): void {
  const entry = credentialsWriteFile(userData, VM_HTPASSWD_PATH);
  expect(entry).toMatchObject({ owner: 'root:proxy', permissions: '0640', defer: true });
  const m = /^(ep-0123456789abcdef):(\$apr1\$[./0-9A-Za-z]{1,8}\$[./0-9A-Za-z]{22})\n$/.exec(entry.content);
  expect(m).not.toBeNull();
  expect(aprMd5(credentials.password, m![2]!)).toBe(m![2]);
  expect(userData).not.toContain(credentials.password);
  expect(userData).not.toContain(Buffer.from(credentials.password).toString('base64').slice(0, 20));
}

/** What cloud-init's user_data.convert_string and walk() see: each part's type, file name and decoded payload. */
function pythonParts(userData: string): { type: string; filename: string | null; payload: string }[] {
  const script = `
import email, json, sys
data = sys.stdin.buffer.read()
assert b"mime-version:" in data[0:4096].lower()
msg = email.message_from_string(data.decode("utf-8"))
out = []
for part in msg.walk():
    if part.get_content_maintype() == "multipart":
        continue
    raw = part.get_payload(decode=True)
    cs = part.get_charset()
    out.append({"type": part.get_content_type(), "filename": part.get_filename(),
                "payload": raw.decode(cs.input_codec if cs and cs.input_codec else "utf-8", "surrogateescape")})
print(json.dumps(out))
`;
  return JSON.parse(execFileSync('python3', ['-c', script], { input: userData }).toString()) as never;
}

const hasPython = (() => {
  try {
    execFileSync('python3', ['-c', 'import email']);
    return true;
  } catch {
    return false;
  }
})();

describe('userDataWithCredentials', () => {
  it('leaves the user-data alone, byte for byte, without credentials', () => {
    for (const text of [CLOUD_CONFIG, SCRIPT, MULTIPART, UNICODE, '', undefined])
      expect(userDataWithCredentials(text, undefined)).toBe(text);
  });

  it.each([
    ['#cloud-config', CLOUD_CONFIG],
    ['#! script', SCRIPT],
    ['without a final newline', CLOUD_CONFIG.trimEnd()],
  ])('%s: the user part first, unchanged, then our cloud-config merged after it', (_name, text) => {
    const userData = userDataWithCredentials(text, credentials)!;
    const parts = userDataParts(userData);
    expect(parts).toHaveLength(2);
    expect(parts[0]!.headers['content-type']).toBe('text/plain; charset="us-ascii"');
    expect(parts[0]!.raw).toBe(text);
    expect(parts[1]!.headers['content-type']).toBe('text/cloud-config; charset="us-ascii"');
    expect(parts[1]!.headers['content-disposition']).toContain(CREDENTIALS_PART_FILENAME);
    const ours = parseYaml(parts[1]!.text) as { merge_how: unknown; write_files: unknown[] };
    // Appended to the user's write_files, the user's keys kept (cloud-init's documented merge).
    expect(ours.merge_how).toEqual([
      { name: 'list', settings: ['append'] },
      { name: 'dict', settings: ['no_replace', 'recurse_list'] },
    ]);
    expect(ours.write_files).toHaveLength(1);
    expectHtpasswd(userData);
  });

  it('carries non-ASCII text in base64, which decodes to the same bytes', () => {
    const userData = userDataWithCredentials(UNICODE, credentials)!;
    const [user] = userDataParts(userData);
    expect(user!.headers['content-transfer-encoding']).toBe('base64');
    expect(user!.text).toBe(UNICODE);
    expectHtpasswd(userData);
  });

  it('nests a MIME user-data as it stands: its own headers head the part', () => {
    const userData = userDataWithCredentials(MULTIPART, credentials)!;
    const boundary = /boundary="([^"]+)"/.exec(userData)![1]!;
    expect(userData).toContain(`\n--${boundary}\n${MULTIPART}\n--${boundary}\n`);
    expectHtpasswd(userData);
  });

  it('picks a boundary the user text does not contain', () => {
    const text = `#cloud-config\n# --==egress-proxies-user-data==\nruncmd: [true]\n`;
    const userData = userDataWithCredentials(text, credentials)!;
    const boundary = /boundary="([^"]+)"/.exec(userData)![1]!;
    expect(text).not.toContain(boundary);
    expect(userDataParts(userData)[0]!.raw).toBe(text);
  });

  it('is our cloud-config alone when the Proxy has no cloud-init', () => {
    for (const text of [undefined, '']) {
      const userData = userDataWithCredentials(text, credentials)!;
      expect(userData.startsWith('#cloud-config\n')).toBe(true);
      expectHtpasswd(userData);
    }
  });

  it.skipIf(!hasPython)("reads back with Python's email package as cloud-init reads it", () => {
    for (const [text, parts] of [
      [CLOUD_CONFIG, [CLOUD_CONFIG]],
      [SCRIPT, [SCRIPT]],
      [UNICODE, [UNICODE]],
      [MULTIPART, ['#!/bin/sh\necho one', '#cloud-config\nruncmd: [echo two]']],
    ] as const) {
      const userData = userDataWithCredentials(text, credentials)!;
      const read = pythonParts(userData);
      // Byte for byte: the newline before each delimiter is the delimiter's, not the part's.
      expect(read.slice(0, -1).map((p) => p.payload)).toEqual(parts);
      expect(read.at(-1)).toMatchObject({ type: 'text/cloud-config', filename: CREDENTIALS_PART_FILENAME });
      expect(read.at(-1)!.payload).toBe(userDataParts(userData).at(-1)!.text);
    }
  });
});

describe('the NoCloud seed with credentials', () => {
  it('writes the multipart as user-data, with the htpasswd and without the password', () => {
    const iso = buildSeedIso({
      instanceName: 'proxy-a',
      cloudInit: CLOUD_CONFIG,
      credentials,
      installGuestAgent: true,
      vendorData: undefined,
    });
    expect(iso.includes(Buffer.from(credentials.password))).toBe(false);
    const userData = readIso9660(iso, true)
      .files.find((f) => f.name === 'user-data')!
      .data.toString('utf8');
    expect(userDataParts(userData)[0]!.raw).toBe(CLOUD_CONFIG);
    expectHtpasswd(userData);
  });
});
