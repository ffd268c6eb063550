import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  enqueueJob,
  historyMetrics,
  inTransaction,
  isEvent,
  newEvent,
  Outbox,
  problemResponses,
  type ReceivedEvent,
  TOPICS,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { notProvisioned } from '../schema/lookup.js';
import { keptPoints } from '../storage/horizon.js';
import { commitAtInstant } from './refs.js';

/*
 * History retention in data (docs/adr/0072). A world's policy comes from control
 * (world.retention.updated). A pass of the pruner moves the world's horizon H to the commit at
 * (now - keepDays) and removes, in bounded batches, the history rows no kept ref reads:
 *
 *   a history row is the state of its key for seq <= c < superseded_seq, so it is read at some
 *   kept commit c iff superseded_seq > H (every c >= H is kept), or seq <= p < superseded_seq for
 *   a kept point p below H: a tag of the world, the fork point of a child world, a point of a merge
 *   data still records (its base, source, target and merge commit), a live page token's commit.
 *
 * Heads are never touched (a current version is always read). With keepVersions, a row among the
 * keepVersions newest versions of its key (the current one counted) stays too. A child reads its
 * base only at its fork point (every commit of the child is at or after it), and a grandchild
 * reads the child at or after the child's own fork point, so the base at that same point: the
 * direct children's fork points are the base's only kept points for its whole subtree.
 */

const TABLES = ['objects', 'links', 'series points'] as const;
const PRUNE_TASK = 'data.prune-history';

