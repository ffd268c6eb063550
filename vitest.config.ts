import { defaultClientConditions, defaultServerConditions } from 'vite';
import { configDefaults, defineConfig } from 'vitest/config';

// Workspace sources are imported as TypeScript through the "@onto/source" export condition,
// so tests never run against a stale build.
const source = '@onto/source';

const folders = ['{packages,services,bench}/*/test/**', 'test/**'];
const unitSpecs = folders.map((folder) => `${folder}/*.unit.spec.ts`);
// Specs that load the whole machine (six service processes and a broker of their own): run
// alone, after the others, so that they neither starve nor are starved by the time-bound specs.
const aloneSpecs = [
  // Measures the CPU one evaluation holds the event loop (< 50 ms): contention inflates it.
  'services/intelligence/test/bounded-evaluation.int.spec.ts',
  // The short chaos run (issue 18): two instances of each service and a broker of its own.
  'test/chaos.int.spec.ts',
];

// Specs of several minutes each (issue 33: three brokers of their own, services started while
// everything they need is away): outside the default run (`./onto test` and CI run unit, int and
// alone); `./onto test --project slow` or `pnpm exec vitest run --project slow` runs them.
const slowSpecs = ['packages/shared/test/kafka-cluster.int.spec.ts', 'test/startup-resilience.int.spec.ts'];

export default defineConfig({
  resolve: { conditions: [source, ...defaultClientConditions] },
  ssr: { resolve: { conditions: [source, ...defaultServerConditions] } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: a few files at once keep the broker and the database busy without thrashing.
    maxWorkers: 3,
    pool: 'forks',
    reporters: ['default', './test/summary-reporter.ts'],
    // Tiers by suffix: `pnpm test:unit` runs `unit` alone, `vitest run` all; `./onto test` runs
    // `unit` and `int` together, then `alone`.
    projects: [
      // Needs nothing running: no endpoints, no containers.
      { extends: true, test: { name: 'unit', include: unitSpecs } },
      // Needs PostgreSQL, Redis and Kafka. Every other spec lands here, so none is left out.
      {
        extends: true,
        test: {
          name: 'int',
          include: folders.map((folder) => `${folder}/*.spec.ts`),
          exclude: [...configDefaults.exclude, ...unitSpecs, ...aloneSpecs, ...slowSpecs],
          globalSetup: ['packages/shared/src/testing/global-setup.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'alone',
          include: aloneSpecs,
          fileParallelism: false,
          globalSetup: ['packages/shared/src/testing/global-setup.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'slow',
          include: slowSpecs,
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
          globalSetup: ['packages/shared/src/testing/global-setup.ts'],
        },
      },
    ],
  },
});
