/**
 * `onto-admin codegen` on a large schema: 200 object types of 20 properties each (every property
 * type, series included), 100 link types, 50 action types and 200 derived properties, generated
 * and then compiled with tsc --strict. Prints the milliseconds of each; fails when generation
 * takes 2 s or more.
 *
 *   node --conditions=@onto/source --import tsx bench/codegen.ts
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CodegenSchema, generateWorldModule } from '../packages/admin/src/codegen.js';

const TYPES = 200;
const PROPERTY_TYPES = [
  'string',
  'integer',
  'double',
  'boolean',
  'timestamp',
  'date',
  'geopoint',
  { type: 'enum', values: ['a', 'b', 'c'] },
  { type: 'array', items: 'string' },
  { type: 'struct', fields: { sku: 'string', qty: 'integer', tags: { type: 'array', items: 'string' } } },
] as const;

const schema: CodegenSchema = { version: 1234, objectTypes: {}, linkTypes: {}, actionTypes: {} };
for (let t = 0; t < TYPES; t++) {
  const properties: CodegenSchema['objectTypes'][string]['properties'] = { id: { type: 'string', required: true } };
  for (let p = 0; p < 18; p++) {
    properties[`p${p}`] = { type: PROPERTY_TYPES[p % PROPERTY_TYPES.length] as never, required: p % 3 === 0 };
  }
  properties.reading = { type: { type: 'series', value: 'double' } };
  schema.objectTypes[`Type${t}`] = { primaryKey: 'id', displayName: `Type ${t}`, properties };
}
for (let l = 0; l < 100; l++) schema.linkTypes[`link${l}`] = { from: `Type${l}`, to: `Type${l + 1}` };
for (let a = 0; a < 50; a++) {
  schema.actionTypes[`action${a}`] = {
    parameters: {
      target: { type: 'string', required: true },
      amount: { type: 'integer' },
      kind: { type: { type: 'enum', values: ['x', 'y'] } },
    },
  };
}
const derived = Array.from({ length: TYPES }, (_, i) => ({
  name: `score${i}`,
  objectType: `Type${i}`,
  expression: 'self.p1 * 2',
}));

const started = performance.now();
const client = fileURLToPath(new URL('../packages/client/src/index.js', import.meta.url));
const source = generateWorldModule({ world: 'big', schema, derived, clientImport: client });
const generateMs = performance.now() - started;

const dir = mkdtempSync(join(tmpdir(), 'onto-codegen-'));
writeFileSync(join(dir, 'big.ts'), source);
writeFileSync(
  join(dir, 'tsconfig.json'),
  JSON.stringify({
    compilerOptions: {
      strict: true,
      noEmit: true,
      target: 'ES2023',
      lib: ['ES2023'],
      types: [],
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      skipLibCheck: true,
    },
    files: ['big.ts'],
  }),
);
writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
const compiling = performance.now();
execFileSync(
  process.execPath,
  [fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url)), '-p', dir],
  {
    stdio: 'inherit',
  },
);
const compileMs = performance.now() - compiling;
console.log(
  `codegen: ${TYPES} object types, ${source.length} characters generated in ${generateMs.toFixed(0)} ms; tsc --strict ${compileMs.toFixed(0)} ms`,
);
if (generateMs >= 2000) {
  console.error('codegen took 2 s or more');
  process.exit(1);
}
