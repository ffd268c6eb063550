import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { type MigrationTrack, migrate } from '../db/migrate.js';
import { eventually } from './eventually.js';

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function fingerprint(tracks: MigrationTrack[]): Promise<string> {
  const hash = createHash('sha256');
  for (const track of tracks) {
    hash.update(track.table);
    for (const file of (await readdir(track.directory)).sort()) {
      hash.update(file).update(await readFile(join(track.directory, file)));
    }
  }
  return hash.digest('hex').slice(0, 16);
}

async function admin<T>(serverUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: serverUrl, application_name: 'onto-test-harness' });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/**
 * A database of its own for one test file, created from a template that has the migrations
 * applied. The template is built once per distinct set of migration files (its name carries
 * their hash), so a changed migration gets a new template and copies cost milliseconds.
 */
export async function createTestDatabase(serverUrl: string, tracks: MigrationTrack[]): Promise<TestDatabase> {
  const template = `onto_tpl_${await fingerprint(tracks)}`;
  await admin(serverUrl, async (client) => {
    await client.query('SELECT pg_advisory_lock(hashtext($1))', [template]);
    try {
      const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [template]);
      if (rowCount === 0) {
        const building = `${template}_build`;
        await client.query(`DROP DATABASE IF EXISTS ${building}`);
        await client.query(`CREATE DATABASE ${building}`);
        await migrate(withDatabase(serverUrl, building), tracks);
        await client.query(`ALTER DATABASE ${building} RENAME TO ${template}`);
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtext($1))', [template]);
    }
  });
  const name = `onto_t_${randomBytes(6).toString('hex')}`;
  await admin(serverUrl, (client) => client.query(`CREATE DATABASE ${name} TEMPLATE ${template} STRATEGY FILE_COPY`));
  return ownDatabase(serverUrl, name);
}

/** An empty database of its own, for tests that migrate from nothing; `drop` removes it. */
export async function createEmptyTestDatabase(serverUrl: string): Promise<TestDatabase> {
  const name = `onto_t_${randomBytes(6).toString('hex')}`;
  await admin(serverUrl, (client) => client.query(`CREATE DATABASE ${name}`));
  return ownDatabase(serverUrl, name);
}

export interface TestDatabase {
  name: string;
  url: string;
  drop: () => Promise<void>;
}

function ownDatabase(serverUrl: string, name: string): TestDatabase {
  return {
    name,
    url: withDatabase(serverUrl, name),
    // FORCE ends the connections left open; those still closing (a pool's end() answers before
    // its sockets close) are waited for a little first: a connection terminated while it closes
    // emits an error, on a pool that no test listens to any more (a CI run failed on one).
    drop: () =>
      admin(serverUrl, async (client) => {
        await eventually(
          `the connections to ${name} closed`,
          async () => !(await client.query('SELECT 1 FROM pg_stat_activity WHERE datname = $1', [name])).rowCount,
          { timeoutMs: 2000, intervalMs: 20 },
        ).catch(() => {}); // those still open after that are ended by FORCE
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      }).then(() => {}),
  };
}
