import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { adminRoutes } from '../admin/routes.js';
import type { ActionStarter } from '../decisions/make.js';
import { decisionRoutes } from '../decisions/routes.js';
import type { DefinitionWriter } from '../definition-routes.js';
import { derivedRoutes } from '../derived/routes.js';
import type { Kind } from '../merges/history.js';
import { readModelRoutes } from '../readmodel/routes.js';
import { alertRoutes } from '../rules/alert-routes.js';
import { ruleRoutes } from '../rules/routes.js';
import { applyChanges, prepareChanges } from './changes.js';
import type { Engine } from './engine.js';
import { EvaluationMetrics } from './metrics.js';
import { RecomputeWorker } from './recompute-jobs.js';
import { applySchemaChanges } from './schema-changes.js';
import { ModelCache } from './world-model.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Each kind's PUT and DELETE in a caller's transaction: how a merge writes definitions (docs/adr/0039). */
    definitionWriters: Record<Kind, DefinitionWriter>;
  }
}

/**
 * intelligence's evaluation: the read model of data's objects and links, derived properties,
 * rules and alerts, decisions (docs/adr/0010). Two consumers — `intelligence-changes` on
 * onto.changes.objects/links (the hot path) and `intelligence-definitions` on onto.schema,
 * onto.storage and onto.worlds — the recompute worker, and the routes.
 */
export default fp(
  async (app: FastifyInstance, opts: { seriesKeepMarginMs: number }) => {
    // The actions API (another part of intelligence) starts a decision's action in our
    // transaction; read at call time, so that registration order does not matter.
    const ctx = {
      topicPrefix: app.topicPrefix,
      get actions(): ActionStarter | undefined {
        return (app as unknown as { actions?: ActionStarter }).actions;
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

    await readModelRoutes(app);
    const derived = await derivedRoutes(app, engine);
    await adminRoutes(app, engine);
    const rule = await ruleRoutes(app, engine);
    await alertRoutes(app);
    const decision = await decisionRoutes(app, engine);
    app.decorate('definitionWriters', { derived, rule, decision });
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
