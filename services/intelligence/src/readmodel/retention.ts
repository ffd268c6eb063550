import { type EventEnvelope, HttpProblem, historyMetrics, isEvent, type Queryable } from '@onto/shared';
import type pg from 'pg';
import type { Registry } from 'prom-client';
import { ACTION_HISTORY_ROWS, pruneActionVersions } from './action-history.js';

/*
 * History retention in intelligence (docs/adr/0072, 0073). data decides a world's retained
 * horizon H (a data commit: intelligence does not know when data's commits were written) and
 * announces it (storage.history.horizon); intelligence prunes its versioned read model at the same
 * horizon. A row is its key's state for data commits in [start, superseded_seq) — `seq` for objects
 * and links, `valid_seq` for derived values — and is kept iff superseded_seq > H or a kept point
 * p < H lies in that interval — the points data keeps (docs/adr/0077): a tag of the world, the
 * fork point of a child world (a child, and its own children, read the world only there), the
 * points of data's merges data still records (learnt from data's replies), a live page token of
 * intelligence's own object sets — or, with the policy's keepVersions, it is among its key's
 * keepVersions newest versions (the current one counted), as in data. Definition history is pruned
 * the same way in definition positions; decision history in intelligence moments; actions'
 * versions last (action-history.ts), on both of their axes.
 */

const TABLES = ['objects', 'links', 'derived values', 'definitions', 'decisions', 'actions'] as const;

/** The data commits below the horizon that reads of intelligence still make. */
export async function keptPoints(db: Queryable, world: string): Promise<number[]> {
  const { rows } = await db.query<{ p: string }>(
    `SELECT commit AS p FROM world_tags WHERE world_id = $1 AND commit IS NOT NULL AND NOT deleted
     UNION SELECT base_seq FROM world_bases WHERE base_world = $1
     UNION SELECT base_seq FROM data_merges WHERE base_world = $1 AND status IN ('planned', 'applied')
     UNION SELECT source_seq FROM data_merges WHERE source = $1 AND status IN ('planned', 'applied')
     UNION SELECT target_seq FROM data_merges WHERE world_id = $1 AND status IN ('planned', 'applied')
     UNION SELECT commit_seq FROM data_merges WHERE world_id = $1 AND status = 'applied'
     UNION SELECT commit FROM history_pins WHERE world_id = $1 AND expires_at > now()`,
    [world],
  );
  return rows
    .filter((r) => r.p !== null)
    .map((r) => Number(r.p))
    .sort((a, b) => a - b);
}

/**
 * What intelligence learns of retention besides data's horizon (docs/adr/0077): the policy's
 * keepVersions (`world.retention.updated`, a greater revision replacing it) and data's merges, whose
 * points data keeps — from control's request (source, base) and data's replies (its points, its
 * status), in whichever order they arrive; a status only moves forward.
 */
export async function recordRetentionFacts(tx: pg.ClientBase, event: EventEnvelope): Promise<void> {
  if (isEvent(event, 'world.retention.updated')) {
    await tx.query(
      `INSERT INTO world_retention AS r (world_id, keep_versions, revision) VALUES ($1, $2, $3)
       ON CONFLICT (world_id) DO UPDATE SET keep_versions = EXCLUDED.keep_versions, revision = EXCLUDED.revision
        WHERE r.revision < EXCLUDED.revision`,
      [event.world_id, event.payload.keepVersions, event.payload.revision],
    );
  } else if (isEvent(event, 'world.merge.requested')) {
    const p = event.payload;
    await tx.query(
      `INSERT INTO data_merges AS m (world_id, merge_id, source, base_world, base_seq) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (world_id, merge_id) DO UPDATE
          SET source = EXCLUDED.source, base_world = EXCLUDED.base_world, base_seq = EXCLUDED.base_seq`,
      [p.target, p.merge, p.source, p.base?.world ?? null, p.base?.dataSeq ?? null],
    );
  } else if (isEvent(event, 'merge.planned')) {
    await tx.query(
      `INSERT INTO data_merges AS m (world_id, merge_id, source_seq, target_seq, status) VALUES ($1, $2, $3, $4, 'planned')
       ON CONFLICT (world_id, merge_id) DO UPDATE
          SET source_seq = EXCLUDED.source_seq, target_seq = EXCLUDED.target_seq, status = coalesce(m.status, 'planned')`,
      [event.world_id, event.payload.merge, event.payload.source, event.payload.target],
    );
  } else if (isEvent(event, 'merge.applied')) {
    await tx.query(
      `INSERT INTO data_merges AS m (world_id, merge_id, commit_seq, status) VALUES ($1, $2, $3, 'applied')
       ON CONFLICT (world_id, merge_id) DO UPDATE
          SET commit_seq = EXCLUDED.commit_seq,
              status = CASE WHEN m.status = 'compensated' THEN m.status ELSE 'applied' END`,
      [event.world_id, event.payload.merge, event.payload.target],
    );
  } else if (isEvent(event, 'merge.compensated')) {
    await tx.query(
      `INSERT INTO data_merges AS m (world_id, merge_id, status) VALUES ($1, $2, 'compensated')
       ON CONFLICT (world_id, merge_id) DO UPDATE SET status = 'compensated'`,
      [event.world_id, event.payload.merge],
    );
  }
}

