import { copyFile, mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate } from '@onto/shared';
import { createEmptyTestDatabase, type TestDatabase, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../src/app.js';

// Migration 007 (docs/adr/0017) on a database written in the old shape, where every version,
// the current one too, had a history row and heads had no actor.
describe('migration 007: heads hold the current version', () => {
  let db: TestDatabase;
  let url: string;

  beforeAll(async () => {
    db = await createEmptyTestDatabase(testEndpoints().postgresUrl);
    url = db.url;
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('keeps every version once: current ones in heads with their actor, superseded ones in history', async () => {
    // The data track as it was before 007, under its own bookkeeping table.
    const data = migrations.at(-1);
    if (!data) throw new Error('no data track');
    const before = await mkdtemp(join(tmpdir(), 'onto-mig7-'));
    for (const f of await readdir(data.directory)) {
      if (Number.parseInt(f, 10) < 7) await copyFile(join(data.directory, f), join(before, f));
    }
    await migrate(url, [...migrations.slice(0, -1), { ...data, directory: before }]);

    const db = new pg.Client(url);
    await db.connect();
    try {
      // a: versions 1 and 2 (current); b: version 1 (current); c: 1, then a tombstone 2.
      await db.query(`
        INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version) VALUES
          ('w', 'T', 'a', 2, 12, false, '{"n":2}', 1),
          ('w', 'T', 'b', 1, 13, false, '{"n":1}', 1),
          ('w', 'T', 'c', 2, 15, true, NULL, 1);
        INSERT INTO object_history (world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id) VALUES
          ('w', 'T', 'a', 11, 1, false, '{"n":1}', 1, 'ann', 'r1'),
          ('w', 'T', 'a', 12, 2, false, '{"n":2}', 1, 'bob', 'r2'),
          ('w', 'T', 'b', 13, 1, false, '{"n":1}', 1, 'ann', 'r3'),
          ('w', 'T', 'c', 14, 1, false, '{"n":1}', 1, 'ann', 'r4'),
          ('w', 'T', 'c', 15, 2, true, NULL, 1, 'cy', 'r5');
      `);
      // Every version, as each shape keeps them: all in history before, history and heads after.
      const versions = (from: string) =>
        `SELECT pk, version::int, deleted, properties, actor, request_id FROM ${from} ORDER BY pk, version`;
      const all = (await db.query(versions('object_history'))).rows;
      expect(all).toHaveLength(5);

      const results = await migrate(url, migrations);
      // 007 first, then 008 (worlds as branches); later migrations (009, time series) follow them.
      expect(
        results
          .at(-1)
          ?.applied.map((f) => f.split('/').pop())
          .slice(0, 2),
      ).toEqual(['007.do.heads-hold-current-versions.sql', '008.do.worlds-as-branches.sql']);

      expect((await db.query(versions('object_versions'))).rows).toEqual(all);
      // 008 (docs/adr/0023) gives each superseded version the seq of the write that superseded it.
      expect(
        (await db.query('SELECT pk, version::int, superseded_seq::int FROM object_history ORDER BY pk, version')).rows,
      ).toEqual([
        { pk: 'a', version: 1, superseded_seq: 12 },
        { pk: 'c', version: 1, superseded_seq: 15 },
      ]);
      expect((await db.query('SELECT pk, actor, request_id FROM object_heads ORDER BY pk')).rows).toEqual([
        { pk: 'a', actor: 'bob', request_id: 'r2' },
        { pk: 'b', actor: 'ann', request_id: 'r3' },
        { pk: 'c', actor: 'cy', request_id: 'r5' },
      ]);
    } finally {
      await db.end();
    }
  });
});
