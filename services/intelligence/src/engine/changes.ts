import { type ApplyEffects, type EventEnvelope, queryTogether, type ReceivedEvent, type Statement } from '@onto/shared';
import { advancingDataWatermarks } from '../consistency.js';
import { linkChangeOf, objectChangeOf, writeLinkChanges, writeObjectChanges } from '../readmodel/apply.js';
import { Evaluation, type EvaluationContext } from './evaluation.js';
import { lockWorldsStatement } from './locks.js';
import type { EvaluationMetrics } from './metrics.js';
import { ModelCache } from './world-model.js';
import { WriteBehind } from './write-behind.js';

interface WorldBatch {
  objects: EventEnvelope[];
  links: EventEnvelope[];
  /** When the oldest change of the batch happened in data. */
  oldest: number;
}

/**
 * The effect of a batch of `object.*` and `link.*` events, inside the inbox transaction: per
 * world (locked in one order), the read model takes the newer versions, the evaluation recomputes
 * what they affect, and the world's data watermark moves to the highest write applied.
 *
 * Round trips: one for the locks, then per world its definition versions and its read-model
 * writes (which answer the changed objects with their derived values); the evaluation's reads
 * (aggregates, linked objects, rules) as it needs them; its last writes and the watermarks are
 * answered to the inbox consumer, which sends them with COMMIT. A batch of property changes
 * read by derived properties without aggregates takes no trip of its own after the first.
 */
export function applyChanges(deps: {
  models: ModelCache;
  ctx: EvaluationContext;
  metrics: EvaluationMetrics;
}): ApplyEffects {
  return async (tx, events: ReceivedEvent[]) => {
    const worlds = new Map<string, WorldBatch>();
    const watermarks = new Map<string, number>();
    for (const { event } of events) {
      const isObject = event.type.startsWith('object.');
      if (!isObject && !event.type.startsWith('link.')) continue;
      let batch = worlds.get(event.world_id);
      if (!batch) {
        batch = { objects: [], links: [], oldest: Number.POSITIVE_INFINITY };
        worlds.set(event.world_id, batch);
      }
      (isObject ? batch.objects : batch.links).push(event);
      batch.oldest = Math.min(batch.oldest, Date.parse(event.occurred_at));
      watermarks.set(event.world_id, Math.max(watermarks.get(event.world_id) ?? 0, event.producer_seq));
    }
    if (worlds.size === 0) return;
    const ordered = [...worlds].sort(([a], [b]) => a.localeCompare(b));
    const plans = ordered.map(([worldId, batch]) => ({
      worldId,
      batch,
      objects: writeObjectChanges(worldId, batch.objects.map(objectChangeOf)),
      links: writeLinkChanges(worldId, batch.links.map(linkChangeOf)),
    }));
    // The locks first: every statement after them in the trip reads what committed before them.
    const statements: Statement[] = [lockWorldsStatement(worlds.keys()) as Statement];
    for (const plan of plans) {
      statements.push(ModelCache.versions(plan.worldId));
      if (plan.objects) statements.push(plan.objects.statement);
      if (plan.links) statements.push(plan.links.statement);
    }
    const answers = (await queryTogether(tx, statements)).slice(1);
    const sql = new WriteBehind(tx);
    for (const plan of plans) {
      const versions = answers.shift()?.rows;
      const objects = plan.objects ? answers.shift()?.rows : undefined;
      const links = plan.links ? answers.shift()?.rows : undefined;
      const model = await deps.models.get(sql, plan.worldId, versions);
      const evaluation = new Evaluation(sql, model, deps.ctx);
      if (plan.objects && objects) plan.objects.report(objects, evaluation);
      if (plan.links && links) plan.links.report(links, evaluation);
      const stats = await evaluation.run();
      // Counted before the commit: a batch that rolls back and is retried counts twice.
      deps.metrics.record(plan.worldId, stats, plan.batch.oldest);
    }
    return [...sql.take(), advancingDataWatermarks(watermarks)];
  };
}