/** 410 for a read at a data commit below the world's horizon that no kept point names. */
export async function refuseBeyondHorizon(db: Queryable, world: string, commit: number, field: string): Promise<void> {
  const { rows } = await db.query<{ h: string }>('SELECT horizon_seq AS h FROM world_horizons WHERE world_id = $1', [
    world,
  ]);
  const horizon = Number(rows[0]?.h ?? 0);
  if (commit >= horizon || (await keptPoints(db, world)).includes(commit)) return;
  const detail = `commit ${commit} of ${world} is before its retained horizon (${horizon}): its history there was pruned (docs/adr/0072)`;
  throw new HttpProblem(410, 'gone', 'Gone', detail, {
    horizon,
    errors: [{ path: field, message: `must be at least ${horizon} (the retained horizon), or a kept point` }],
  });
}

/** `storage.history.horizon`: a greater horizon starts a pass; an equal one, when none is under way (data's pass ran again). */
export async function recordHorizon(tx: pg.ClientBase, world: string, horizon: number): Promise<void> {
  await tx.query(
    `INSERT INTO world_horizons AS h (world_id, horizon_seq, pass_table, pass_after)
     VALUES ($1, $2, 0, 0)
     ON CONFLICT (world_id) DO UPDATE
        SET horizon_seq = EXCLUDED.horizon_seq, horizon_at = now(), pass_table = 0, pass_after = 0
      WHERE h.horizon_seq < EXCLUDED.horizon_seq OR (h.horizon_seq = EXCLUDED.horizon_seq AND h.pass_table IS NULL)`,
    [world, horizon],
  );
}

export interface PrunerOptions {
  /** History rows looked at per batch. */
  batch: number;
  /** A new horizon answers 410 this long before rows below it go. */
  graceMs: number;
}

/** The intelligence moment a read of `world` at data commit `commit` reads decisions at (stateAt, docs/adr/0069). */
export type MomentAt = (db: Queryable, world: string, commit: number) => Promise<number>;

interface PassRow {
  world_id: string;
  keep_versions: number | null;
  horizon_seq: string;
  pass_table: number;
  pass_after: string;
  started: boolean;
}

/** Each table: its name, the column where a row's interval starts, and the columns of its key. */
const INTERVALS: [string, string, string[]][] = [
  ['rm_objects_history', 'seq', ['type', 'pk']],
  ['rm_links_history', 'seq', ['link_type', 'from_pk', 'to_pk']],
  ['derived_values_history', 'valid_seq', ['object_type', 'pk', 'name']],
];

export class HistoryPruner {
  private readonly pruned: ReturnType<typeof historyMetrics>['pruned'];
  private readonly rows: ReturnType<typeof historyMetrics>['rows'];

  constructor(
    private readonly pool: pg.Pool,
    registry: Registry,
    private readonly opts: PrunerOptions,
    private readonly momentAt: MomentAt,
  ) {
    ({ pruned: this.pruned, rows: this.rows } = historyMetrics(registry));
  }

  /** One batch of one world's pass; answers when to run again (undefined: nothing left until the next horizon). */
  async step(): Promise<number | undefined> {
    const client = await this.pool.connect();
    let done: string | undefined;
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<PassRow>(
        `SELECT h.world_id, r.keep_versions, h.horizon_seq::text, h.pass_table, h.pass_after::text,
                h.horizon_at < now() - make_interval(secs => $1::float8 / 1000) AS started
           FROM world_horizons h LEFT JOIN world_retention r ON r.world_id = h.world_id
          WHERE h.pass_table IS NOT NULL
          ORDER BY h.horizon_at LIMIT 1 FOR UPDATE OF h SKIP LOCKED`,
        [this.opts.graceMs],
      );
      const pass = rows[0];
      if (!pass?.started) {
        await client.query('COMMIT');
        // A pass waiting out its grace is looked at again shortly, not in a loop.
        return pass ? Math.min(1000, this.opts.graceMs) : undefined;
      }
      if (await this.batch(client, pass)) done = pass.world_id;
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
    if (done) await this.count(done);
    return 0;
  }

