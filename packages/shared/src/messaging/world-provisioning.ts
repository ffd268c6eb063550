import type pg from 'pg';
import { TOPICS } from '../kafka/topics.js';
import type { ReceivedEvent } from './consumer.js';
import { newEvent } from './envelope.js';
import { Outbox } from './outbox.js';

const REPLIES = {
  data: { provisioned: 'world.provisioned', dropped: 'world.dropped', topic: 'onto.storage' },
  intelligence: {
    provisioned: 'intelligence.world.provisioned',
    dropped: 'intelligence.world.dropped',
    topic: 'onto.intelligence',
  },
} as const;

export interface WorldHooks {
  /** Makes what the service keeps per world; runs in the transaction that records it. */
  provision?: (tx: pg.ClientBase, worldId: string, from: { world: string } | null) => Promise<void>;
  /** Removes everything the service keeps for the world. */
  drop?: (tx: pg.ClientBase, worldId: string) => Promise<void>;
}

/**
 * The provisioner's side of the world saga, for data and intelligence: `world.created` records
 * the world (table `worlds`, see the service's migration) and replies provisioned;
 * `world.deleted` and `world.drop.requested` (compensation) drop it and reply dropped. Replies
 * carry `caused_by` and are enqueued in the inbox transaction, so each is sent exactly once in
 * effect.
 */
export function worldProvisioning(service: 'data' | 'intelligence', topicPrefix: string, hooks: WorldHooks = {}) {
  const reply = REPLIES[service];
  return async (tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> => {
    for (const { event } of events) {
      let type: string;
      if (event.type === 'world.created') {
        const from = (event.payload.from as { world: string } | null) ?? null;
        await tx.query('INSERT INTO worlds (id, parent_world) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [
          event.world_id,
          from?.world ?? null,
        ]);
        await hooks.provision?.(tx, event.world_id, from);
        type = reply.provisioned;
      } else if (event.type === 'world.deleted' || event.type === 'world.drop.requested') {
        await hooks.drop?.(tx, event.world_id);
        await tx.query('DELETE FROM worlds WHERE id = $1', [event.world_id]);
        type = reply.dropped;
      } else continue;
      const answer = newEvent({
        type: type as 'world.provisioned',
        worldId: event.world_id,
        key: event.world_id,
        version: 0,
        producer: service,
        producerSeq: 0,
        causedBy: event.event_id,
        payload: { service },
      });
      await new Outbox(tx, topicPrefix).add({
        event: answer,
        key: TOPICS[reply.topic].key({ worldId: event.world_id }),
      } as never);
    }
  };
}
