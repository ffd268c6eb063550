import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  eventReadings,
  NotFound,
  problemResponses,
  type Queryable,
  type ReceivedEvent,
  type Statement,
  WORLD_ID,
} from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Gauge } from 'prom-client';

type Reporter = 'data' | 'intelligence';
/** The width of a bucket of world_position_samples. */
const SAMPLE_SECONDS = 10;
interface Announced {
  schemaVersion: number;
  dataSeq: number;
}

/** What each event type announces of its producer's position; the other field stays as it is (0). */
const announced = eventReadings<{ service: Reporter } & Announced>({
  'storage.schema.updated': ({ payload }) => ({ service: 'data', schemaVersion: payload.version, dataSeq: 0 }),
  'storage.position': ({ payload }) => ({ service: 'data', schemaVersion: 0, dataSeq: payload.seq }),
  'intelligence.position': ({ payload }) => ({
    service: 'intelligence',
    schemaVersion: payload.schemaVersion,
    dataSeq: payload.dataSeq,
  }),
});

/**
 * The statement that records a batch's position announcements, or null when it has none. Every
 * column only rises (greatest), so a replayed or older announcement changes nothing; announcements
 * of one (world, service) in the batch are folded first, as one row may be upserted once per statement.
 */
export function recordingPositions(events: ReceivedEvent[]): Statement | null {
  const folded = new Map<string, { world: string; service: Reporter } & Announced>();
  for (const { event } of events) {
    const a = announced(event);
    if (!a) continue;
    const key = `${event.world_id}\u0000${a.service}`;
    const had = folded.get(key);
    folded.set(key, {
      world: event.world_id,
      service: a.service,
      schemaVersion: Math.max(had?.schemaVersion ?? 0, a.schemaVersion),
      dataSeq: Math.max(had?.dataSeq ?? 0, a.dataSeq),
    });
  }
  if (folded.size === 0) return null;
  const rows = [...folded.values()];
  return {
    // The positions that rose are also kept, in their 10-second bucket, for the history route.
    text: `WITH rose AS (
             INSERT INTO world_positions (world_id, service, schema_version, data_seq)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int8[])
             ON CONFLICT (world_id, service) DO UPDATE
               SET schema_version = greatest(world_positions.schema_version, excluded.schema_version),
                   data_seq = greatest(world_positions.data_seq, excluded.data_seq),
                   reported_at = now()
             WHERE excluded.schema_version > world_positions.schema_version
                OR excluded.data_seq > world_positions.data_seq
             RETURNING world_id, service, schema_version, data_seq
           )
           INSERT INTO world_position_samples (world_id, service, at, schema_version, data_seq)
           SELECT world_id, service, date_bin('${SAMPLE_SECONDS} seconds', now(), 'epoch'), schema_version, data_seq
             FROM rose
           ON CONFLICT (world_id, service, at) DO UPDATE
             SET schema_version = greatest(world_position_samples.schema_version, excluded.schema_version),
                 data_seq = greatest(world_position_samples.data_seq, excluded.data_seq)`,
    values: [
      rows.map((r) => r.world),
      rows.map((r) => r.service),
      rows.map((r) => r.schemaVersion),
      rows.map((r) => r.dataSeq),
    ],
  };
}

const Position = Type.Object({
  schemaVersion: Type.Integer({ description: "control's schema version this service has applied (0: none yet)" }),
  dataSeq: Type.Union([Type.Integer(), Type.Null()], {
    description:
      "data's write sequence: for data its newest write of the world, for intelligence its watermark (the newest it applied); null for control, which holds no data",
  }),
  reportedAt: Type.Union([Type.String(), Type.Null()], {
    description: 'when control last learnt a newer position from the service (null: never; control: now)',
  }),
});
const Finding = Type.Object({
  kind: Type.String({
    description: 'schema_gap, count_mismatch, derived_stale or unreported (README, Operations: the checker)',
  }),
  subject: Type.String({ description: 'the service, object type or derived property concerned' }),
  detail: Type.Record(Type.String(), Type.Unknown()),
  repair: Type.Union([Type.String(), Type.Null()], {
    description: 'the repair the checker asked for (an event type, or schema.republished); null when none',
  }),
  foundAt: Type.String(),
});
const Vector = Type.Object({
  world: Type.String(),
  control: Position,
  data: Position,
  intelligence: Position,
  spread: Type.Integer({
    description: 'max - min of the three schema versions: how many schema versions the furthest service is behind',
  }),
  dataBehind: Type.Integer({
    description:
      "data's newest write minus intelligence's watermark, in data's write sequence (shared by all worlds: an upper bound of this world's writes not yet applied), 0 when caught up",
  }),
  consistent: Type.Boolean({
    description: "spread <= 1 and intelligence's watermark has reached data's newest write as last announced",
  }),
  lagging: Type.Union([Type.Literal('control'), Type.Literal('data'), Type.Literal('intelligence'), Type.Null()], {
    description:
      'the service furthest behind: the lowest schema version, else intelligence when behind data; null when none is',
  }),
  findings: Type.Array(Finding, {
    description:
      "the consistency checker's findings of this world in its last run (docs/adr/0032); empty before the first",
  }),
});
type Vector = Static<typeof Vector>;