  /** One batch of the pass's table; true when the pass is over. */
  private async batch(tx: pg.ClientBase, pass: PassRow): Promise<boolean> {
    const world = pass.world_id;
    const horizon = Number(pass.horizon_seq);
    const after = Number(pass.pass_after);
    let pruned = 0;
    let next = pass.pass_table;
    let nextAfter = 0;
    const entry = INTERVALS[pass.pass_table];
    if (entry) {
      const [table, start, key] = entry;
      // The next batch of rows by the end of their interval; a run of equal ends is taken whole,
      // so that a keyset on the end alone never splits one.
      const { rows } = await tx.query<{ lo: string | null; hi: string | null; n: number }>(
        `SELECT min(s)::text AS lo, max(s)::text AS hi, count(*)::int AS n FROM (
           SELECT superseded_seq AS s FROM ${table}
            WHERE world_id = $1 AND superseded_seq > $2 AND superseded_seq <= $3 ORDER BY superseded_seq LIMIT $4) b`,
        [world, after, horizon, this.opts.batch],
      );
      const r = rows[0] ?? { lo: null, hi: null, n: 0 };
      const last = r.n < this.opts.batch ? horizon : r.lo === r.hi ? Number(r.hi) : Number(r.hi) - 1;
      const kept = await keptPoints(tx, world);
      // Newer versions of a row's key end later (a key's intervals never overlap).
      const sameKey = key.map((k) => `y.${k} = x.${k}`).join(' AND ');
      const gone = await tx.query(
        `DELETE FROM ${table} x
          WHERE x.world_id = $1 AND x.superseded_seq > $2 AND x.superseded_seq <= $3
            AND NOT EXISTS (SELECT 1 FROM unnest($4::bigint[]) p WHERE p >= x.${start} AND p < x.superseded_seq)
            AND ($5::int IS NULL OR 1 + (SELECT count(*) FROM (SELECT 1 FROM ${table} y
                   WHERE y.world_id = $1 AND ${sameKey} AND y.superseded_seq > x.superseded_seq LIMIT $5) n) >= $5)`,
        [world, after, last, kept, pass.keep_versions],
      );
      pruned = gone.rowCount ?? 0;
      if (last >= horizon) next++;
      else nextAfter = last;
    } else if (TABLES[pass.pass_table] === 'definitions') {
      pruned = await this.definitions(tx, world, horizon, pass.keep_versions);
      if (pruned < this.opts.batch) next++;
    } else {
      pruned =
        TABLES[pass.pass_table] === 'actions'
          ? await pruneActionVersions(tx, world, horizon, await keptPoints(tx, world), this.opts.batch)
          : await this.decisions(tx, world, horizon, pass.keep_versions);
      if (pruned < this.opts.batch) next++;
    }
    if (pruned > 0) this.pruned.inc({ world, service: 'intelligence', table: TABLES[pass.pass_table] }, pruned);
    const passDone = next >= TABLES.length;
    await tx.query(
      `UPDATE world_horizons SET pass_table = $2, pass_after = $3, pruned = pruned + $4 WHERE world_id = $1`,
      [world, passDone ? null : next, nextAfter, pruned],
    );
    return passDone;
  }

