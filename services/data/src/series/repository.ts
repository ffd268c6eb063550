/**
 * Points of time series in data's PostgreSQL (migrations/009, docs/adr/0028): series_keys names
 * each series once, series_points holds its points, range-partitioned by UTC day.
 */
import { copyField, copyLines, type FieldError, type Queryable, Unprocessable } from '@onto/shared';
import type pg from 'pg';
import type { Aggregate, StoredPoint } from './model.js';
import type { SeriesPoints } from './write.js';

/**
 * Days whose partition exists, as far as this process knows: forgotten when this process's
 * maintenance drops some, and at least hourly, since another replica's maintenance may have.
 */
const knownDays = new Set<string>();
const FORGET_EVERY_MS = 3_600_000;
let knownSince = Date.now();

export const forgetPartitions = () => {
  knownDays.clear();
  knownSince = Date.now();
};

/** How many partitions one request may create: a bound on what a body of odd instants can cost. */
export const NEW_DAYS_PER_REQUEST = 62;

/**
 * Creates the missing day partitions for these points, each in its own short transaction (the
 * DDL locks the parent table), before the points are written. Refuses (422) a request that
 * would create more than NEW_DAYS_PER_REQUEST, naming the first point beyond.
 */
export async function ensurePartitions(
  pool: pg.Pool,
  points: { time: string; path: string }[],
  created: Set<string> = new Set(),
): Promise<void> {
  if (Date.now() - knownSince > FORGET_EVERY_MS) forgetPartitions();
  const missing: string[] = [];
  for (const { time, path } of points) {
    const day = time.slice(0, 10);
    if (knownDays.has(day) || created.has(day)) continue;
    if (created.size >= NEW_DAYS_PER_REQUEST) {
      const fault: FieldError = {
        path: `${path}/time`,
        message: `is on a day with no points yet, and one request adds points to at most ${NEW_DAYS_PER_REQUEST} such days`,
      };
      throw new Unprocessable('the points span too many new days; send them in several requests', [fault]);
    }
    created.add(day);
    missing.push(day);
  }
  if (missing.length === 0) return;
  await pool.query('SELECT series_partition_ensure(d) FROM unnest($1::date[]) AS d', [missing]);
  for (const day of missing) knownDays.add(day);
}

/** The ids of these series of objects, created when new. */
export async function seriesIds(
  db: Queryable,
  worldId: string,
  keys: { type: string; pk: string; series: string }[],
): Promise<Map<string, number>> {
  const ids = new Map<string, number>();
  if (keys.length === 0) return ids;
  const types = keys.map((k) => k.type);
  const pks = keys.map((k) => k.pk);
  const names = keys.map((k) => k.series);
  // Insert-if-absent then read, in one statement: a concurrent creator's row is seen by the SELECT half.
  const { rows } = await db.query<{ id: string; type: string; pk: string; series: string }>(
    `WITH wanted AS (SELECT DISTINCT * FROM unnest($2::text[], $3::text[], $4::text[]) AS w(type, pk, series)),
          added AS (
            INSERT INTO series_keys (world_id, type, pk, series)
            SELECT $1, type, pk, series FROM wanted ORDER BY 1, 2, 3
            ON CONFLICT DO NOTHING
            RETURNING id, type, pk, series)
     SELECT id, type, pk, series FROM added
     UNION ALL
     SELECT k.id, k.type, k.pk, k.series FROM series_keys k JOIN wanted w USING (type, pk, series)
      WHERE k.world_id = $1`,
    [worldId, types, pks, names],
  );
  for (const r of rows) ids.set(seriesKey(r.type, r.pk, r.series), Number(r.id));
  // A key another transaction committed while ours waited on it is not in that statement's
  // snapshot (ON CONFLICT skipped it): read again, in a statement of its own.
  const missing = keys.filter((k) => !ids.has(seriesKey(k.type, k.pk, k.series)));
  if (missing.length > 0) {
    const again = await db.query<{ id: string; type: string; pk: string; series: string }>(
      `SELECT k.id, k.type, k.pk, k.series FROM series_keys k
         JOIN unnest($2::text[], $3::text[], $4::text[]) AS w(type, pk, series) USING (type, pk, series)
        WHERE k.world_id = $1`,
      [worldId, missing.map((k) => k.type), missing.map((k) => k.pk), missing.map((k) => k.series)],
    );
    for (const r of again.rows) ids.set(seriesKey(r.type, r.pk, r.series), Number(r.id));
  }
  return ids;
}

