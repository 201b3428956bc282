import { describe, expect, it } from 'vitest';
import { imageEnvironment } from '../helpers/image-env.js';

describe("the image's environment, read from the Dockerfile", () => {
  it('takes only the final stage, in both ENV forms, over line continuations', () => {
    const dockerfile = [
      'FROM node AS build',
      'ENV BUILD_ONLY=1',
      'FROM node',
      'ENV A=1 B="two" \\',
      '    C=3',
      'ENV LEGACY some value',
      'USER 65532:65532',
    ].join('\n');
    expect(imageEnvironment(dockerfile)).toEqual({ A: '1', B: 'two', C: '3', LEGACY: 'some value' });
  });

  it('refuses an ENV pair it cannot read, naming it', () => {
    expect(() => imageEnvironment('FROM node\nENV A=1 =oops\n')).toThrow(/ENV "=oops"/);
  });

  it("the shipped image caps glibc's malloc arenas (the worker's memory figures depend on it)", () => {
    expect(imageEnvironment()).toMatchObject({ NODE_ENV: 'production', MALLOC_ARENA_MAX: '2' });
  });
});
