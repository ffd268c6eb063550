import { copyFile, mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MigrationTrack, migrate } from '@onto/shared';
import { createEmptyTestDatabase, type TestDatabase, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

// docs/adr/0074: the migrations that lead world tables' keys with world_id (data 022–024,
// intelligence 024) run over databases that already hold rows: every row is kept, the ones that
// gain a world_id get their parent's (series points from their series, merge items and conflicts
// from their merge's target), audit entries of no world move to audit_log_global, and the
// statements the services run against the new keys work.

const tracks = (name: string): MigrationTrack[] => {
  const s = SERVICES.find((x) => x.name === name);
  if (!s) throw new Error(`no service ${name}`);
  return [...s.migrations];
};

/** Migrates `db` with the service's track cut before `first` (its own files only). */
async function migrateBefore(url: string, all: MigrationTrack[], first: number) {
  const own = all.at(-1) as MigrationTrack;
  const before = await mkdtemp(join(tmpdir(), 'onto-world-keys-'));
  for (const f of await readdir(own.directory)) {
    if (Number.parseInt(f, 10) < first) await copyFile(join(own.directory, f), join(before, f));
  }
  return migrate(url, [...all.slice(0, -1), { ...own, directory: before }]);
}

async function withClient<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client(url);
  await c.connect();
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

describe('world keys: the migrations over existing rows', () => {
  const dbs: TestDatabase[] = [];
  afterAll(async () => {
    for (const db of dbs) await db.drop();
  });

  it('data 022–024: keeps every row, fills world_id from the parent, and the new keys hold', async () => {
    const db = await createEmptyTestDatabase(testEndpoints().postgresUrl);
    dbs.push(db);
    const all = tracks('data');
    await migrateBefore(db.url, all, 22);
    await withClient(db.url, async (c) => {
      await c.query(`
        INSERT INTO audit_log (actor, action, world_id, subject) VALUES
          ('ann', 'webhook.created', 'w', 'hook'), ('op', 'admin.outbox.redriven', NULL, NULL);
        INSERT INTO cdc_positions (source, world_id, type, pk, position, topic, partition, "offset")
          VALUES ('pg', 'w', 'T', 'a', 10, 't', 0, 5);
        INSERT INTO webhooks (world_id, name, url, events, secret) VALUES ('w', 'hook', 'http://x', '{object.changed}', 's');
        INSERT INTO webhook_deliveries (world_id, webhook, event_id, event_type, ordering_key, body)
          VALUES ('w', 'hook', '00000000-0000-4000-8000-000000000001', 'object.changed', 'k', '{}');
        INSERT INTO webhook_attempts (delivery_id, world_id, webhook, attempt, latency_ms)
          SELECT id, 'w', 'hook', 1, 3 FROM webhook_deliveries;
        INSERT INTO series_keys (world_id, type, pk, series) VALUES ('w', 'T', 'a', 's'), ('v', 'T', 'a', 's');
        INSERT INTO series_points (series_id, time, seq, num)
          SELECT k.id, now() - interval '1 minute', 7, 1.5 FROM series_keys k;
        INSERT INTO series_point_history (series_id, time, seq, superseded_seq, num)
          SELECT k.id, now() - interval '2 minutes', 5, 6, 0.5 FROM series_keys k WHERE k.world_id = 'v';
        INSERT INTO merges (id, target, source, strategy, dry_run, actor, source_seq, target_seq, status, schema)
          VALUES ('00000000-0000-7000-8000-000000000001', 'tgt', 'src', 'SOURCE_WINS', false, 'ann', 1, 1, 'planned', '{}');
        INSERT INTO merge_items (merge_id, n, kind, type, pk) VALUES ('00000000-0000-7000-8000-000000000001', 0, 'object', 'T', 'a');
        INSERT INTO merge_conflicts (merge_id, id, item, type, body)
          VALUES ('00000000-0000-7000-8000-000000000001', 'd-1', 0, 'MODIFY_MODIFY', '{}');
      `);
    });

    // Up to 024: the migrations under test, not the later ones.
    const results = await migrateBefore(db.url, all, 25);
    expect(results.at(-1)?.applied.map((f) => f.split('/').pop())).toEqual([
      '022.do.world-keys.sql',
      '023.do.merge-keys.sql',
      '024.do.series-keys.sql',
    ]);

    await withClient(db.url, async (c) => {
      const q = async (sql: string, params: unknown[] = []) => (await c.query(sql, params)).rows;
      // audit: the world's entry stays, the world-less one moved; a new world-less one is routed there too.
      expect(await q('SELECT world_id, action FROM audit_log')).toEqual([{ world_id: 'w', action: 'webhook.created' }]);
      await c.query(`INSERT INTO audit_log (actor, action, world_id) VALUES ('op', 'admin.outbox.dropped', NULL)`);
      expect(await q('SELECT actor, action FROM audit_log_global ORDER BY id')).toEqual([
        { actor: 'op', action: 'admin.outbox.redriven' },
        { actor: 'op', action: 'admin.outbox.dropped' },
      ]);
      expect(await q('SELECT count(*)::int AS n FROM audit_log')).toEqual([{ n: 1 }]);

      // cdc: the consumer's upsert on the reordered key.
      const cdc = `INSERT INTO cdc_positions AS p (source, world_id, type, pk, position, topic, partition, "offset")
                   VALUES ('pg', 'w', 'T', 'a', $1, 't', 0, 6)
                   ON CONFLICT (world_id, source, type, pk) DO UPDATE SET position = excluded.position
                    WHERE p.position < excluded.position`;
      expect((await c.query(cdc, [9])).rowCount).toBe(0);
      expect((await c.query(cdc, [11])).rowCount).toBe(1);

      // webhooks: the attempt follows its delivery by (world_id, id).
      expect(
        await q(
          'SELECT count(*)::int AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.world_id = a.world_id AND d.id = a.delivery_id',
        ),
      ).toEqual([{ n: 1 }]);
      await c.query(`DELETE FROM webhook_deliveries WHERE world_id = 'w'`);
      expect(await q('SELECT count(*)::int AS n FROM webhook_attempts')).toEqual([{ n: 0 }]);
      await expect(
        c.query(
          `INSERT INTO webhook_attempts (delivery_id, world_id, webhook, attempt, latency_ms) VALUES (1, 'v', 'hook', 1, 1)`,
        ),
      ).rejects.toThrow(/foreign key/);

      // series: each point took its series' world; an overwrite keeps the former value with it.
      expect(
        await q(
          `SELECT k.world_id AS series_world, p.world_id FROM series_points p JOIN series_keys k ON k.id = p.series_id ORDER BY 1`,
        ),
      ).toEqual([
        { series_world: 'v', world_id: 'v' },
        { series_world: 'w', world_id: 'w' },
      ]);
      expect(await q('SELECT world_id, seq::int FROM series_point_history')).toEqual([{ world_id: 'v', seq: 5 }]);
      const up = await c.query(
        `INSERT INTO series_points AS p (world_id, series_id, time, seq, num)
         SELECT world_id, series_id, time, 8, 2.5 FROM series_points WHERE world_id = 'w'
         ON CONFLICT (world_id, series_id, time) DO UPDATE SET seq = excluded.seq, num = excluded.num`,
      );
      expect(up.rowCount).toBe(1);
      expect(
        await q('SELECT world_id, seq::int, superseded_seq::int, num FROM series_point_history ORDER BY world_id'),
      ).toEqual([
        { world_id: 'v', seq: 5, superseded_seq: 6, num: 0.5 },
        { world_id: 'w', seq: 7, superseded_seq: 8, num: 1.5 },
      ]);

      // merges: the merge, its items and conflicts belong to the target; dropping it takes them.
      expect(await q('SELECT world_id FROM merges')).toEqual([{ world_id: 'tgt' }]);
      expect(await q('SELECT world_id FROM merge_items')).toEqual([{ world_id: 'tgt' }]);
      expect(await q('SELECT world_id FROM merge_conflicts')).toEqual([{ world_id: 'tgt' }]);
      await expect(
        c.query(`INSERT INTO merge_items (world_id, merge_id, n, kind, type, pk)
                 VALUES ('src', '00000000-0000-7000-8000-000000000001', 1, 'object', 'T', 'b')`),
      ).rejects.toThrow(/foreign key/);
      await c.query(`DELETE FROM merges WHERE world_id = 'tgt'`);
      expect(
        await q(
          'SELECT (SELECT count(*) FROM merge_items)::int AS i, (SELECT count(*) FROM merge_conflicts)::int AS c',
        ),
      ).toEqual([{ i: 0, c: 0 }]);
    });
  }, 120_000);

  it('intelligence 024: keeps every row, definition merges take their target, the keys hold', async () => {
    const db = await createEmptyTestDatabase(testEndpoints().postgresUrl);
    dbs.push(db);
    const all = tracks('intelligence');
    await migrateBefore(db.url, all, 24);
    const alert = '00000000-0000-7000-8000-0000000000a1';
    await withClient(db.url, async (c) => {
      await c.query(
        `
        INSERT INTO audit_log (actor, action, world_id, subject) VALUES
          ('ann', 'admin.derived.recomputed', 'w', 'd'), ('op', 'admin.outbox.redriven', NULL, NULL);
        INSERT INTO alerts (id, world_id, rule, rule_version, alert_type, severity, object_type, pk, status,
                            raised_object_version, raised_seq)
          VALUES ($1, 'w', 'r', 1, 'late', 'high', 'T', 'a', 'OPEN', 1, 1);
        INSERT INTO decisions (id, world_id, definition, definition_version, alert_id, rule, alert_type, object_type, pk,
                               action_type, approval, status, version, seq)
          VALUES ('00000000-0000-7000-8000-0000000000d1', 'w', 'dd', 1, $1, 'r', 'late', 'T', 'a', 'act', 'manual',
                  'PENDING_APPROVAL', 1, 2);
        INSERT INTO recompute_jobs (world_id, kind, name, definition_version, object_type, due_at)
          VALUES ('w', 'derived', 'd', 1, 'T', now());
        INSERT INTO derived_values_history (world_id, object_type, pk, name, computed_at, definition_version,
                                            source_version, source_seq, sources, valid_seq, superseded_seq)
          VALUES ('w', 'T', 'a', 'd', now(), 1, 1, 1, '{}', 1, 2), ('w', 'T', 'a', 'd', now(), 1, 2, 2, '{}', 2, 3);
        INSERT INTO definition_merges (id, source, target, strategy, dry_run, base_position, source_position,
                                       target_position, schema, entries, status)
          VALUES ('00000000-0000-7000-8000-0000000000e1', 'src', 'tgt', 'SOURCE_WINS', false, 0, 1, 1, '{}', '[]', 'planned');
      `.replace(/\$1/g, `'${alert}'`),
      );
    });

    const results = await migrateBefore(db.url, all, 25);
    expect(results.at(-1)?.applied.map((f) => f.split('/').pop())).toEqual(['024.do.world-keys.sql']);

    await withClient(db.url, async (c) => {
      const q = async (sql: string, params: unknown[] = []) => (await c.query(sql, params)).rows;
      expect(await q('SELECT world_id, action FROM audit_log')).toEqual([
        { world_id: 'w', action: 'admin.derived.recomputed' },
      ]);
      expect(await q('SELECT action FROM audit_log_global')).toEqual([{ action: 'admin.outbox.redriven' }]);
      // The statements of the services, by world and id.
      expect(
        (
          await c.query(`UPDATE alerts SET status = 'CLEARED', cleared_at = now() WHERE world_id = 'w' AND id = $1`, [
            alert,
          ])
        ).rowCount,
      ).toBe(1);
      expect(
        (
          await c.query(
            `UPDATE decisions SET status = 'REJECTED' WHERE world_id = 'w' AND id = '00000000-0000-7000-8000-0000000000d1'`,
          )
        ).rowCount,
      ).toBe(1);
      expect(
        (await c.query(`UPDATE recompute_jobs SET finished_at = now() WHERE world_id = 'w' AND id = 1`)).rowCount,
      ).toBe(1);
      expect(await q('SELECT world_id, target FROM definition_merges')).toEqual([{ world_id: 'tgt', target: 'tgt' }]);
      const again = await c.query(
        `INSERT INTO definition_merges (world_id, id, source, target, strategy, dry_run, base_position, source_position,
                                        target_position, schema, entries, status)
         VALUES ('tgt', '00000000-0000-7000-8000-0000000000e1', 'src', 'tgt', 'SOURCE_WINS', false, 0, 1, 1, '{}', '[]', 'planned')
         ON CONFLICT (world_id, id) DO NOTHING`,
      );
      expect(again.rowCount).toBe(0);
      // A value's former versions: one per superseding seq.
      expect(await q('SELECT superseded_seq::int AS s FROM derived_values_history ORDER BY 1')).toEqual([
        { s: 2 },
        { s: 3 },
      ]);
      await expect(
        c.query(`INSERT INTO derived_values_history (world_id, object_type, pk, name, computed_at, definition_version,
                                                     source_version, source_seq, sources, valid_seq, superseded_seq)
                 VALUES ('w', 'T', 'a', 'd', now(), 1, 3, 3, '{}', 1, 3)`),
      ).rejects.toThrow(/duplicate key/);
    });
  }, 120_000);
});
