/**
 * The published event contract (docs/adr/0020), from the topic catalogue and the event schemas:
 *   pnpm run events docs    writes docs/asyncapi.json
 *   pnpm run events check   compares the schemas with the previous release's (docs/events/schemas.lock.json); exit 1 on a breaking change
 *   pnpm run events lock    makes the current schemas the previous release's (at a release only)
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { asyncApiDocument, compatibilityReport, currentSchemaLock, type SchemaLock } from '@onto/shared';

const root = fileURLToPath(new URL('..', import.meta.url));
export const ASYNCAPI_FILE = `${root}docs/asyncapi.json`;
export const LOCK_FILE = `${root}docs/events/schemas.lock.json`;

/** Writes JSON as the repository's formatter would, so that lint passes on it. */
function writeJson(file: string, value: unknown) {
  writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
  execFileSync('pnpm', ['exec', 'biome', 'format', '--write', file], { cwd: root, stdio: 'ignore' });
}

const command = process.argv[2];
if (command === 'docs') {
  writeJson(ASYNCAPI_FILE, asyncApiDocument());
  console.log(`wrote ${ASYNCAPI_FILE}`);
} else if (command === 'lock') {
  writeJson(LOCK_FILE, currentSchemaLock());
  console.log(`wrote ${LOCK_FILE}`);
} else if (command === 'check') {
  const previous = JSON.parse(readFileSync(process.argv[3] ?? LOCK_FILE, 'utf8')) as SchemaLock;
  const report = compatibilityReport(previous, currentSchemaLock());
  console.log(report.text);
  process.exitCode = report.ok ? 0 : 1;
} else {
  console.error('usage: events docs | check [lock file] | lock');
  process.exitCode = 2;
}