/** `world.retention.updated`: the policy, only a greater revision replacing it (redeliveries change nothing). */
export async function applyRetention(tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> {
  for (const { event } of events) {
    if (!isEvent(event, 'world.retention.updated')) continue;
    const p = event.payload;
    await tx.query(
      `INSERT INTO world_retention AS r (world_id, keep_days, keep_versions, revision)
       VALUES ($1, $2, $3, $4)
       ON CONFLICT (world_id) DO UPDATE
          SET keep_days = EXCLUDED.keep_days, keep_versions = EXCLUDED.keep_versions,
              revision = EXCLUDED.revision, updated_at = now()
        WHERE r.revision < EXCLUDED.revision`,
      [event.world_id, p.keepDays, p.keepVersions, p.revision],
    );
    // A new policy starts its pass now rather than at the recurring job's next period.
    await enqueueJob(tx, PRUNE_TASK, { key: 'policy', maxAttempts: null });
  }
}

export interface PrunerOptions {
  /** History rows looked at per batch (one short transaction each). */
  batch: number;
  /** A new horizon is stored this long before rows below it go: reads that checked the former one finish first. */
  graceMs: number;
  /** How often a world's pass starts again. */
  intervalMs: number;
}

interface PassRow {
  world_id: string;
  keep_versions: number | null;
  pass_table: number;
  pass_after: string;
  pass_horizon: string;
  started: boolean;
}

export class HistoryPruner {
  private readonly pruned: ReturnType<typeof historyMetrics>['pruned'];
  private readonly rows: ReturnType<typeof historyMetrics>['rows'];

  constructor(
    private readonly pool: pg.Pool,
    registry: FastifyInstance['metrics'],
    private readonly opts: PrunerOptions,
    private readonly topicPrefix: string,
  ) {
    ({ pruned: this.pruned, rows: this.rows } = historyMetrics(registry));
  }

  /**
   * Starts the passes that are due: each world with a policy whose last pass started an interval
   * ago gets its new horizon, stored at once (reads below it answer 410 from then on).
   */
  private async startPasses(): Promise<void> {
    await this.pool.query('DELETE FROM history_pins WHERE expires_at < now()');
    const { rows } = await this.pool.query<{ world_id: string; keep_days: number; created_seq: string | null }>(
      `SELECT r.world_id, r.keep_days, w.created_seq FROM world_retention r LEFT JOIN worlds w ON w.id = r.world_id
        WHERE r.keep_days IS NOT NULL AND r.pass_table IS NULL
          AND (r.horizon_at IS NULL OR r.horizon_at < now() - make_interval(secs => $1::float8 / 1000))`,
      [this.opts.intervalMs],
    );
    for (const r of rows) {
      if (r.created_seq === null) continue; // not provisioned here (yet): nothing to prune
      const { rows: head } = await this.pool.query<{ head: string; instant: string }>(
        `SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM data_seq) AS head,
                to_json(now() - make_interval(days => $1))#>>'{}' AS instant`,
        [r.keep_days],
      );
      const h = head[0] as { head: string; instant: string };
      const horizon = await commitAtInstant(this.pool, r.world_id, h.instant, Number(r.created_seq), Number(h.head));
      await inTransaction(this.pool, async (tx) => {
        const { rows: moved } = await tx.query<{ horizon: string }>(
          `UPDATE world_retention
              SET horizon_seq = greatest(horizon_seq, $2), horizon_at = now(),
                  pass_table = 0, pass_after = 0, pass_horizon = greatest(horizon_seq, $2)
            WHERE world_id = $1 AND pass_table IS NULL
           RETURNING horizon_seq::text AS horizon`,
          [r.world_id, horizon],
        );
        const h = Number(moved[0]?.horizon ?? 0);
        // Intelligence prunes its versioned read model at the same horizon (its reads answer 410 alike).
        if (moved[0]) {
          const event = newEvent({
            type: 'storage.history.horizon',
            worldId: r.world_id,
            key: r.world_id,
            version: h,
            producer: 'data',
            producerSeq: h,
            payload: { horizon: h },
          });
          await new Outbox(tx, this.topicPrefix).add({
            event,
            key: TOPICS['onto.storage'].key({ worldId: r.world_id }),
          });
        }
      });
    }
  }

  /** One batch of one world's pass; answers when to run again (undefined: no pass until the next interval). */
  async step(): Promise<number | undefined> {
    await this.startPasses();
    return this.pool.connect().then(async (client) => {
      try {
        await client.query('BEGIN');
        // One batch at a time per world; a pass waits out the grace after its horizon was stored.
        const { rows } = await client.query<PassRow>(
          `SELECT world_id, keep_versions, pass_table, pass_after::text, pass_horizon::text,
                  horizon_at < now() - make_interval(secs => $1::float8 / 1000) AS started
             FROM world_retention WHERE pass_table IS NOT NULL
            ORDER BY horizon_at LIMIT 1 FOR UPDATE SKIP LOCKED`,
          [this.opts.graceMs],
        );
        const pass = rows[0];
        if (!pass) {
          await client.query('COMMIT');
          return undefined;
        }
        if (!pass.started) {
          // A pass waiting out its grace is looked at again shortly, not in a loop.
          await client.query('COMMIT');
          return Math.min(1000, this.opts.graceMs);
        }
        const done = await this.batch(client, pass);
        await client.query('COMMIT');
        if (done) await this.count(pass.world_id);
        return 0;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        client.release();
      }
    });
  }

  /** Prunes one batch of the pass's table; true when the pass is over. */
  private async batch(tx: pg.ClientBase, pass: PassRow): Promise<boolean> {
    const world = pass.world_id;
    const horizon = Number(pass.pass_horizon);
    const kept = await keptPoints(tx, world);
    const args: unknown[] = [world, pass.pass_after, horizon, this.opts.batch, kept];
    if (pass.pass_table < 2) args.push(pass.keep_versions);
    const { rows } = await tx.query<{ last: string | null; examined: number; pruned: number }>(
      [PRUNE_OBJECTS, PRUNE_LINKS, PRUNE_SERIES_POINTS][pass.pass_table] as string,
      args,
    );
    const r = rows[0] ?? { last: null, examined: 0, pruned: 0 };
    if (r.pruned > 0) this.pruned.inc({ world, service: 'data', table: TABLES[pass.pass_table] }, r.pruned);
    const tableDone = r.examined < this.opts.batch;
    const next = tableDone ? pass.pass_table + 1 : pass.pass_table;
    const passDone = next >= TABLES.length;
    await tx.query(
      `UPDATE world_retention SET pass_table = $2, pass_after = $3, pruned = pruned + $4 WHERE world_id = $1`,
      [world, passDone ? null : next, tableDone ? 0 : r.last, r.pruned],
    );
    return passDone;
  }

  /** The world's history rows now, for onto_history_rows. */
  async count(world: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: string }>(
      `SELECT (SELECT count(*) FROM object_history WHERE world_id = $1)
            + (SELECT count(*) FROM link_history WHERE world_id = $1)
            + (SELECT count(*) FROM series_point_history h JOIN series_keys k ON k.id = h.series_id WHERE k.world_id = $1) AS n`,
      [world],
    );
    const n = Number(rows[0]?.n ?? 0);
    this.rows.set({ world, service: 'data' }, n);
    return n;
  }
}

