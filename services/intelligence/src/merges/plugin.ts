import { eventHandlers } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { check } from './checks.js';
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
    const handle = eventHandlers<[pg.PoolClient]>({
      'world.merge.requested': (event, tx) => plan(tx, ctx, event),
      'world.merge.conflict.resolved': (event, tx) => resolve(tx, event),
      'world.merge.apply': (event, tx) => apply(tx, ctx, event),
      'world.merge.compensate': (event, tx) => compensate(tx, ctx, event),
      'world.merge.verify.requested': (event, tx) => verify(tx, ctx, event),
      'world.merge.check.requested': (event, tx) => check(tx, ctx.topicPrefix, event),
    });
    app.addConsumer({
      name: 'intelligence-merges',
      topics: ['onto.worlds'],
      apply: async (tx, events) => {
        for (const { event } of events) await handle(event, tx);
      },
    });
  },
  { name: 'onto-intelligence-merges', dependencies: ['onto-consumers', 'onto-intelligence-evaluation'] },
);