export const seriesKey = (type: string, pk: string, series: string) => `${type}\u0000${pk}\u0000${series}`;

const UNIQUE_VIOLATION = '23505';

/**
 * Writes a batch's points, grouped by series and in time order within each (series/write.ts),
 * at `seq`, and answers the ones added or changed (the ones to announce): 'all', or their
 * indexes per series (docs/adr/0034).
 *
 * Most batches only append: they are COPYed straight into series_points, as fast as a COPY can
 * be. A point already stored makes that COPY fail on the primary key; it is then undone (to a
 * savepoint) and the batch goes through a staging table and one upsert instead: a new instant
 * is added, a known one with another value replaced (last write wins), a known one with the
 * same value left as it was.
 */
export async function writePoints(
  tx: pg.ClientBase,
  worldId: string,
  seq: number,
  groups: SeriesPoints[],
): Promise<'all' | Map<SeriesPoints, number[]>> {
  if (groups.length === 0) return 'all';
  await tx.query('SAVEPOINT series_append');
  try {
    await copyLines(
      tx,
      'series_points (world_id, series_id, time, seq, num, label)',
      pointLines(groups, String(seq), copyField(worldId)),
    );
    await tx.query('RELEASE SAVEPOINT series_append');
    return 'all';
  } catch (error) {
    if ((error as { code?: string }).code !== UNIQUE_VIOLATION) throw error;
    await tx.query('ROLLBACK TO SAVEPOINT series_append');
  }
  // Kept by the connection, emptied at each commit: no catalogue churn per batch.
  await tx.query(
    `CREATE TEMP TABLE IF NOT EXISTS series_staging
       (series_id bigint, time timestamptz, num float8, label text, i int) ON COMMIT DELETE ROWS`,
  );
  await copyLines(tx, 'series_staging (series_id, time, num, label, i)', pointLines(groups, null, ''));
  // The staged rows are taken out by the statement itself (the table is empty for a next batch),
  // and the changed points come back as their index in the batch: no timestamp parsed back.
  const { rows } = await tx.query<{ i: number }>(
    `WITH staged AS (DELETE FROM series_staging RETURNING *),
     up AS (
       INSERT INTO series_points AS p (world_id, series_id, time, seq, num, label)
       SELECT $2, series_id, time, $1, num, label FROM staged ORDER BY series_id, time
       ON CONFLICT (world_id, series_id, time) DO UPDATE SET seq = excluded.seq, num = excluded.num, label = excluded.label
         WHERE (p.num, p.label) IS DISTINCT FROM (excluded.num, excluded.label)
       RETURNING series_id, time)
     SELECT s.i FROM up JOIN staged s USING (series_id, time) ORDER BY s.i`,
    [seq, worldId],
  );
  // i runs over the groups in order, then over each group's points.
  const changed = new Map<SeriesPoints, number[]>();
  let g = 0;
  let base = 0;
  for (const { i } of rows) {
    while (i >= base + (groups[g] as SeriesPoints).times.length) base += (groups[g++] as SeriesPoints).times.length;
    const group = groups[g] as SeriesPoints;
    let list = changed.get(group);
    if (!list) {
      list = [];
      changed.set(group, list);
    }
    list.push(i - base);
  }
  return changed;
}

/**
 * COPY text of the points: into series_points with the world (COPY-escaped) and `seq`, or into
 * series_staging with each point's index (seq null).
 */
