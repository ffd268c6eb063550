import {
  type ApplyEffects,
  type EventEnvelope,
  type PrepareEffects,
  queryTogether,
  type ReceivedEvent,
  type Statement,
} from '@onto/shared';
import { advancingDataWatermarks } from '../consistency.js';
import {
  linkChangeOf,
  objectChangeOf,
  type ReadModelWrite,
  writeLinkChanges,
  writeObjectChanges,
} from '../readmodel/apply.js';
import { seriesPointsOf, trimSeriesPoints, writeSeriesPoints } from '../readmodel/series.js';
import { Evaluation, type EvaluationContext } from './evaluation.js';
import { lockWorldsStatement } from './locks.js';
import type { EvaluationMetrics } from './metrics.js';
import { ModelCache, type WorldModel } from './world-model.js';
import { WriteBehind } from './write-behind.js';

interface WorldPlan {
  worldId: string;
  /** When the oldest change of the batch happened in data. */
  oldest: number;
  objects: ReadModelWrite | undefined;
  links: ReadModelWrite | undefined;
  series: ReadModelWrite | undefined;
  /** The series the batch wrote points of: each is trimmed to what its windows need. */
  seriesKeys: { type: string; pk: string; series: string }[];
}

interface BatchPlan {
  worlds: WorldPlan[];
  /** The highest data write per world. */
  watermarks: Map<string, number>;
  /**
   * The worlds' locks, the watermarks, then per world its definition versions and its read-model writes: each
   * statement after the locks reads what committed before they were granted.
   */
  statements: Statement[];
  /** When data committed each write of the batch that says so (docs/adr/0069). */
  times: { world: string; seq: number; at: string }[];
}

/** What a batch of `object.*` and `link.*` events will do first, per world in lock order. */
function plan(events: ReceivedEvent[]): BatchPlan {
  const byWorld = new Map<
    string,
    { objects: EventEnvelope[]; links: EventEnvelope[]; series: EventEnvelope[]; oldest: number }
  >();
  const watermarks = new Map<string, number>();
  // When data committed each write (docs/adr/0069), per world and seq: `?at=<instant>` reads by it.
  const times = new Map<string, { world: string; seq: number; at: string }>();
  for (const { event } of events) {
    const isObject = event.type.startsWith('object.');
    const isSeries = event.type === 'series.points.written';
    if (!isObject && !isSeries && !event.type.startsWith('link.')) continue;
    let batch = byWorld.get(event.world_id);
    if (!batch) {
      batch = { objects: [], links: [], series: [], oldest: Number.POSITIVE_INFINITY };
      byWorld.set(event.world_id, batch);
    }
    (isObject ? batch.objects : isSeries ? batch.series : batch.links).push(event);
    batch.oldest = Math.min(batch.oldest, Date.parse(event.occurred_at));
    watermarks.set(event.world_id, Math.max(watermarks.get(event.world_id) ?? 0, event.producer_seq));
    const at = event.payload.writtenAt;
    if (typeof at === 'string') {
      times.set(`${event.world_id}\u0000${event.producer_seq}`, { world: event.world_id, seq: event.producer_seq, at });
    }
  }
  const worlds = [...byWorld]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([worldId, batch]) => {
      const series = batch.series.map(seriesPointsOf);
      const keys = new Map(series.map((b) => [`${b.type}\u0000${b.pk}\u0000${b.series}`, b]));
      return {
        worldId,
        oldest: batch.oldest,
        objects: writeObjectChanges(worldId, batch.objects.map(objectChangeOf)),
        links: writeLinkChanges(worldId, batch.links.map(linkChangeOf)),
        series: writeSeriesPoints(worldId, series),
        seriesKeys: [...keys.values()].map(({ type, pk, series }) => ({ type, pk, series })),
      };
    });
  const lock = lockWorldsStatement(byWorld.keys());
  const statements: Statement[] = lock ? [lock] : [];
  // The watermarks first (they commit with the rest): a value computed and an alert raised or
  // cleared in this transaction are stamped with the data seq they reflect (rm_world_seq,
  // docs/adr/0033), which is the batch's highest write, not the one before it.
  if (lock) statements.push(advancingDataWatermarks(watermarks));
  for (const world of worlds) {
    statements.push(ModelCache.versions(world.worldId));
    if (world.objects) statements.push(world.objects.statement);
    if (world.links) statements.push(world.links.statement);
    if (world.series) statements.push(world.series.statement);
  }
  return { worlds, watermarks, statements, times: [...times.values()] };
}

