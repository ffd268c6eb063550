import { type EventType, newEvent, Outbox, TOPICS } from '@onto/shared';
import type pg from 'pg';

/** A reply of data's on onto.storage, keyed by the target world, caused by control's event. */
export async function reply(
  tx: pg.ClientBase,
  topicPrefix: string,
  target: string,
  causedBy: string,
  type: Extract<EventType, `merge.${string}`>,
  payload: Record<string, unknown>,
): Promise<void> {
  await new Outbox(tx, topicPrefix).add({
    event: newEvent({
      type,
      worldId: target,
      key: target,
      version: 0,
      producer: 'data',
      producerSeq: 0,
      causedBy,
      payload: { service: 'data', ...payload },
    }),
    key: TOPICS['onto.storage'].key({ worldId: target }),
  } as never);
}

/** The reply `merge.failed` of a step. */
export const failed = (
  tx: pg.ClientBase,
  topicPrefix: string,
  target: string,
  causedBy: string,
  f: {
    merge: string;
    phase: 'plan' | 'apply' | 'compensate' | 'verify';
    status: number;
    reason: string;
    field?: string;
  },
) => reply(tx, topicPrefix, target, causedBy, 'merge.failed', f);
