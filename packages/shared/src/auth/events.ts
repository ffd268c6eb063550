import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { TOPICS } from '../kafka/topics.js';
import { type EventEnvelope, newEvent } from '../messaging/envelope.js';
import type { OutboxMessage } from '../messaging/outbox.js';
import { PublicSigningKeySchema, WorldRoleSchema } from './tokens.js';

/**
 * The payloads of onto.identity, produced by control and replicated by data and intelligence.
 * Unknown fields are allowed, so that control can add some before every consumer reads them.
 */
export const TokenRevokedPayload = Type.Object({
  userId: Type.String({ minLength: 1 }),
  /** Every access token exchanged from this API token is revoked. */
  apiTokenId: Type.Optional(Type.String({ minLength: 1 })),
  /** This one access token is revoked. */
  accessTokenId: Type.Optional(Type.String({ minLength: 1 })),
  /** When the access token expires anyway (ms since the epoch): the revocation may be forgotten then. */
  expiresAt: Type.Optional(Type.Integer()),
});

export const RolesChangedPayload = Type.Object({
  userId: Type.String({ minLength: 1 }),
  worldId: Type.String({ minLength: 1 }),
  role: Type.Union([WorldRoleSchema, Type.Null()]),
  previousRole: Type.Union([WorldRoleSchema, Type.Null()]),
  /** Access tokens of this user with a lower generation (`gen` claim) are revoked. */
  minGeneration: Type.Integer({ minimum: 0 }),
});

export const KeysPublishedPayload = Type.Object({ keys: Type.Array(PublicSigningKeySchema) });

export const HeartbeatPayload = Type.Object({
  /** Every identity event committed before this instant (ms since the epoch) precedes this heartbeat. */
  watermark: Type.Integer({ minimum: 0 }),
  /** The public keys tokens may be signed with, so a replica learns them even past retention. */
  keys: Type.Array(PublicSigningKeySchema),
});

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
