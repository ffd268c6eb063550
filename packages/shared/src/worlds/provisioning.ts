import type pg from 'pg';
import { newEvent } from '../events/envelope.js';
import type { ReceivedEvent } from '../inbox/consumer.js';
import { TOPICS } from '../kafka/topics.js';
import { Outbox } from '../outbox/outbox.js';

const REPLIES = {
  data: {
    provisioned: 'world.provisioned',
    failed: 'world.provision.failed',
    dropped: 'world.dropped',
    positioned: 'world.tag.positioned',
    topic: 'onto.storage',
  },
  intelligence: {
    provisioned: 'intelligence.world.provisioned',
    failed: undefined,
    dropped: 'intelligence.world.dropped',
    positioned: 'intelligence.world.tag.positioned',
    topic: 'onto.intelligence',
  },
} as const;

/** Where a fork starts (`world.created`'s `from`): the base world and the ref to fork at (now if absent). */
export interface WorldOrigin {
  world: string;
  schemaVersion?: number;
  ref?: { commit?: number; instant?: string };
}

/**
 * What provisioning answers: extra fields of the provisioned reply, or a refusal (the world is
 * not recorded; `world.provision.failed` names the field of POST /v1/worlds and why).
 */
export type ProvisionOutcome =
  | undefined
  | { reply: Record<string, unknown> }
  | { failed: { field: string; reason: string } };

/** What `world.tag.requested` asks about: a tag's name and the request (a uuidv7: later requests sort after). */
export interface TagRequest {
  tag: string;
  request: string;
}

export interface WorldHooks {
  /** Makes what the service keeps per world; runs in the transaction that records it. */
  provision?: (tx: pg.ClientBase, worldId: string, from: WorldOrigin | null) => Promise<ProvisionOutcome | undefined>;
  /** Removes everything the service keeps for the world. */
  drop?: (tx: pg.ClientBase, worldId: string) => Promise<void>;
  /**
   * The service's position in the world now, for a tag (`world.tag.requested`, docs/adr/0029);
   * `tag` names the tag and the request, so the service can also keep the tag for `?at=` (docs/adr/0046).
   */
  position?: (tx: pg.ClientBase, worldId: string, tag: TagRequest) => Promise<Record<string, number>>;
  /** Forgets a deleted tag (`world.tag.deleted`, docs/adr/0046); nothing is replied. */
  untag?: (tx: pg.ClientBase, worldId: string, tag: TagRequest) => Promise<void>;
}

/**
 * The provisioner's side of the world saga, for data and intelligence: `world.created` records
 * the world (table `worlds`, see the service's migration) and replies provisioned;
 * `world.deleted` and `world.drop.requested` (compensation) drop it and reply dropped;
 * `world.tag.requested` replies the service's position (a world it does not have: none);
 * `world.tag.deleted` forgets the tag, with no reply. Replies
 * carry `caused_by` and are enqueued in the inbox transaction, so each is sent exactly once in
 * effect.
 */
export function worldProvisioning(service: 'data' | 'intelligence', topicPrefix: string, hooks: WorldHooks = {}) {
  const reply = REPLIES[service];
  return async (tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> => {
    for (const { event } of events) {
      let type: string;
      let payload: Record<string, unknown> = { service };
      if (event.type === 'world.created') {
        const from = (event.payload.from as WorldOrigin | null) ?? null;
        await tx.query('INSERT INTO worlds (id, parent_world) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [
          event.world_id,
          from?.world ?? null,
        ]);
        const outcome = await hooks.provision?.(tx, event.world_id, from);
        type = reply.provisioned;
        if (outcome && 'failed' in outcome && reply.failed) {
          // Nothing of the world stays.
          await tx.query('DELETE FROM worlds WHERE id = $1', [event.world_id]);
          type = reply.failed;
          payload = { service, ...outcome.failed };
        } else if (outcome && 'reply' in outcome) payload = { service, ...outcome.reply };
      } else if (event.type === 'world.deleted' || event.type === 'world.drop.requested') {
        await hooks.drop?.(tx, event.world_id);
        await tx.query('DELETE FROM worlds WHERE id = $1', [event.world_id]);
        type = reply.dropped;
      } else if (event.type === 'world.tag.deleted') {
        await hooks.untag?.(tx, event.world_id, event.payload as unknown as TagRequest);
        continue;
      } else if (event.type === 'world.tag.requested' && hooks.position) {
        const known = await tx.query('SELECT 1 FROM worlds WHERE id = $1', [event.world_id]);
        if (known.rowCount === 0) continue; // dropped since: control deletes its tags with it
        const { tag, request } = event.payload as unknown as TagRequest;
        type = reply.positioned;
        payload = { service, tag, request, ...(await hooks.position(tx, event.world_id, { tag, request })) };
      } else continue;
      const answer = newEvent({
        type: type as 'world.provisioned',
        worldId: event.world_id,
        key: event.world_id,
        version: 0,
        producer: service,
        producerSeq: 0,
        causedBy: event.event_id,
        payload,
      });
      await new Outbox(tx, topicPrefix).add({
        event: answer,
        key: TOPICS[reply.topic].key({ worldId: event.world_id }),
      } as never);
    }
  };
}
