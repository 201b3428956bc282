#!/usr/bin/env node
// Runs the compiled CLI (npm run build), or the TypeScript sources through
// tsx in a development checkout.
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/cli/entry.js', import.meta.url);
if (existsSync(compiled)) {
  await import(compiled.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(new URL('../cli/entry.ts', import.meta.url).href);
}
