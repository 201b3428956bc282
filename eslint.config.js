// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

// Workflow code runs in Temporal's deterministic sandbox: no Node built-ins
// (the SDK allows only assert, url and util, and we use none of them), and no
// server-side package that does I/O. Anything here would fail at bundle time
// at best, or break replay determinism at worst.
const forbiddenInWorkflows = [
  ...builtinModules.flatMap((m) => [m, `node:${m}`]),
  '@temporalio/activity',
  '@temporalio/client',
  '@temporalio/worker',
  '@temporalio/testing',
  '@kubernetes/client-node',
  'hono',
  '@hono/*',
  'pino',
  'prom-client',
  'yaml',
  'commander',
];

// The production build compiles every file production code imports, `import
// type` included: local-servers/ (dev's and the tests' servers) must stay out
// of it and the image, so no production folder may name it.
const noLocalServers = {
  group: ['**/local-servers', '**/local-servers/**'],
  message:
    'production code does not import local-servers/ (not in the build); `dev` loads it lazily (cli/dev.ts)',
};

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', 'bin/**', '.tmp/**', 'infra/scripts/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // A timeout signal inside AbortSignal.any() can be garbage-collected, and then never fires
      // (nodejs/node#57736): a call "bounded" that way hangs with its backend.
      'no-restricted-syntax': [
        'error',
        {
          selector:
            "CallExpression[callee.object.name='AbortSignal'][callee.property.name='any'] CallExpression[callee.object.name='AbortSignal'][callee.property.name='timeout']",
          message:
            'AbortSignal.timeout() inside AbortSignal.any() may never fire; use timeoutSignal() (providers/timeout-signal.ts)',
        },
      ],
    },
  },
  {
    files: ['workflows/**/*.ts'],
    ignores: ['workflows/**/*.test.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: forbiddenInWorkflows
            .filter((p) => !p.includes('*'))
            .map((name) => ({ name, message: 'not allowed in the workflow sandbox' })),
          patterns: [
            {
              group: forbiddenInWorkflows.filter((p) => p.includes('*')),
              message: 'not allowed in the workflow sandbox',
            },
            {
              group: ['**/activities/*'],
              allowTypeImports: true,
              message: 'workflows import activities with `import type` only',
            },
            noLocalServers,
          ],
        },
      ],
    },
  },
  {
    // The Proxy workflow's pure modules: no SDK either, so unit tests and the
    // activities (which build a status by the same rules) can import them.
    files: [
      'workflows/proxy/transitions.ts',
      'workflows/proxy/steps.ts',
      'workflows/proxy/scheduling.ts',
      'workflows/proxy/status.ts',
    ],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [...forbiddenInWorkflows.filter((p) => !p.includes('*')), '@temporalio/workflow'].map(
            (name) => ({ name, message: 'not allowed in a pure workflow module' }),
          ),
          patterns: [
            {
              group: [...forbiddenInWorkflows.filter((p) => p.includes('*')), '**/activities/*'],
              allowTypeImports: true,
              message: 'not allowed in a pure workflow module',
            },
            noLocalServers,
          ],
        },
      ],
    },
  },
  {
    files: [
      'activities/**/*.ts',
      'api/**/*.ts',
      'cli/**/*.ts',
      'forwarding/**/*.ts',
      'tenants/**/*.ts',
      'credentials/**/*.ts',
      'gateway/**/*.ts',
      'k8s-bridge/**/*.ts',
      'kube/**/*.ts',
      'prober/**/*.ts',
      'providers/**/*.ts',
      'resources/**/*.ts',
      'tracing/**/*.ts',
    ],
    ignores: ['**/*.test.ts'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [noLocalServers] }] },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