/*
 * One batch each: the next `$4` history rows of world `$1` after seq `$2` below the horizon `$3`
 * (by the (world_id, seq) indexes), of which those no kept point `$5` reads and, with keepVersions
 * `$6`, that have at least that many newer versions, are deleted. Answers the last seq looked at,
 * how many were looked at and how many went.
 */
const unread = `NOT EXISTS (SELECT 1 FROM unnest($5::bigint[]) p WHERE p >= b.seq AND p < b.superseded_seq)`;

const PRUNE_OBJECTS = `
WITH batch AS (
  SELECT x.type, x.pk, x.seq, x.superseded_seq FROM object_history x
   WHERE x.world_id = $1 AND x.seq > $2::bigint AND x.seq < $3::bigint ORDER BY x.seq LIMIT $4
), gone AS (
  DELETE FROM object_history x USING batch b
   WHERE x.world_id = $1 AND x.type = b.type AND x.pk = b.pk AND x.seq = b.seq
     AND b.superseded_seq <= $3::bigint AND ${unread}
     AND ($6::int IS NULL OR 1 + (SELECT count(*) FROM (SELECT 1 FROM object_history y
            WHERE y.world_id = $1 AND y.type = b.type AND y.pk = b.pk AND y.seq > b.seq LIMIT $6) n) >= $6)
  RETURNING 1
)
SELECT (SELECT max(seq) FROM batch)::text AS last, (SELECT count(*) FROM batch)::int AS examined,
       (SELECT count(*) FROM gone)::int AS pruned`;

// link_history holds every version, the current one too: a row's interval ends at the next one's seq.
const PRUNE_LINKS = `
WITH batch AS (
  SELECT x.link_type, x.from_pk, x.to_pk, x.seq,
         (SELECT y.seq FROM link_history y WHERE y.world_id = $1 AND y.link_type = x.link_type
             AND y.from_pk = x.from_pk AND y.to_pk = x.to_pk AND y.seq > x.seq ORDER BY y.seq LIMIT 1) AS superseded_seq
    FROM link_history x
   WHERE x.world_id = $1 AND x.seq > $2::bigint AND x.seq < $3::bigint ORDER BY x.seq LIMIT $4
), gone AS (
  DELETE FROM link_history x USING batch b
   WHERE x.world_id = $1 AND x.link_type = b.link_type AND x.from_pk = b.from_pk AND x.to_pk = b.to_pk
     AND x.seq = b.seq AND b.superseded_seq <= $3::bigint AND ${unread}
     AND ($6::int IS NULL OR (SELECT count(*) FROM (SELECT 1 FROM link_history y
            WHERE y.world_id = $1 AND y.link_type = b.link_type AND y.from_pk = b.from_pk AND y.to_pk = b.to_pk
              AND y.seq > b.seq LIMIT $6) n) >= $6)
  RETURNING 1
)
SELECT (SELECT max(seq) FROM batch)::text AS last, (SELECT count(*) FROM batch)::int AS examined,
       (SELECT count(*) FROM gone)::int AS pruned`;

