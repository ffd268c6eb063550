/**
 * Applying data's `series.points.written` events to the points intelligence keeps
 * (rm_series_points, docs/adr/0028): a point at a known instant takes the value of the newer
 * batch (higher seq), so a replayed or reordered older event is a no-op. Each series whose points
 * changed is reported to the evaluation.
 */
import type { EventEnvelope, Statement } from '@onto/shared';
import type { Evaluation } from '../engine/evaluation.js';
import type { ReadModelWrite } from './apply.js';

interface SeriesPoints {
  type: string;
  pk: string;
  series: string;
  seq: number;
  eventId: string;
  points: { time: string; num: number | null }[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function seriesPointsOf(event: EventEnvelope): SeriesPoints {
  const p = event.payload;
  if (
    typeof p.type !== 'string' ||
    typeof p.pk !== 'string' ||
    typeof p.series !== 'string' ||
    !Array.isArray(p.points)
  )
    throw new TypeError(`${event.type}: payload needs type, pk, series and points`);
  return {
    type: p.type,
    pk: p.pk,
    series: p.series,
    seq: event.producer_seq,
    eventId: event.event_id,
    points: p.points.map((point, i) => {
      if (!isRecord(point) || typeof point.time !== 'string')
        throw new TypeError(`${event.type}: payload.points[${i}] needs a time`);
      const v = point.value;
      return { time: point.time, num: typeof v === 'number' ? v : typeof v === 'boolean' ? (v ? 1 : 0) : null };
    }),
  };
}

/** The points of a batch's events, as one statement answering the series whose points changed. */
export function writeSeriesPoints(worldId: string, batches: SeriesPoints[]): ReadModelWrite | undefined {
  if (batches.length === 0) return undefined;
  const rows = batches.flatMap((b) => b.points.map((p) => ({ b, p })));
  const statement: Statement = {
    text: `WITH written AS (
         INSERT INTO rm_series_points AS r (world_id, type, pk, series, time, num, seq)
         SELECT DISTINCT ON (u.type, u.pk, u.series, u.time) $1, u.type, u.pk, u.series, u.time, u.num, u.seq
           FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::float8[], $7::bigint[])
             AS u(type, pk, series, time, num, seq)
          ORDER BY u.type, u.pk, u.series, u.time, u.seq DESC
         ON CONFLICT (world_id, type, pk, series, time) DO UPDATE SET num = EXCLUDED.num, seq = EXCLUDED.seq
           WHERE r.seq < EXCLUDED.seq
         RETURNING r.type, r.pk, r.series
       )
       SELECT DISTINCT type, pk, series FROM written`,
    values: [
      worldId,
      rows.map((r) => r.b.type),
      rows.map((r) => r.b.pk),
      rows.map((r) => r.b.series),
      rows.map((r) => r.p.time),
      rows.map((r) => r.p.num),
      rows.map((r) => r.b.seq),
    ],
  };
  return {
    statement,
    report(answer, evaluation: Evaluation) {
      const cause = new Map(batches.map((b) => [`${b.type}\u0000${b.pk}\u0000${b.series}`, b.eventId]));
      for (const r of answer as { type: string; pk: string; series: string }[]) {
        evaluation.seriesChanged(r.type, r.pk, r.series, cause.get(`${r.type}\u0000${r.pk}\u0000${r.series}`));
      }
      return answer.length;
    },
  };
}

/** Points deleted per series and batch at most: a long backlog goes over several batches. */
export const TRIM_BATCH = 5_000;

/** A series whose points a batch wrote, and how far back from its latest point they are needed. */
export interface SeriesToTrim {
  type: string;
  pk: string;
  series: string;
  keepMs: number;
}

/**
 * Deletes the points of each series older than its latest point minus `keepMs`, at most
 * TRIM_BATCH per series: no window of a definition reaches them (a window ends at the latest
 * point, docs/adr/0028). Both lookups walk the primary key's (world, type, pk, series, time) order.
 */
export function trimSeriesPoints(worldId: string, series: SeriesToTrim[]): Statement | undefined {
  if (series.length === 0) return undefined;
  return {
    text: `DELETE FROM rm_series_points r USING (
         SELECT u.type, u.pk, u.series, p.time
           FROM unnest($2::text[], $3::text[], $4::text[], $5::float8[]) AS u(type, pk, series, keep_ms)
          CROSS JOIN LATERAL (SELECT max(time) AS last FROM rm_series_points
                               WHERE world_id = $1 AND type = u.type AND pk = u.pk AND series = u.series) m
          CROSS JOIN LATERAL (SELECT time FROM rm_series_points
                               WHERE world_id = $1 AND type = u.type AND pk = u.pk AND series = u.series
                                 AND time < m.last - make_interval(secs => u.keep_ms / 1000)
                               ORDER BY time LIMIT ${TRIM_BATCH}) p
       ) old
       WHERE r.world_id = $1 AND r.type = old.type AND r.pk = old.pk AND r.series = old.series AND r.time = old.time`,
    values: [
      worldId,
      series.map((s) => s.type),
      series.map((s) => s.pk),
      series.map((s) => s.series),
      series.map((s) => s.keepMs),
    ],
  };
}