function* pointLines(groups: SeriesPoints[], seq: string | null, world: string): Generator<string> {
  let n = 0;
  for (const g of groups) {
    const id = String(g.id);
    for (let i = 0; i < g.times.length; i++, n++) {
      const num = g.nums[i];
      const label = g.labels[i];
      const value = `${num === null || num === undefined ? '\\N' : num}\t${label === null || label === undefined ? '\\N' : copyField(label)}`;
      yield seq === null
        ? `${id}\t${g.times[i]}\t${value}\t${n}\n`
        : `${world}\t${id}\t${g.times[i]}\t${seq}\t${value}\n`;
    }
  }
}

/**
 * A batch's data seq, taken once per write transaction as an object write takes one, and its
 * row in series_batches: the insert holds ROW EXCLUSIVE on that table (to commit) while it takes
 * the seq, which the commit cut's SHARE lock waits for, so every batch with seq <= a cut has
 * committed (docs/adr/0030).
 */
export async function nextSeq(db: Queryable, worldId: string): Promise<number> {
  const { rows } = await db.query<{ seq: string }>(
    "INSERT INTO series_batches (world_id, seq) VALUES ($1, nextval('data_seq')) RETURNING seq",
    [worldId],
  );
  return Number(rows[0]?.seq);
}

/** The id of one series, or undefined when it has no points yet. */
export async function seriesIdOf(
  db: Queryable,
  worldId: string,
  type: string,
  pk: string,
  series: string,
): Promise<number | undefined> {
  const { rows } = await db.query<{ id: string }>(
    'SELECT id FROM series_keys WHERE world_id = $1 AND type = $2 AND pk = $3 AND series = $4',
    [worldId, type, pk, series],
  );
  return rows[0] ? Number(rows[0].id) : undefined;
}

/**
 * Which points a read sees (docs/adr/0030): one series' own points now (`seriesId`), the fast
 * path of a world without a base; or the series named in world `world` at `commit` (null: now),
 * read up the chain of bases, each at its fork point, the nearest world winning an instant.
 */
export type SeriesSource =
  | { worldId: string; seriesId: number }
  | { world: string; commit: number | null; type: string; pk: string; series: string };

/** One world of the chain that has the series: the world, its series id and the commit it is read at (null: now). */
interface Segment {
  world: string;
  id: number;
  upTo: number | null;
}

/** The worlds of the chain that have this series, nearest first. */
async function segmentsOf(db: Queryable, source: Exclude<SeriesSource, { seriesId: number }>): Promise<Segment[]> {
  const { rows } = await db.query<{ world_id: string; id: string; up_to: string | null }>(
    `SELECT k.world_id, k.id, ch.up_to FROM world_chain($1, $2) ch
       JOIN series_keys k ON k.world_id = ch.world_id AND k.type = $3 AND k.pk = $4 AND k.series = $5
      ORDER BY ch.depth`,
    [source.world, source.commit, source.type, source.pk, source.series],
  );
  return rows.map((r) => ({ world: r.world_id, id: Number(r.id), upTo: r.up_to === null ? null : Number(r.up_to) }));
}

/**
 * The statement of the points `source` shows in [from, to) (columns time, num, label) and its
 * parameters, or undefined when no world of the chain has the series. Up the chain, each world
 * shows its points with seq <= its commit, or the value a point had then (series_point_history),
 * minus the instants a nearer world shows: primary-key probes, no sort, so that a page still
 * reads the index in time order and a fork that never wrote the series reads its base alone.
 */