// A series point's former values (overwrites); points past their series' own retention go with
// their day partitions (series maintenance). keepVersions is for objects and links.
const PRUNE_SERIES_POINTS = `
WITH batch AS (
  SELECT h.series_id, h.time, h.seq, h.superseded_seq FROM series_point_history h
   WHERE h.seq > $2::bigint AND h.seq < $3::bigint
     AND h.series_id IN (SELECT k.id FROM series_keys k WHERE k.world_id = $1)
   ORDER BY h.seq LIMIT $4
), gone AS (
  DELETE FROM series_point_history x USING batch b
   WHERE x.series_id = b.series_id AND x.time = b.time AND x.seq = b.seq
     AND b.superseded_seq <= $3::bigint AND ${unread}
  RETURNING 1
)
SELECT (SELECT max(seq) FROM batch)::text AS last, (SELECT count(*) FROM batch)::int AS examined,
       (SELECT count(*) FROM gone)::int AS pruned`;

const RetentionAnswer = Type.Object({
  world: Type.String(),
  keepDays: Type.Union([Type.Integer(), Type.Null()], { description: 'null: forever (or no policy)' }),
  keepVersions: Type.Union([Type.Integer(), Type.Null()]),
  revision: Type.Integer({ description: "the policy's revision data applied; 0: none" }),
  horizon: Type.Integer({
    description:
      'the retained horizon: reads at an older commit answer 410, unless keptPoints names it; 0: nothing pruned',
  }),
  horizonAt: Type.Union([Type.String(), Type.Null()], { description: 'when the horizon last moved' }),
  keptPoints: Type.Array(Type.Integer(), {
    description: 'commits below the horizon still read: tags, fork points of child worlds, merges, live page tokens',
  }),
  pruned: Type.Integer({ description: 'history rows pruned so far' }),
});

/** The pruner as a recurring job, the policy's consumer, and `GET /v1/worlds/{world}/history`. */
export default fp(
  async (fastify: FastifyInstance, opts: PrunerOptions) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const pruner = new HistoryPruner(app.pg, app.metrics, opts, app.topicPrefix);
    app.decorate('historyPruner', pruner);
    // A pass's batches follow one another at once; a world's next pass starts an interval later.
    app.jobs.every(
      PRUNE_TASK,
      Math.max(1000, Math.min(opts.intervalMs, 60_000)),
      async () => {
        const again = await pruner.step();
        return again === undefined ? undefined : { rerunInMs: again };
      },
      { leaseMs: 60_000 },
    );

    app.get(
      '/v1/worlds/:world/history',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          summary: "The world's history retention as data applies it: the policy and the retained horizon",
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          response: { 200: RetentionAnswer, ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request) => {
        const { world } = request.params;
        const { rows } = await app.pg.query<{
          provisioned: boolean;
          keep_days: number | null;
          keep_versions: number | null;
          revision: number | null;
          horizon_seq: string | null;
          horizon_at: string | null;
          pruned: string | null;
        }>(
          `SELECT w.id IS NOT NULL AS provisioned, r.keep_days, r.keep_versions, r.revision, r.horizon_seq::text,
                  to_json(r.horizon_at)#>>'{}' AS horizon_at, r.pruned::text
             FROM (SELECT 1) one LEFT JOIN worlds w ON w.id = $1 LEFT JOIN world_retention r ON r.world_id = $1`,
          [world],
        );
        const r = rows[0];
        if (!r?.provisioned) throw notProvisioned(world);
        return {
          world,
          keepDays: r.keep_days,
          keepVersions: r.keep_versions,
          revision: r.revision ?? 0,
          horizon: Number(r.horizon_seq ?? 0),
          horizonAt: r.horizon_at,
          keptPoints: (await keptPoints(app.pg, world)).filter((p) => p < Number(r.horizon_seq ?? 0)),
          pruned: Number(r.pruned ?? 0),
        };
      },
    );
  },
  { name: 'onto-data-retention', dependencies: ['onto-auth', 'onto-jobs'] },
);

declare module 'fastify' {
  interface FastifyInstance {
    historyPruner: HistoryPruner;
  }
}
