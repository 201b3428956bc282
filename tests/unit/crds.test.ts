import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CRD_FILES } from '../../resources/crds.js';
import { CRD_DIR, HELM_CRD_DIR, renderCrd } from '../../resources/generate-crds.js';

describe('generated CRDs', () => {
  it.each(Object.entries(CRD_FILES))(
    '%s matches resources/proxy-schema.ts (run npm run gen:crds)',
    (file, build) => {
      expect(readFileSync(CRD_DIR + file, 'utf8')).toBe(renderCrd(build));
    },
  );

  it.each(Object.entries(CRD_FILES))(
    "the Helm chart's crds/%s is the same file (run npm run gen:crds)",
    (file, build) => {
      expect(readFileSync(HELM_CRD_DIR + file, 'utf8')).toBe(renderCrd(build));
    },
  );

  it('never carries additionalProperties: false, which the apiserver rejects in structural schemas', () => {
    for (const build of Object.values(CRD_FILES)) {
      expect(JSON.stringify(build())).not.toContain('"additionalProperties":false');
    }
  });
});
