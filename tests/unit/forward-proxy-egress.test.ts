import { describe, expect, it } from 'vitest';
import { egressSource } from '../../providers/local/forward-proxy.js';

// Which source address a forward proxy binds its outgoing connection to.
describe('egressSource', () => {
  it.each([
    ['127.77.1.2', '127.0.0.1', { localAddress: '127.77.1.2', family: 4 }],
    ['127.77.1.2', '127.9.9.9', { localAddress: '127.77.1.2', family: 4 }],
    ['127.77.1.2', 'localhost', { localAddress: '127.77.1.2', family: 4 }],
    ['::1', '[::1]', { localAddress: '::1', family: 6 }],
    ['::1', 'localhost', { localAddress: '::1', family: 6 }],
  ])('listening on %s, a target %s leaves from the listen address', (listen, target, expected) => {
    expect(egressSource(listen, target)).toEqual(expected);
  });

  it.each([
    // No single source to name.
    ['0.0.0.0', '127.0.0.1'],
    ['::', '::1'],
    // A loopback source cannot reach off the machine (only dialled with allowNonLoopback).
    ['127.77.1.2', '10.0.0.1'],
    ['127.77.1.2', 'example.com'],
    // Families differ: an IPv4 source cannot reach ::1, nor ::1 an IPv4 target.
    ['127.77.1.2', '::1'],
    ['::1', '127.0.0.1'],
    // Not a loopback listener (allowNonLoopback setups): leave the choice to the kernel.
    ['10.0.0.5', '127.0.0.1'],
  ])('listening on %s, a target %s leaves from the default source', (listen, target) => {
    expect(egressSource(listen, target)).toBeUndefined();
  });
});
