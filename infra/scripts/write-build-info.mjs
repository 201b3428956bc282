// Bakes the commit into dist/build-info.json after `tsc` (npm run build).
// EGRESS_PROXIES_COMMIT wins (an image build from a tarball has no .git);
// otherwise `git rev-parse HEAD`; otherwise "unknown".
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';

let commit = process.env.EGRESS_PROXIES_COMMIT ?? '';
if (commit === '') {
  try {
    commit = execFileSync('git', ['rev-parse', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    commit = 'unknown';
  }
}
mkdirSync('dist', { recursive: true });
writeFileSync('dist/build-info.json', JSON.stringify({ commit }) + '\n');
console.log(`dist/build-info.json: commit ${commit}`);
