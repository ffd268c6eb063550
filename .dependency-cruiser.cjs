/**
 * The layering of the workspace, checked in `pnpm run lint` (docs/adr/0052). Each package's
 * folders are listed from the lowest to the highest: a folder imports only folders at or below
 * its own level. Routes are leaves (only the plugin or app that registers them imports them), no
 * module is on a cycle, and no package reaches into another one's sources. What broke these rules
 * when they were written is the known-violations baseline (.dependency-cruiser-known-violations.json):
 * lint fails on a new violation only; fixing a known one shrinks the baseline.
 */
const LAYERS = {
  'packages/shared/src': [
    'backoff.ts',
    'in-process.ts',
    'readiness.ts',
    'errors',
    'ids',
    'json',
    'db',
    'config',
    'kafka',
    'infrastructure-errors.ts',
    'ontology',
    'events',
    'redis',
    'outbox',
    'inbox',
    'jobs',
    'worlds',
    'messaging',
    'auth',
    'http',
    'kernel-migrations.ts',
    'testing',
    'bin',
    'index.ts',
  ],
  'services/control/src': [
    'config.ts',
    'schema',
    'worlds',
    'identity',
    'merges',
    'checker',
    'admin',
    'console',
    'app.ts',
    'server.ts',
  ],
  'services/data/src': [
    'config.ts',
    'ndjson.ts',
    'events.ts',
    'storage',
    'schema',
    'objects/model.ts',
    'http',
    'worlds/locks.ts',
    'worlds/protection.ts',
    'worlds/context.ts',
    'worlds/refs.ts',
    'objects',
    'links',
    'series',
    'worlds',
    'checker',
    'merges',
    'bulk',
    'cdc',
    'actions',
    'positions',
    'identity',
    'admin',
    'app.ts',
    'server.ts',
  ],
  'services/intelligence/src': [
    'config.ts',
    'cel',
    'definitions.ts',
    'http.ts',
    'readmodel',
    'derived',
    'rules',
    'decisions',
    'engine',
    'definition-routes.ts',
    'consistency.ts',
    'merges',
    'checker',
    'worlds',
    'actions',
    'positions',
    'schema',
    'identity',
    'admin',
    'app.ts',
    'server.ts',
  ],
};

const escapeRegExp = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const entry = (root, name) => `^${escapeRegExp(root)}/${escapeRegExp(name)}${name.endsWith('.ts') ? '$' : '/'}`;

const layerRules = Object.entries(LAYERS).flatMap(([root, layers]) =>
  layers.slice(0, -1).map((layer, i) => ({
    name: 'layer-order',
    comment: `${root}/${layer} imports only what lies at or below it (${root}: ${layers.join(' < ')})`,
    severity: 'error',
    from: { path: entry(root, layer) },
    // An entry may name a file inside a folder listed higher (worlds/refs.ts below worlds): it
    // stands at its own level, so what lies at or below the importer is never a violation.
    to: {
      path: layers.slice(i + 1).map((higher) => entry(root, higher)),
      pathNot: layers.slice(0, i + 1).map((lower) => entry(root, lower)),
    },
  })),
);

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'a module on a cycle cannot be understood, tested or moved alone',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'routes-are-leaves',
      comment: 'HTTP routes are registered by their plugin or the app; nothing else builds on them',
      severity: 'error',
      from: { pathNot: ['(^|/)(plugin|app|index)\\.ts$'] },
      to: { path: ['(^|/)routes/', '(^|[/-])routes\\.ts$'] },
    },
    {
      name: 'shared-knows-no-service',
      comment: 'packages/shared is the kernel every service builds on: it never imports one',
      severity: 'error',
      from: { path: '^packages/' },
      to: { path: '^services/' },
    },
    {
      name: 'services-apart',
      comment: 'services talk through Kafka only: none imports another service',
      severity: 'error',
      from: { path: '^services/([^/]+)/' },
      to: { path: '^services/', pathNot: '^services/$1/' },
    },
    ...layerRules,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|node_modules)/' },
    tsConfig: { fileName: 'tsconfig.base.json' },
    tsPreCompilationDeps: true,
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['@onto/source', 'import', 'types', 'default'],
    },
  },
};
