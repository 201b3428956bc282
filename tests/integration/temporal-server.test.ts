import { describe, expect, inject, it } from 'vitest';
import { SEARCH_ATTRIBUTES } from '../../resources/search-attributes.js';
import { temporalClient } from '../helpers/temporal.js';

describe('the Temporal dev server the harness started from the installed CLI', () => {
  it('has every search attribute of ours registered, as Keyword', async () => {
    const { client, connection } = await temporalClient();
    try {
      const response = await client.connection.operatorService.listSearchAttributes({
        namespace: inject('temporalNamespace'),
      });
      const custom = response.customAttributes ?? {};
      for (const name of Object.keys(SEARCH_ATTRIBUTES)) {
        // 2 = INDEXED_VALUE_TYPE_KEYWORD
        expect(custom[name], name).toBe(2);
      }
    } finally {
      await connection.close();
    }
  });

  it('serves the Web UI', async () => {
    const url = inject('temporalUiUrl');
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(url);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('<html');
  });
});
