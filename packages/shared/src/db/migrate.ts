import { readdir } from 'node:fs/promises';
import pg from 'pg';
import Postgrator from 'postgrator';

export interface MigrationTrack {
  /** Folder of forward-only `NNN.do.name.sql` files. */
  directory: string;
  /** Table recording which of this track's files ran; each track keeps its own. */
  table: string;
}

export interface MigrationResult {
  table: string;
  applied: string[];
  version: number;
}

// One lock for every migrating process of one database: the second process waits, then
// finds nothing left to do.
const MIGRATION_LOCK = 'onto.migrations';

/**
 * Applies every pending migration of each track, in order, each file in its own transaction
 * together with its bookkeeping row, under a session advisory lock so that two instances
 * starting at the same moment apply each file once and neither fails.
 */
export async function migrate(connectionString: string, tracks: MigrationTrack[]): Promise<MigrationResult[]> {
  // Bounded, so that an unreachable server fails the boot (which then retries) within Fastify's plugin timeout.
  const client = new pg.Client({ connectionString, application_name: 'onto-migrate', connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1))', [MIGRATION_LOCK]);
    const results: MigrationResult[] = [];
    for (const track of tracks) results.push(await migrateTrack(client, track));
    return results;
  } finally {
    await client.query('SELECT pg_advisory_unlock(hashtext($1))', [MIGRATION_LOCK]).catch(() => {});
    await client.end();
  }
}

async function migrateTrack(client: pg.Client, track: MigrationTrack): Promise<MigrationResult> {
  const postgrator = new Postgrator({
    migrationPattern: `${track.directory}/*.sql`,
    driver: 'pg',
    schemaTable: track.table,
    validateChecksums: true,
    execQuery: (query: string) => client.query(query),
    // Open the transaction with the script; it is committed once postgrator has written its
    // version row (migration-finished), so that the file and its bookkeeping land together.
    execSqlScript: async (script: string) => {
      await client.query('BEGIN');
      await client.query(script);
    },
  });
  postgrator.on('migration-finished', () => {
    // pg queues queries per client in order, so COMMIT runs before the next file's BEGIN.
    void client.query('COMMIT');
  });
  try {
    const applied = await postgrator.migrate();
    await client.query('SELECT 1'); // drain the queued COMMIT before reporting success
    return {
      table: track.table,
      applied: applied.map((m) => m.filename),
      version: await postgrator.getDatabaseVersion(),
    };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw new Error(`migration of ${track.table} from ${track.directory} failed: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** The highest migration version shipped in a folder; /ready compares it with the database. */
export async function latestShippedVersion(directory: string): Promise<number> {
  const files = await readdir(directory);
  return files.reduce((max, f) => Math.max(max, Number.parseInt(f.split('.')[0] ?? '0', 10) || 0), 0);
}

export async function appliedVersion(client: pg.Pool | pg.Client, table: string): Promise<number> {
  const exists = await client.query<{ ok: boolean }>('SELECT to_regclass($1) IS NOT NULL AS ok', [table]);
  if (!exists.rows[0]?.ok) return 0;
  const { rows } = await client.query<{ v: string | null }>(
    `SELECT max(version)::text AS v FROM ${pg.escapeIdentifier(table)}`,
  );
  return Number(rows[0]?.v ?? 0);
}
