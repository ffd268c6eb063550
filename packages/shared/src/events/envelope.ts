import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { UUID_V7, uuidv7 } from '../ids/uuidv7.js';
import { canonicalJson } from '../json/canonical.js';
import type { TopicName } from '../kafka/topics.js';
import { EVENT_TYPES, type EventType, PRODUCERS, type ProducerName } from './catalogue.js';
import { CONTRACT_CHECKS, payloadFault } from './contract.js';

export { EVENT_TYPES, type EventType, PRODUCERS, type ProducerName } from './catalogue.js';

/** World ids are slugs; `*` marks an event about the platform rather than one world. */
export const WORLD_ID = '^[a-z][a-z0-9-]{0,62}$';
const ISO_INSTANT = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?(Z|[+-]\\d{2}:\\d{2})$';
const EventId = Type.String({ pattern: UUID_V7.source });

/** The longest partition key an event may carry. */
export const EVENT_KEY_MAX = 1024;

export const EventEnvelopeSchema = Type.Object(
  {
    event_id: EventId,
    type: Type.Union(Object.keys(EVENT_TYPES).map((t) => Type.Literal(t as EventType))),
    world_id: Type.Union([Type.String({ pattern: WORLD_ID }), Type.Literal('*')]),
    key: Type.String({ minLength: 1, maxLength: EVENT_KEY_MAX }),
    version: Type.Integer({ minimum: 0 }),
    caused_by: Type.Union([EventId, Type.Null()]),
    causal_order: Type.Integer({ minimum: 0 }),
    producer: Type.Union(PRODUCERS.map((p) => Type.Literal(p))),
    producer_seq: Type.Integer({ minimum: 0 }),
    occurred_at: Type.String({ pattern: ISO_INSTANT }),
    payload: Type.Record(Type.String(), Type.Unknown()),
  },
  { additionalProperties: false },
);

export type EventEnvelope = Static<typeof EventEnvelopeSchema> & { type: EventType };

// Compiled once: every event published or consumed goes through it.
const envelopeCheck = TypeCompiler.Compile(EventEnvelopeSchema);

/** An envelope that does not match the schema; `path` names the first faulty field. */
export class InvalidEventError extends Error {
  override readonly name = 'InvalidEventError';
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`invalid event: ${path || '/'} ${reason}`);
  }
}

/** Checks an envelope exactly: no coercion, so `true` is not a number and 1.5 not an integer. */
export function validateEvent(candidate: unknown): EventEnvelope {
  if (candidate === null || typeof candidate !== 'object' || Array.isArray(candidate)) {
    throw new InvalidEventError('/', 'must be an object');
  }
  const record = candidate as Record<string, unknown>;
  if (typeof record.type === 'string' && !(record.type in EVENT_TYPES)) {
    throw new InvalidEventError('/type', `unknown event type ${JSON.stringify(record.type)}`);
  }
  if (envelopeCheck.Check(candidate)) return candidate as EventEnvelope;
  const first = envelopeCheck.Errors(candidate).First();
  throw new InvalidEventError(
    first?.path ?? '/',
    `${first?.message ?? 'does not match'} (got ${JSON.stringify(first?.value)})`,
  );
}

/** Parses and validates a body read from Kafka. */
export function parseEvent(body: Buffer | string | null): EventEnvelope {
  if (body === null) throw new InvalidEventError('/', 'the record has no value');
  let parsed: unknown;
  try {
    parsed = JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
  } catch (error) {
    throw new InvalidEventError('/', `is not JSON: ${(error as Error).message}`);
  }
  return validateEvent(parsed);
}

export interface NewEvent {
  type: EventType;
  worldId: string;
  key: string;
  version: number;
  producer: ProducerName;
  producerSeq: number;
  payload: Record<string, unknown>;
  causedBy?: string | null;
  causalOrder?: number;
  eventId?: string;
  occurredAt?: Date;
}

/** Builds and validates an envelope; the id is a fresh UUIDv7 unless given. */
export function newEvent(e: NewEvent): EventEnvelope {
  const event = validateEvent({
    event_id: e.eventId ?? uuidv7(),
    type: e.type,
    world_id: e.worldId,
    key: e.key,
    version: e.version,
    caused_by: e.causedBy ?? null,
    causal_order: e.causalOrder ?? 0,
    producer: e.producer,
    producer_seq: e.producerSeq,
    occurred_at: (e.occurredAt ?? new Date()).toISOString(),
    payload: e.payload,
  });
  // Outside production, a payload that breaks its type's published schema is refused (docs/adr/0020).
  const fault = CONTRACT_CHECKS ? payloadFault(event.type, event.payload) : null;
  if (fault) throw new InvalidEventError(fault.path, `${event.type}: ${fault.reason}`);
  return event;
}

export const encodeEvent = (event: EventEnvelope): string => canonicalJson(event);
export const topicOf = (type: EventType): TopicName => EVENT_TYPES[type];
