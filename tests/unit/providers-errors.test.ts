import { describe, expect, it } from 'vitest';
import { classOf, isProviderError, providerError, ProviderError, safeCause } from '../../providers/errors.js';
import { ERROR_CLASSES } from '../../providers/types.js';

describe('classOf', () => {
  it.each(ERROR_CLASSES)('keeps the class %s of a ProviderError', (cls) => {
    const e = providerError({
      errorClass: cls,
      operation: 'get',
      provider: 'p',
      instance: 'i',
      message: 'm',
    });
    expect(classOf(e)).toBe(cls);
    expect(isProviderError(e)).toBe(true);
  });

  it('reads the class of a ProviderError that crossed a serialisation boundary', () => {
    const e = providerError({
      errorClass: 'QuotaExceeded',
      operation: 'create',
      provider: 'p',
      instance: 'i',
      message: 'm',
    });
    expect(classOf(JSON.parse(JSON.stringify(e.toJSON())))).toBe('QuotaExceeded');
    expect(classOf({ name: 'ProviderError', errorClass: 'Bogus' })).toBe('Transient');
  });

  it.each([
    ['a plain Error', new Error('boom')],
    ['a system error', Object.assign(new Error('x'), { code: 'ECONNRESET' })],
    ['a string', 'nope'],
    ['undefined', undefined],
    ['null', null],
    ['an object with an errorClass but another name', { errorClass: 'Permanent' }],
  ])('unclassified (%s) is Transient', (_what, value) => {
    expect(classOf(value)).toBe('Transient');
  });
});

describe('ProviderError', () => {
  it('carries class, operation, configured provider name and instance, in fields and message', () => {
    const e = new ProviderError({
      errorClass: 'Permanent',
      operation: 'delete',
      provider: 'kvm-home',
      instance: 'local/proxy-x',
      message: 'bad',
    });
    expect(e).toMatchObject({
      errorClass: 'Permanent',
      operation: 'delete',
      provider: 'kvm-home',
      instance: 'local/proxy-x',
    });
    expect(e.message).toBe('kvm-home: delete local/proxy-x: bad (Permanent)');
    expect(e).toBeInstanceOf(Error);
  });

  it('keeps only machine-readable fields of a cause, never its message', () => {
    const secret = 'password=hunter2 #cloud-config';
    const cause = Object.assign(new Error(secret), {
      code: 'EADDRINUSE',
      errno: -98,
      syscall: 'listen',
      status: 409,
      body: secret,
    });
    const e = providerError({
      errorClass: 'Transient',
      operation: 'create',
      provider: 'p',
      instance: 'n',
      message: 'listen failed',
      cause,
    });
    expect(e.cause).toEqual({
      name: 'Error',
      code: 'EADDRINUSE',
      errno: -98,
      syscall: 'listen',
      status: 409,
    });
    expect(e.message).toBe('p: create n: listen failed [EADDRINUSE] (Transient)');
    for (const text of [e.message, String(e), e.stack ?? '', JSON.stringify(e), JSON.stringify(e.toJSON())]) {
      expect(text).not.toContain('hunter2');
    }
  });

  it('drops free text smuggled into code-like fields', () => {
    expect(safeCause({ name: 'Error with spaces', code: 'token abc123 leaked', syscall: 'a b' })).toEqual({
      name: 'Error',
    });
    expect(safeCause('a string with a secret')).toEqual({ name: 'string' });
    expect(safeCause({ code: 404 })).toEqual({ name: 'Error', code: '404' });
  });
});
