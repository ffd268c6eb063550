import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { mergeMetrics } from './metrics.js';
import { applyMergeReplies } from './replies.js';
import routes from './routes.js';
import { failOverdueMerges, type SagaContext } from './saga.js';
import verify from './verify.js';

/** Merges of worlds (issue 17, docs/adr/0037): routes, the replies' consumer, deadlines, metrics. */
export default fp(
  async (app: FastifyInstance, opts: { timeoutMs: number }) => {
    const ctx: SagaContext = { topicPrefix: app.topicPrefix, timeoutMs: opts.timeoutMs };
    await app.register(routes, ctx);
    await app.register(verify);
    mergeMetrics(app.metrics, app.pg);
    app.addConsumer({
      name: 'control-merges',
      topics: ['onto.storage', 'onto.intelligence'],
      apply: (tx, events) => applyMergeReplies(tx, events, ctx),
    });
    app.jobs.every('control.merge-deadlines', 500, async () => {
      const failed = await failOverdueMerges(app.pg, ctx);
      if (failed.length > 0) app.log.warn({ merges: failed }, 'merges passed their deadline');
    });
  },
  { name: 'onto-control-merges-saga', dependencies: ['onto-consumers', 'onto-auth', 'onto-jobs'] },
);
