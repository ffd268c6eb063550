import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { apply, compensate, plan, resolve, type SagaContext, verify } from './saga.js';

/**
 * intelligence's part of merges (docs/adr/0037, 0039): consumer `intelligence-merges` on
 * onto.worlds, where control sends the saga's steps (with no `caused_by`). Not onto.storage: the
 * events there are caused by events on topics this consumer does not read, so each would wait
 * for its cause and end in the DLQ (the chaos run found it).
 */
export default fp(
  async (app: FastifyInstance) => {
    const ctx: SagaContext = {
      topicPrefix: app.topicPrefix,
      get writers() {
        return app.definitionWriters;
      },
      afterCommit: (work) => setTimeout(work, 50).unref(),
    };
    app.addConsumer({
      name: 'intelligence-merges',
      topics: ['onto.worlds'],
      apply: async (tx, events) => {
        for (const { event } of events) {
          if (event.type === 'world.merge.requested') await plan(tx, ctx, event);
          else if (event.type === 'world.merge.conflict.resolved') await resolve(tx, event);
          else if (event.type === 'world.merge.apply') await apply(tx, ctx, event);
          else if (event.type === 'world.merge.compensate') await compensate(tx, ctx, event);
          else if (event.type === 'world.merge.verify.requested') await verify(tx, ctx, event);
        }
      },
    });
  },
  { name: 'onto-intelligence-merges', dependencies: ['onto-consumers', 'onto-intelligence-evaluation'] },
);
