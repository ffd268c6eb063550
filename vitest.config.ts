import { defaultClientConditions, defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

// Workspace sources are imported as TypeScript through the "@onto/source" export condition,
// so tests never run against a stale build.
const source = '@onto/source';

export default defineConfig({
  resolve: { conditions: [source, ...defaultClientConditions] },
  ssr: { resolve: { conditions: [source, ...defaultServerConditions] } },
  test: {
    include: ['{packages,services,bench}/*/test/**/*.spec.ts', 'test/**/*.spec.ts'],
    globalSetup: ['packages/shared/src/testing/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: a few files at once keep the broker and the database busy without thrashing.
    maxWorkers: 3,
    pool: 'forks',
    reporters: ['default', './test/summary-reporter.ts'],
  },
});