/**
 * The first statements of a batch, for the inbox consumer to send with its own (PrepareEffects):
 * the world locks and the read-model writes, so that a batch of new changes takes two round
 * trips — this one, and COMMIT with the values computed and the watermarks.
 */
export const prepareChanges: PrepareEffects = (events) => plan(events).statements;

/**
 * The effect of a batch of `object.*` and `link.*` events, inside the inbox transaction: per
 * world (locked in one order), the read model takes the newer versions, the evaluation recomputes
 * what they affect, and the world's data watermark moves to the highest write applied.
 *
 * Round trips: the plan's statements (sent ahead with the inbox statement, or else here, in one
 * trip); the evaluation's reads (aggregates, linked objects, rules) as it needs them; its last
 * writes and the watermarks are answered to the inbox consumer, which sends them with COMMIT.
 */
export function applyChanges(deps: {
  models: ModelCache;
  ctx: EvaluationContext;
  metrics: EvaluationMetrics;
  /** How much older than the widest window over a series its points are kept (SERIES_KEEP_MARGIN_MS). */
  seriesKeepMarginMs: number;
}): ApplyEffects {
  return async (tx, events, prepared) => {
    const batch = plan(events);
    if (batch.worlds.length === 0) return;
    const all = prepared ?? (await queryTogether(tx, batch.statements));
    if (all.length !== batch.statements.length) {
      throw new Error(`expected ${batch.statements.length} answers to the batch's first statements, not ${all.length}`);
    }
    const answers = all.slice(2); // after the locks and the watermarks
    const sql = new WriteBehind(tx);
    for (const world of batch.worlds) {
      const versions = answers.shift()?.rows;
      const objects = world.objects ? answers.shift()?.rows : undefined;
      const links = world.links ? answers.shift()?.rows : undefined;
      const series = world.series ? answers.shift()?.rows : undefined;
      const model = await deps.models.get(sql, world.worldId, versions);
      const chain = ModelCache.chainOf(versions);
      // A fork's changes can arrive a moment before data's reply naming its fork point reaches
      // intelligence's other consumer: the batch is retried until it has (docs/adr/0033).
      if (chain === 'pending') throw new Error(`the fork point of ${world.worldId} is not recorded yet`);
      const evaluation = new Evaluation(sql, model, deps.ctx, chain === 'known');
      if (world.objects && objects) world.objects.report(objects, evaluation);
      if (world.links && links) world.links.report(links, evaluation);
      if (world.series && series) world.series.report(series, evaluation);
      const stats = await evaluation.run();
      // After the evaluation, sent with COMMIT: points no window reaches any more (docs/adr/0028).
      const trim = trimSeriesPoints(
        world.worldId,
        world.seriesKeys.map((k) => ({
          ...k,
          keepMs: widestWindowMs(model, k.type, k.series) + deps.seriesKeepMarginMs,
        })),
      );
      if (trim) sql.write(trim.text, trim.values as unknown[]);
      // Counted before the commit: a batch that rolls back and is retried counts twice.
      deps.metrics.record(world.worldId, stats, world.oldest);
    }
    if (batch.times.length > 0) {
      sql.write(
        `INSERT INTO rm_commit_times (world_id, seq, written_at)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::timestamptz[]) ON CONFLICT DO NOTHING`,
        [batch.times.map((t) => t.world), batch.times.map((t) => t.seq), batch.times.map((t) => t.at)],
      );
    }
    return sql.take();
  };
}

/** The widest window of the world's definitions over a series (0 when none reads it). */
function widestWindowMs(model: WorldModel, type: string, series: string): number {
  let widest = 0;
  for (const def of model.seriesReaders.get(`${type}\u0000${series}`) ?? []) {
    for (const spec of def.aggregates) {
      if (spec.series === series && spec.windowMs !== undefined) widest = Math.max(widest, spec.windowMs);
    }
  }
  return widest;
}
