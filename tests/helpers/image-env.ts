/**
 * The environment the image gives its processes: the `ENV` instructions of
 * the Dockerfile's final stage, read from the Dockerfile itself so a test or
 * benchmark that runs "what the image runs" cannot drift from it.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const DOCKERFILE = fileURLToPath(new URL('../../Dockerfile', import.meta.url));

/** `ENV a=b c=d` and `ENV a b` lines after the last `FROM`, joined over line continuations. */
export function imageEnvironment(dockerfile = readFileSync(DOCKERFILE, 'utf8')): Record<string, string> {
  const lines = dockerfile.replace(/\\\r?\n/g, ' ').split(/\r?\n/);
  const lastFrom = lines.findLastIndex((l) => /^\s*FROM\s/i.test(l));
  const env: Record<string, string> = {};
  for (const line of lines.slice(lastFrom + 1)) {
    const m = /^\s*ENV\s+(.*)$/i.exec(line);
    if (!m) continue;
    const body = m[1]!.trim();
    if (!body.includes('=')) {
      const [key, ...rest] = body.split(/\s+/);
      env[key!] = rest.join(' ');
      continue;
    }
    for (const pair of body.split(/\s+/)) {
      const eq = pair.indexOf('=');
      if (eq <= 0) throw new Error(`Dockerfile: cannot read ENV ${JSON.stringify(pair)}`);
      env[pair.slice(0, eq)] = pair.slice(eq + 1).replace(/^"(.*)"$/, '$1');
    }
  }
  return env;
}