async function sourceQuery(
  db: Queryable,
  source: SeriesSource,
  from: string,
  to: string,
): Promise<{ points: string; params: unknown[] } | undefined> {
  if ('seriesId' in source) {
    return {
      points:
        'SELECT time, num, label FROM series_points WHERE world_id = $4 AND series_id = $1 AND time >= $2 AND time < $3',
      params: [source.seriesId, from, to, source.worldId],
    };
  }
  const segments = await segmentsOf(db, source);
  if (segments.length === 0) return undefined;
  const params: unknown[] = [from, to];
  const param = (value: unknown) => `$${params.push(value)}`;
  const refs = segments.map((g) => ({
    world: param(g.world),
    id: param(g.id),
    upTo: g.upTo === null ? null : param(g.upTo),
  }));
  // Whether segment g shows a point at the instant `time` (a column of the outer row).
  const shows = (g: (typeof refs)[number], time: string) =>
    g.upTo === null
      ? `EXISTS (SELECT 1 FROM series_points q WHERE q.world_id = ${g.world} AND q.series_id = ${g.id} AND q.time = ${time})`
      : `EXISTS (SELECT 1 FROM series_points q WHERE q.world_id = ${g.world} AND q.series_id = ${g.id} AND q.time = ${time}
                   AND q.seq <= ${g.upTo})
         OR EXISTS (SELECT 1 FROM series_point_history r WHERE r.world_id = ${g.world} AND r.series_id = ${g.id} AND r.time = ${time}
                     AND r.seq <= ${g.upTo} AND r.superseded_seq > ${g.upTo})`;
  const parts: string[] = [];
  refs.forEach((g, depth) => {
    const nearer = refs
      .slice(0, depth)
      .map((n) => `AND NOT (${shows(n, 'x.time')})`)
      .join(' ');
    parts.push(
      `SELECT x.time, x.num, x.label FROM series_points x
        WHERE x.world_id = ${g.world} AND x.series_id = ${g.id} AND x.time >= $1 AND x.time < $2 ${g.upTo === null ? '' : `AND x.seq <= ${g.upTo}`} ${nearer}`,
    );
    if (g.upTo !== null) {
      parts.push(
        `SELECT x.time, x.num, x.label FROM series_point_history x
          WHERE x.world_id = ${g.world} AND x.series_id = ${g.id} AND x.time >= $1 AND x.time < $2 AND x.seq <= ${g.upTo} AND x.superseded_seq > ${g.upTo} ${nearer}`,
      );
    }
  });
  return { points: parts.join('\n UNION ALL\n'), params };
}

/** Points in [from, to) after `after`, by time; `limit` of them at most. */
export async function readPoints(
  db: Queryable,
  source: SeriesSource,
  range: { from: string; to: string; after: string | null; limit: number },
): Promise<StoredPoint[]> {
  const query = await sourceQuery(db, source, range.from, range.to);
  if (!query) return [];
  const { points, params } = query;
  const n = params.length;
  // The fast path is the statement as it was, so that its plan stays the primary key's range scan.
  const sql =
    'seriesId' in source
      ? `SELECT time, num, label FROM series_points
          WHERE world_id = $4 AND series_id = $1 AND time >= $2 AND time < $3 AND ($5::timestamptz IS NULL OR time > $5)
          ORDER BY time LIMIT $6`
      : `SELECT time, num, label FROM (${points}) pts
          WHERE ($${n + 1}::timestamptz IS NULL OR time > $${n + 1}) ORDER BY time LIMIT $${n + 2}`;
  const { rows } = await db.query<{ time: Date; num: number | null; label: string | null }>(sql, [
    ...params,
    range.after,
    range.limit,
  ]);
  return rows.map((r) => ({ time: r.time.toISOString(), num: r.num, label: r.label }));
}

const AGG_SQL: Record<Aggregate, { num: string; label: string }> = {
  min: { num: 'min(num)', label: 'NULL' },
  max: { num: 'max(num)', label: 'NULL' },
  avg: { num: 'avg(num)', label: 'NULL' },
  sum: { num: 'sum(num)', label: 'NULL' },
  count: { num: 'count(*)::float8', label: 'NULL' },
  last: { num: '(array_agg(num ORDER BY time DESC))[1]', label: '(array_agg(label ORDER BY time DESC))[1]' },
};

