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