/** The version vector of a world, or null when control does not know the world (or it is deleted). */
export async function versionVector(db: Queryable, world: string): Promise<Vector | null> {
  const { rows } = await db.query<{
    control: number;
    positions: { service: Reporter; schemaVersion: number; dataSeq: string; reportedAt: string }[] | null;
    findings: Static<typeof Finding>[];
  }>(
    `SELECT (SELECT coalesce(max(version), 0) FROM schema_versions v WHERE v.world_id = w.id) AS control,
            (SELECT json_agg(json_build_object('service', service, 'schemaVersion', schema_version,
                      'dataSeq', data_seq::text, 'reportedAt', to_json(reported_at)#>>'{}'))
               FROM world_positions p WHERE p.world_id = w.id) AS positions,
            (SELECT coalesce(json_agg(json_build_object('kind', kind, 'subject', subject, 'detail', detail,
                      'repair', repair, 'foundAt', to_json(found_at)#>>'{}') ORDER BY id), '[]')
               FROM checker_findings f
              WHERE f.world_id = w.id
                AND f.check_id = (SELECT check_id FROM checker_runs WHERE finished_at IS NOT NULL
                                   ORDER BY finished_at DESC LIMIT 1)) AS findings
       FROM worlds w WHERE w.id = $1 AND w.status <> 'DELETED'`,
    [world],
  );
  const row = rows[0];
  if (!row) return null;
  const of = (service: Reporter) => {
    const p = row.positions?.find((x) => x.service === service);
    return {
      schemaVersion: p?.schemaVersion ?? 0,
      dataSeq: Number(p?.dataSeq ?? 0),
      reportedAt: p?.reportedAt ?? null,
    };
  };
  const control = { schemaVersion: row.control, dataSeq: null, reportedAt: new Date().toISOString() };
  const data = of('data');
  const intelligence = of('intelligence');
  const schema = [
    ['control', control.schemaVersion],
    ['data', data.schemaVersion],
    ['intelligence', intelligence.schemaVersion],
  ] as const;
  const max = Math.max(...schema.map(([, v]) => v));
  const min = Math.min(...schema.map(([, v]) => v));
  const dataBehind = Math.max(0, data.dataSeq - intelligence.dataSeq);
  // Downstream first: intelligence waits on data, data on control, so the last behind is named.
  const behindOnSchema = [...schema].reverse().find(([, v]) => v === min && v < max)?.[0];
  return {
    world,
    control,
    data,
    intelligence,
    spread: max - min,
    dataBehind,
    consistent: max - min <= 1 && dataBehind === 0,
    lagging: behindOnSchema ?? (dataBehind > 0 ? 'intelligence' : null),
    findings: row.findings,
  };
}

const Point = Type.Object({
  at: Type.String({ description: 'the start of a 10-second bucket in which a position rose' }),
  controlSchemaVersion: Type.Integer(),
  data: Type.Object({ schemaVersion: Type.Integer(), dataSeq: Type.Integer() }),
  intelligence: Type.Object({ schemaVersion: Type.Integer(), dataSeq: Type.Integer() }),
  spread: Type.Integer(),
  dataBehind: Type.Integer(),
});
type Point = Static<typeof Point>;

/**
 * The version vector of a world over the last `minutes`: a point per bucket in which data's or
 * intelligence's position rose (the vector holds between points), starting with the vector as it
 * stood when the window opened. Each service's value at a point is its newest sample at or before
 * it, control's schema version its newest version created by then. null: no such world.
 */
export async function vectorHistory(db: Queryable, world: string, minutes: number): Promise<Point[] | null> {
  const { rows } = await db.query<{
    exists: boolean;
    samples: { service: Reporter; at: string; schemaVersion: number; dataSeq: string }[] | null;
    schema: { version: number; at: string }[] | null;
  }>(
    `WITH since AS (SELECT now() - make_interval(mins => $2) AS t)
     SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1 AND status <> 'DELETED') AS exists,
            (SELECT json_agg(json_build_object('service', s.service, 'at', to_json(s.at)#>>'{}',
                      'schemaVersion', s.schema_version, 'dataSeq', s.data_seq::text) ORDER BY s.at)
               FROM (SELECT p.service, p.at, p.schema_version, p.data_seq FROM world_position_samples p, since
                      WHERE p.world_id = $1 AND p.at >= since.t
                     UNION ALL
                     (SELECT DISTINCT ON (p.service) p.service, p.at, p.schema_version, p.data_seq
                        FROM world_position_samples p, since
                       WHERE p.world_id = $1 AND p.at < since.t ORDER BY p.service, p.at DESC)) s) AS samples,
            (SELECT json_agg(json_build_object('version', version, 'at', to_json(created_at)#>>'{}') ORDER BY version)
               FROM schema_versions WHERE world_id = $1) AS schema`,
    [world, minutes],
  );
  const row = rows[0];
  if (!row?.exists) return null;
  const since = Date.now() - minutes * 60_000;
  const schema = row.schema ?? [];
  const controlAt = (t: number) =>
    schema.filter((v) => Date.parse(v.at) <= t).reduce((m, v) => Math.max(m, v.version), 0);
  const now: Record<Reporter, { schemaVersion: number; dataSeq: number }> = {
    data: { schemaVersion: 0, dataSeq: 0 },
    intelligence: { schemaVersion: 0, dataSeq: 0 },
  };
  const points: Point[] = [];
  // A sample's bucket starts before what it saw: control's schema counts up to the bucket's end.
  const push = (at: number, until = at) => {
    const control = controlAt(until);
    const versions = [control, now.data.schemaVersion, now.intelligence.schemaVersion];
    const point = {
      at: new Date(at).toISOString(),
      controlSchemaVersion: control,
      data: { ...now.data },
      intelligence: { ...now.intelligence },
      spread: Math.max(...versions) - Math.min(...versions),
      dataBehind: Math.max(0, now.data.dataSeq - now.intelligence.dataSeq),
    };
    // one point per bucket: a later sample of the same bucket replaces the earlier
    if (points.at(-1)?.at === point.at) points[points.length - 1] = point;
    else points.push(point);
  };
  let opened = false;
  for (const s of row.samples ?? []) {
    const at = Date.parse(s.at);
    if (at >= since && !opened) {
      push(since);
      opened = true;
    }
    now[s.service] = { schemaVersion: s.schemaVersion, dataSeq: Number(s.dataSeq) };
    if (at >= since) push(at, at + SAMPLE_SECONDS * 1000);
  }
  if (!opened) push(since);
  return points;
}

