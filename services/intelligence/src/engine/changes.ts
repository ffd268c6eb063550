import type { ApplyEffects, EventEnvelope, ReceivedEvent } from '@onto/shared';
import { advanceDataWatermarks } from '../consistency.js';
import { applyLinkChanges, applyObjectChanges, linkChangeOf, objectChangeOf } from '../readmodel/apply.js';
import { Evaluation, type EvaluationContext } from './evaluation.js';
import { lockWorlds } from './locks.js';
import type { EvaluationMetrics } from './metrics.js';
import type { ModelCache } from './world-model.js';

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
    await lockWorlds(tx, worlds.keys());
    for (const [worldId, batch] of [...worlds].sort(([a], [b]) => a.localeCompare(b))) {
      const model = await deps.models.get(tx, worldId);
      const evaluation = new Evaluation(tx, model, deps.ctx);
      await applyObjectChanges(tx, worldId, batch.objects.map(objectChangeOf), evaluation);
      await applyLinkChanges(tx, worldId, batch.links.map(linkChangeOf), evaluation);
      const stats = await evaluation.run();
      // Counted before the commit: a batch that rolls back and is retried counts twice.
      deps.metrics.record(worldId, stats, batch.oldest);
    }
    await advanceDataWatermarks(tx, watermarks);
  };
}