  /**
   * Definition history, in definition positions: a row holds for positions [seq, next change of
   * the definition); the position at the horizon is the world's last change made while its data
   * watermark was at most H. Kept: positions at or after it, and those of tags, children's fork
   * points and merges intelligence records.
   */
  private async definitions(
    tx: pg.ClientBase,
    world: string,
    horizon: number,
    keepVersions: number | null,
  ): Promise<number> {
    const gone = await tx.query(
      `WITH at_horizon AS (
         SELECT max(seq) AS p FROM definition_history WHERE world_id = $1 AND data_seq <= $2
       ), kept AS (
         SELECT definitions AS p FROM world_tags WHERE world_id = $1 AND definitions IS NOT NULL AND NOT deleted
         UNION SELECT definitions FROM fork_points WHERE base_world = $1
         UNION SELECT base_position FROM definition_merges WHERE base_world = $1 AND status IN ('planned', 'applied')
         UNION SELECT source_position FROM definition_merges WHERE source = $1 AND status IN ('planned', 'applied')
         UNION SELECT target_position FROM definition_merges WHERE target = $1 AND status IN ('planned', 'applied')
         UNION SELECT applied_position FROM definition_merges WHERE target = $1 AND status = 'applied' AND applied_position IS NOT NULL
       ), rows AS (
         SELECT x.seq, (SELECT min(y.seq) FROM definition_history y
                         WHERE y.world_id = $1 AND y.kind = x.kind AND y.name = x.name AND y.seq > x.seq) AS next,
                (SELECT count(*) FROM (SELECT 1 FROM definition_history y
                   WHERE y.world_id = $1 AND y.kind = x.kind AND y.name = x.name AND y.seq > x.seq LIMIT $4) n) AS newer
           FROM definition_history x, at_horizon h
          WHERE x.world_id = $1 AND x.seq < h.p
       ), doomed AS (
         SELECT r.seq FROM rows r, at_horizon h
          WHERE r.next <= h.p AND NOT EXISTS (SELECT 1 FROM kept k WHERE k.p >= r.seq AND k.p < r.next)
            AND ($4::int IS NULL OR r.newer >= $4)
          LIMIT $3
       )
       DELETE FROM definition_history d USING doomed WHERE d.world_id = $1 AND d.seq = doomed.seq`,
      [world, horizon, this.opts.batch, keepVersions],
    );
    return gone.rowCount ?? 0;
  }

  /**
   * Decision history (docs/adr/0077): a row is its decision's state for intelligence moments
   * [seq, its next version's seq) — the next history row, else the decision now. A read at data
   * commit c reads decisions at c's moment (stateAt), so the horizon's moment and the kept points'
   * moments play the parts H and the kept points play for the read model: a row goes when its
   * interval ends at or before the horizon's moment and holds no kept point's moment, and (with
   * keepVersions) it has at least keepVersions newer versions, the current one counted.
   */
  private async decisions(
    tx: pg.ClientBase,
    world: string,
    horizon: number,
    keepVersions: number | null,
  ): Promise<number> {
    const moment = await this.momentAt(tx, world, horizon);
    const kept: number[] = [];
    for (const p of await keptPoints(tx, world)) if (p < horizon) kept.push(await this.momentAt(tx, world, p));
    const gone = await tx.query(
      `WITH rows AS (
         SELECT x.id, x.seq,
                coalesce((SELECT min(y.seq) FROM decisions_history y WHERE y.world_id = $1 AND y.id = x.id AND y.seq > x.seq),
                         (SELECT d.seq FROM decisions d WHERE d.world_id = $1 AND d.id = x.id)) AS next,
                (SELECT count(*) FROM (SELECT 1 FROM decisions_history y
                   WHERE y.world_id = $1 AND y.id = x.id AND y.seq > x.seq LIMIT $5) n) AS newer
           FROM decisions_history x WHERE x.world_id = $1 AND x.seq < $2
       ), doomed AS (
         SELECT r.id, r.seq FROM rows r
          WHERE r.next <= $2 AND NOT EXISTS (SELECT 1 FROM unnest($3::bigint[]) p WHERE p >= r.seq AND p < r.next)
            AND ($5::int IS NULL OR 1 + r.newer >= $5)
          LIMIT $4
       )
       DELETE FROM decisions_history d USING doomed WHERE d.world_id = $1 AND d.id = doomed.id AND d.seq = doomed.seq`,
      [world, moment, kept, this.opts.batch, keepVersions],
    );
    return gone.rowCount ?? 0;
  }

  async count(world: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: string }>(
      `SELECT (SELECT count(*) FROM rm_objects_history WHERE world_id = $1)
            + (SELECT count(*) FROM rm_links_history WHERE world_id = $1)
            + (SELECT count(*) FROM derived_values_history WHERE world_id = $1)
            + (SELECT count(*) FROM definition_history WHERE world_id = $1)
            + (SELECT count(*) FROM decisions_history WHERE world_id = $1)
            + ${ACTION_HISTORY_ROWS} AS n`,
      [world],
    );
    const n = Number(rows[0]?.n ?? 0);
    this.rows.set({ world, service: 'intelligence' }, n);
    return n;
  }
}
