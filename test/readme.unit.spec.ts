import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The README is for users (issue 28): what onto is, the two commands, a tour of the API, links
// out. Operations, benchmarks' history, design and every route's details live in the documents
// it links to, and every one of those links leads somewhere.
const root = fileURLToPath(new URL('..', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');

describe('the README', () => {
  it('stays short enough to be read: at most 350 lines', () => {
    expect(readme.trimEnd().split('\n').length).toBeLessThanOrEqual(350);
  });

  it('starts with the two commands a newcomer types', () => {
    expect(readme.split('\n').slice(0, 8).join('\n')).toMatch(/```sh\n\.\/onto up\b.*\n\.\/onto test\b/);
  });

  it('links only to files that exist', () => {
    const targets = [...readme.matchAll(/\]\((?!https?:|#)([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1] as string);
    expect(targets.length).toBeGreaterThan(10);
    const missing = targets.filter((t) => !existsSync(resolve(dirname(join(root, 'README.md')), t)));
    expect(missing).toEqual([]);
  });
});
