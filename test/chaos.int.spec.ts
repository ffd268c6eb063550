import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('..', import.meta.url));
/** About 2 minutes on a machine of its own; the rest is room for a busy one. */
const TIMEOUT_MS = 300_000;

/**
 * The chaos run's short version (issue 18, ADR 41): bench/chaos.ts as `./onto chaos` runs it,
 * for ONTO_TEST_CHAOS_MINUTES (0.6 by default: 36 s of workload, faults for the first 29). Its
 * broker, Redis and databases are its own, so its faults touch no other spec file; PostgreSQL's
 * fault is the termination of its own connections, since the server is shared with the suite.
 */
describe('chaos run', () => {
  it(
    'keeps every acknowledged write, loses nothing and applies nothing twice under faults',
    async () => {
      const minutes = process.env.ONTO_TEST_CHAOS_MINUTES ?? '0.6';
      const dir = await mkdtemp(join(tmpdir(), 'onto-chaos-spec-'));
      const json = join(dir, 'table.json');
      try {
        const child = spawn(
          process.execPath,
          ['--conditions=@onto/source', '--import', 'tsx', 'bench/chaos.ts', minutes, '--json', json],
          { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let output = '';
        child.stdout.on('data', (d) => (output += d));
        child.stderr.on('data', (d) => (output += d));
        // stopped before the test's own timeout, so that it cleans up what it started (broker, services)
        const stop = setTimeout(() => child.kill('SIGTERM'), TIMEOUT_MS - 20_000);
        const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
        clearTimeout(stop);
        expect(code, output).toBe(0);
        const table = JSON.parse(await readFile(json, 'utf8'));
        expect(table.violations, output).toBe(0);
        expect(table.counts.lost).toBe(0);
        expect(table.counts['applied twice']).toBe(0);
        expect(table.counts['writes acknowledged']).toBeGreaterThan(0);
        for (const row of table.rows) expect(row.violations, `${row.check}: ${row.detail}`).toBe(0);
        // the faults happened: a kill, a broker outage and the database's connections cut at least
        expect(table.faults.sigkill).toBeGreaterThan(0);
        expect(table.faults.broker).toBeGreaterThan(0);
        expect(table.faults.postgres).toBeGreaterThan(0);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    TIMEOUT_MS,
  );
});
