// Bundles the compiled workflows into dist/workflow-bundle.js after `tsc`
// (npm run build; the Dockerfile's build stage). A worker started from dist/
// loads this file instead of running webpack at every start: webpack's
// compilation costs the worker ~1 s of CPU and leaves its heap and malloc
// arenas tens of MiB larger for the life of the process.
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';

const workflowsPath = resolve('dist/workflows/index.js');
const quiet = { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} };
const { code } = await bundleWorkflowCode({ workflowsPath, logger: quiet });
writeFileSync('dist/workflow-bundle.js', code);
console.log(`dist/workflow-bundle.js: ${(code.length / 1024).toFixed(0)} KiB from ${workflowsPath}`);
