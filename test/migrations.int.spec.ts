import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate } from '@onto/shared';
import { createEmptyTestDatabase, type TestDatabase, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

describe('migrations', () => {
  const { postgresUrl } = testEndpoints();
  let db: TestDatabase;
  let dbUrl: string;
  let dir: string;

  beforeEach(async () => {
    db = await createEmptyTestDatabase(postgresUrl);
    dbUrl = db.url;
    dir = await mkdtemp(join(tmpdir(), 'onto-mig-'));
    await writeFile(join(dir, '001.do.accounts.sql'), 'CREATE TABLE accounts (id int PRIMARY KEY);');
    // Slow enough that the two runs below overlap.
    await writeFile(join(dir, '002.do.slow.sql'), 'SELECT pg_sleep(0.5); ALTER TABLE accounts ADD COLUMN name text;');
    await writeFile(join(dir, '003.do.index.sql'), 'CREATE INDEX accounts_name ON accounts (name);');
  });
  afterEach(async () => {
    await db.drop();
  });

  const rows = async (sql: string) => {
    const c = new pg.Client(dbUrl);
    await c.connect();
    try {
      return (await c.query(sql)).rows;
    } finally {
      await c.end();
    }
  };

  it('two concurrent runs apply each file once and neither fails', async () => {
    const track = { directory: dir, table: 'test_migrations' };
    const [a, b] = await Promise.all([migrate(dbUrl, [track]), migrate(dbUrl, [track])]);
    const appliedCounts = [a[0]?.applied.length, b[0]?.applied.length].sort();
    expect(appliedCounts).toEqual([0, 3]);
    expect(a[0]?.version).toBe(3);
    expect(b[0]?.version).toBe(3);
    expect(await rows('SELECT version FROM test_migrations WHERE version > 0 ORDER BY version')).toEqual([
      { version: 1 },
      { version: 2 },
      { version: 3 },
    ]);
    expect(
      await rows(`SELECT column_name FROM information_schema.columns WHERE table_name = 'accounts' ORDER BY 1`),
    ).toEqual([{ column_name: 'id' }, { column_name: 'name' }]);
  });

  it('a failing file leaves neither its changes nor its version row, and the earlier files stay', async () => {
    await writeFile(join(dir, '004.do.broken.sql'), 'CREATE TABLE half (id int); SELECT * FROM no_such_table;');
    const track = { directory: dir, table: 'test_migrations' };
    await expect(migrate(dbUrl, [track])).rejects.toThrow(/test_migrations.*no_such_table/);
    expect(await rows('SELECT max(version) AS v FROM test_migrations')).toEqual([{ v: 3 }]);
    expect(await rows(`SELECT to_regclass('half') IS NULL AS gone`)).toEqual([{ gone: true }]);
  });
});
