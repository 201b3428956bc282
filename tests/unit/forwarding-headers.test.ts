/** The header rules every forward proxy we run follows (forwarding/headers.ts). */
import { describe, expect, it } from 'vitest';
import { connectionListed, endToEndHeaders, HOP_BY_HOP } from '../../forwarding/headers.js';

describe('endToEndHeaders', () => {
  const headers = {
    host: 'example.test',
    'user-agent': 'crawler/1',
    connection: 'keep-alive, X-Trace-Hop',
    'keep-alive': 'timeout=5',
    'proxy-authorization': 'Basic dG9rZW4=',
    'proxy-connection': 'keep-alive',
    'transfer-encoding': 'chunked',
    te: 'trailers',
    trailer: 'x-checksum',
    upgrade: 'websocket',
    'x-trace-hop': '1',
    'set-cookie': ['a=1', 'b=2'],
    absent: undefined,
  };

  it('drops every hop-by-hop header and passes the rest on as it came', () => {
    expect(endToEndHeaders(headers)).toEqual({
      host: 'example.test',
      'user-agent': 'crawler/1',
      'x-trace-hop': '1',
      'set-cookie': ['a=1', 'b=2'],
    });
    for (const name of HOP_BY_HOP) expect(endToEndHeaders({ [name]: 'x' })).toEqual({});
  });

  it('drops the headers the Connection header names when asked to', () => {
    expect(connectionListed(headers)).toEqual(new Set(['keep-alive', 'x-trace-hop']));
    expect(endToEndHeaders(headers, connectionListed(headers))).toEqual({
      host: 'example.test',
      'user-agent': 'crawler/1',
      'set-cookie': ['a=1', 'b=2'],
    });
  });

  it('without a Connection header nothing more is dropped', () => {
    const plain = { host: 'example.test', accept: '*/*' };
    expect(endToEndHeaders(plain, connectionListed(plain))).toEqual(plain);
  });
});
