import type { EvaluationContext } from './evaluation.js';
import type { EvaluationMetrics } from './metrics.js';
import type { RecomputeWorker } from './recompute-jobs.js';
import type { ModelCache } from './world-model.js';

/** What the routes share with the consumers: the models, the recompute worker, the metrics. */
export interface Engine {
  models: ModelCache;
  worker: RecomputeWorker;
  ctx: EvaluationContext;
  metrics: EvaluationMetrics;
}