/** Deletes up to 10,000 samples older than `keepSeconds`; returns how many went. */
export async function trimPositionSamples(db: Queryable, keepSeconds: number): Promise<number> {
  const { rowCount } = await db.query(
    `DELETE FROM world_position_samples WHERE ctid = ANY (ARRAY(
       SELECT ctid FROM world_position_samples WHERE at < now() - make_interval(secs => $1) LIMIT 10000))`,
    [keepSeconds],
  );
  return rowCount ?? 0;
}

/** The schema spread of every live world, for the gauge. */
async function spreads(db: Queryable): Promise<{ world: string; spread: number }[]> {
  const { rows } = await db.query<{ world: string; spread: number }>(
    `SELECT w.id AS world,
            greatest(c.v, d.v, i.v) - least(c.v, d.v, i.v) AS spread
       FROM worlds w
       CROSS JOIN LATERAL (SELECT coalesce(max(version), 0) AS v FROM schema_versions WHERE world_id = w.id) c
       CROSS JOIN LATERAL (SELECT coalesce(max(schema_version), 0) AS v FROM world_positions
                            WHERE world_id = w.id AND service = 'data') d
       CROSS JOIN LATERAL (SELECT coalesce(max(schema_version), 0) AS v FROM world_positions
                            WHERE world_id = w.id AND service = 'intelligence') i
      WHERE w.status <> 'DELETED'`,
  );
  return rows;
}

/**
 * `GET /v1/worlds/{world}/consistency`, its history, and the gauge `onto_version_vector_spread{world}`.
 */
export default fp(
  async (fastify: FastifyInstance, opts: { keepSeconds: number }) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const pool = app.pg;
    new Gauge({
      name: 'onto_version_vector_spread',
      help: 'Per world: max - min of the schema versions control, data and intelligence have applied (consistent is <= 1)',
      labelNames: ['world'] as const,
      registers: [app.metrics],
      async collect() {
        const rows = await spreads(pool);
        this.reset();
        for (const r of rows) this.set({ world: r.world }, r.spread);
      },
    });

    app.get(
      '/v1/worlds/:world/consistency',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          summary: "The world's version vector: what each service has applied, the spread and the laggard",
          description:
            'control knows the others from their announcements on Kafka (storage.schema.updated, storage.position, intelligence.position), at most about a second old while they change. See docs/adr/0025.',
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          response: { 200: Vector, ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request) => {
        const vector = await versionVector(pool, request.params.world);
        if (!vector) throw new NotFound(`world ${request.params.world} does not exist`);
        return vector;
      },
    );

    app.get(
      '/v1/worlds/:world/consistency/history',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          summary: "The world's version vector over the last minutes, as control recorded it",
          description:
            'A point per 10-second bucket in which data or intelligence announced a newer position, the first at the start of the window; between points the vector stands as at the point before. Kept for CONSISTENCY_HISTORY_KEEP_SECONDS.',
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          querystring: Type.Object(
            { minutes: Type.Integer({ minimum: 1, maximum: 1440, default: 60 }) },
            { additionalProperties: false },
          ),
          response: { 200: Type.Object({ points: Type.Array(Point) }), ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request) => {
        const points = await vectorHistory(pool, request.params.world, request.query.minutes);
        if (!points) throw new NotFound(`world ${request.params.world} does not exist`);
        return { points };
      },
    );

    // Samples older than what is kept go, a batch a minute (one replica a minute).
    app.jobs.every('control.trim-position-samples', 60_000, () => trimPositionSamples(pool, opts.keepSeconds));
  },
  { name: 'onto-control-consistency', dependencies: ['onto-auth', 'onto-jobs'] },
);
