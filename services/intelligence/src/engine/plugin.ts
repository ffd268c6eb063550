import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { ActionStarter } from '../decisions/make.js';
import { applyChanges, prepareChanges } from './changes.js';
import type { Engine } from './engine.js';
import { EvaluationMetrics } from './metrics.js';
import { RecomputeWorker } from './recompute-jobs.js';
import { applySchemaChanges } from './schema-changes.js';
import { ModelCache } from './world-model.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The evaluation's parts, for the routes app.ts mounts on it (definitions, read model, admin). */
    engine: Engine;
  }
}

export interface EvaluationOptions {
  seriesKeepMarginMs: number;
  /**
   * How a decision starts its action in the evaluation's transaction: the actions API, registered
   * after this plugin, hence asked for at call time (undefined until it is).
   */
  actions: () => ActionStarter | undefined;
}

/**
 * intelligence's evaluation: the read model of data's objects and links, derived properties,
 * rules and alerts, decisions (docs/adr/0010). Two consumers — `intelligence-changes` on
 * onto.changes.objects/links (the hot path) and `intelligence-definitions` on onto.schema,
 * onto.storage and onto.worlds — and the recompute worker. It mounts no route: app.ts mounts the
 * routes on `app.engine`.
 */
export default fp(
  async (app: FastifyInstance, opts: EvaluationOptions) => {
    const ctx = {
      topicPrefix: app.topicPrefix,
      get actions(): ActionStarter | undefined {
        return opts.actions();
      },
    };
    const models = new ModelCache(app.schemaReplica);
    const metrics = new EvaluationMetrics(app.metrics, app.pg);
    const log = app.log.child({ component: 'evaluation' });
    const worker = new RecomputeWorker(app.pg, models, ctx, metrics);
    const engine: Engine = { models, worker, ctx, metrics };

    app.addConsumer({
      name: 'intelligence-changes',
      topics: ['onto.changes.objects', 'onto.changes.links', 'onto.series.points'],
      // Every batch of a world's changes locks the world (docs/adr/0010): per world, one
      // transaction at a time takes every partition's ready batch, rather than each queueing on
      // the lock; batches of other worlds run beside it (docs/adr/0018).
      mergeBatches: true,
      mergeKey: (item) => item.event.world_id,
      partitionsConsumedConcurrently: 12,
      prepare: prepareChanges,
      apply: applyChanges({ models, ctx, metrics, seriesKeepMarginMs: opts.seriesKeepMarginMs }),
    });
    app.addConsumer({
      name: 'intelligence-definitions',
      // onto.worlds too: data's replies on onto.storage (world.provisioned, world.dropped,
      // world.tag.positioned) are caused by its events, and would otherwise wait for a cause this
      // consumer never sees, holding up the world's schema events queued behind them.
      topics: ['onto.schema', 'onto.storage', 'onto.worlds'],
      apply: applySchemaChanges(app.schemaReplica, log, {
        wake: () => worker.wake(),
        dropped: (worldId) => metrics.forget(worldId),
      }),
    });
    worker.register(app.jobs);
    app.decorate('engine', engine);
  },
  {
    name: 'onto-intelligence-evaluation',
    dependencies: [
      'onto-auth',
      'onto-consumers',
      'onto-intelligence-schema',
      'onto-intelligence-consistency',
      'onto-jobs',
    ],
  },
);
