import { eventHandlers, type ReceivedEvent } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { cutCommit, cutCommitIn } from '../storage/commit.js';
import { applyMerge } from './apply.js';
import { compensateMerge } from './compensate.js';
import { planMerge, resolveConflict } from './plan.js';
import { stageMerge } from './stage.js';
import { verifyMerge } from './verify.js';

/*
 * data's side of the merge saga (docs/adr/0037, 0038): consumer `data-merges` on onto.worlds,
 * each event handled in the inbox transaction (a redelivered event is a duplicate there), each
 * reply on onto.storage enqueued in the same transaction.
 */

export function mergeEvents(app: FastifyInstance) {
  return async (tx: pg.PoolClient, events: ReceivedEvent[]): Promise<void> => {
    // Whether this transaction wrote objects or links yet: a cut on another connection would
    // then wait for this transaction's own locks, so it is cut in this one (and holds writers
    // off until it commits) — otherwise the cut commits at once and writers go on during the plan.
    let wrote = false;
    const cut = () => (wrote ? cutCommitIn(tx) : cutCommit(app.pg));
    const handle = eventHandlers<[]>({
      'world.merge.requested': (event) => planMerge(tx, app.topicPrefix, event.event_id, event.payload, cut),
      'world.merge.conflict.resolved': (event) => resolveConflict(tx, { ...event.payload, target: event.world_id }),
      'world.merge.apply': async (event) => {
        await applyMerge(tx, app.topicPrefix, event.event_id, { ...event.payload, target: event.world_id });
        wrote = true;
      },
      'world.merge.compensate': async (event) => {
        await compensateMerge(tx, app.topicPrefix, event.event_id, {
          merge: event.payload.merge,
          target: event.world_id,
        });
        wrote = true;
      },
      'world.merge.verify.requested': (event) =>
        verifyMerge(tx, app.topicPrefix, event.event_id, { ...event.payload, target: event.world_id }),
      'world.merge.stage.requested': (event) =>
        stageMerge(tx, app.topicPrefix, event.event_id, { ...event.payload, target: event.world_id }),
    });
    for (const { event } of events) await handle(event);
  };
}

export default fp(
  async (app: FastifyInstance) => {
    app.addConsumer({ name: 'data-merges', topics: ['onto.worlds'], apply: mergeEvents(app) });
  },
  { name: 'onto-data-merges', dependencies: ['onto-consumers', 'onto-data-schema'] },
);