/** Buckets of `bucketMs` (aligned on the Unix epoch) in [from, to) after `after`, each with its aggregate. */
export async function readRollup(
  db: Queryable,
  source: SeriesSource,
  q: { from: string; to: string; after: string | null; limit: number; bucketMs: number; agg: Aggregate },
): Promise<StoredPoint[]> {
  const agg = AGG_SQL[q.agg];
  const query = await sourceQuery(db, source, q.from, q.to);
  if (!query) return [];
  const { points, params } = query;
  const n = params.length;
  const [after, limit, width] = [`$${n + 1}`, `$${n + 2}`, `$${n + 3}`];
  // The fast path aggregates series_points itself: the GROUP BY over the pruned partitions, as before.
  const from =
    'seriesId' in source
      ? 'series_points WHERE world_id = $4 AND series_id = $1 AND time >= $2 AND time < $3'
      : `(${points}) pts WHERE true`;
  const { rows } = await db.query<{ bucket: Date; num: number | null; label: string | null }>(
    `SELECT date_bin(make_interval(secs => ${width}::float8 / 1000), time, timestamptz 'epoch') AS bucket,
            ${agg.num} AS num, ${agg.label} AS label
       FROM ${from}
        AND (${after}::timestamptz IS NULL OR time >= ${after}::timestamptz + make_interval(secs => ${width}::float8 / 1000))
      GROUP BY 1 ORDER BY 1 LIMIT ${limit}`,
    [...params, q.after, q.limit, q.bucketMs],
  );
  return rows.map((r) => ({ time: r.bucket.toISOString(), num: r.num, label: r.label }));
}

/**
 * The latest point of each series of an object that has points; with `at` (a fork, or a read at
 * a commit), as world `worldId` reads it at `at.commit` up the chain: the latest instant any world
 * of the chain shows, with the nearest world's value there.
 */
export async function latestPoints(
  db: Queryable,
  worldId: string,
  type: string,
  pk: string,
  at?: { commit: number | null },
): Promise<{ series: string; point: StoredPoint }[]> {
  const sql =
    at === undefined
      ? `SELECT k.series, p.time, p.num, p.label
           FROM series_keys k
           JOIN LATERAL (SELECT time, num, label FROM series_points
                          WHERE world_id = k.world_id AND series_id = k.id ORDER BY time DESC LIMIT 1) p ON true
          WHERE k.world_id = $1 AND k.type = $2 AND k.pk = $3`
      : `SELECT DISTINCT ON (k.series) k.series, v.time, v.num, v.label
           FROM world_chain($1, $4) ch
           JOIN series_keys k ON k.world_id = ch.world_id AND k.type = $2 AND k.pk = $3
           CROSS JOIN LATERAL (
             SELECT * FROM (
               (SELECT p.time, p.num, p.label FROM series_points p
                 WHERE p.world_id = k.world_id AND p.series_id = k.id AND (ch.up_to IS NULL OR p.seq <= ch.up_to) ORDER BY p.time DESC LIMIT 1)
               UNION ALL
               (SELECT h.time, h.num, h.label FROM series_point_history h
                 WHERE h.world_id = k.world_id AND h.series_id = k.id AND h.seq <= ch.up_to AND h.superseded_seq > ch.up_to ORDER BY h.time DESC LIMIT 1)
             ) one ORDER BY one.time DESC LIMIT 1
           ) v
          ORDER BY k.series, v.time DESC, ch.depth`;
  const { rows } = await db.query<{ series: string; time: Date; num: number | null; label: string | null }>(
    sql,
    at === undefined ? [worldId, type, pk] : [worldId, type, pk, at.commit],
  );
  return rows.map((r) => ({ series: r.series, point: { time: r.time.toISOString(), num: r.num, label: r.label } }));
}

/** Removes a world's series and their points (the world is being dropped). */
export async function dropWorldSeries(tx: Queryable, worldId: string): Promise<void> {
  await tx.query('DELETE FROM series_points WHERE world_id = $1', [worldId]);
  await tx.query('DELETE FROM series_point_history WHERE world_id = $1', [worldId]);
  await tx.query('DELETE FROM series_keys WHERE world_id = $1', [worldId]);
  await tx.query('DELETE FROM series_batches WHERE world_id = $1', [worldId]);
}
