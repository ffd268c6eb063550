import type { Static, TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { type EventEnvelope, newEvent } from '../events/envelope.js';
import {
  HeartbeatPayload,
  KeysPublishedPayload,
  RolesChangedPayload,
  TokenRevokedPayload,
} from '../events/identity.js';
import { TOPICS } from '../kafka/topics.js';
import type { OutboxMessage } from '../outbox/outbox.js';

// The payload schemas live with the other events' (events/), re-exported here for the callers.
export { HeartbeatPayload, KeysPublishedPayload, RolesChangedPayload, TokenRevokedPayload };

export type TokenRevoked = Static<typeof TokenRevokedPayload>;
export type RolesChanged = Static<typeof RolesChangedPayload>;
export type KeysPublished = Static<typeof KeysPublishedPayload>;
export type Heartbeat = Static<typeof HeartbeatPayload>;

/** The partition key of heartbeats; the topic has one partition, so it only names them. */
export const HEARTBEAT_KEY = 'heartbeat';

const checks = {
  'identity.token.revoked': TypeCompiler.Compile(TokenRevokedPayload),
  'identity.roles.changed': TypeCompiler.Compile(RolesChangedPayload),
  'identity.keys.published': TypeCompiler.Compile(KeysPublishedPayload),
  'identity.heartbeat': TypeCompiler.Compile(HeartbeatPayload),
};
export type IdentityEventType = keyof typeof checks;
interface Payloads {
  'identity.token.revoked': TokenRevoked;
  'identity.roles.changed': RolesChanged;
  'identity.keys.published': KeysPublished;
  'identity.heartbeat': Heartbeat;
}

/** The payload of an identity event of type `type`, checked; throws naming the faulty field. */
export function identityPayload<T extends IdentityEventType>(type: T, event: EventEnvelope): Payloads[T] {
  const check = checks[type] as ReturnType<typeof TypeCompiler.Compile<TSchema>>;
  if (event.type !== type) throw new TypeError(`expected ${type}, got ${event.type}`);
  if (!check.Check(event.payload)) {
    const first = check.Errors(event.payload).First();
    throw new TypeError(`invalid ${type} payload: ${first?.path || '/'} ${first?.message ?? ''}`);
  }
  return event.payload as Payloads[T];
}

/** An identity event for the outbox, keyed by `key` (a user id, or `keys` for the key set). */
export function identityMessage<T extends Exclude<IdentityEventType, 'identity.heartbeat'>>(
  type: T,
  key: string,
  payload: Payloads[T],
  options: { worldId?: string; version?: number; requestId?: string } = {},
): OutboxMessage<T> {
  const event = newEvent({
    type,
    worldId: options.worldId ?? '*',
    key,
    version: options.version ?? 0,
    producer: 'control',
    producerSeq: 0,
    payload: payload as unknown as Record<string, unknown>,
  }) as EventEnvelope & { type: T };
  identityPayload(type, event);
  return {
    event,
    key: TOPICS['onto.identity'].key({ userId: key }),
    ...(options.requestId ? { headers: { 'x-request-id': options.requestId } } : {}),
  };
}
