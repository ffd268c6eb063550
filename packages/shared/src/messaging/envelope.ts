import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { CONTRACT_CHECKS, payloadFault } from '../kafka/events/contract.js';
import type { TopicName } from '../kafka/topics.js';
import { canonicalJson } from './canonical-json.js';
import { UUID_V7, uuidv7 } from './uuidv7.js';

/** Every event type onto publishes, and the topic it travels on. */
export const EVENT_TYPES = {
  'schema.updated': 'onto.schema',
  'world.created': 'onto.worlds',
  'world.deleted': 'onto.worlds',
  'world.drop.requested': 'onto.worlds',
  'world.merge.requested': 'onto.worlds',
  'world.merge.conflict.resolved': 'onto.worlds',
  'world.merge.apply': 'onto.worlds',
  'world.merge.compensate': 'onto.worlds',
  'world.merge.verify.requested': 'onto.worlds',
  'world.merge.stage.requested': 'onto.worlds',
  'world.merge.check.requested': 'onto.worlds',
  'check.requested': 'onto.worlds',
  'objects.recount.requested': 'onto.worlds',
  'links.recount.requested': 'onto.worlds',
  'derived.recompute.requested': 'onto.worlds',
  'world.tag.requested': 'onto.worlds',
  'world.tag.deleted': 'onto.worlds',
  'world.protection.updated': 'onto.worlds',
  'world.retention.updated': 'onto.worlds',
  'identity.token.revoked': 'onto.identity',
  'identity.roles.changed': 'onto.identity',
  'identity.keys.published': 'onto.identity',
  'identity.heartbeat': 'onto.identity',
  'storage.schema.updated': 'onto.storage',
  'world.provisioned': 'onto.storage',
  'world.provision.failed': 'onto.storage',
  'world.dropped': 'onto.storage',
  'storage.position': 'onto.storage',
  'storage.history.horizon': 'onto.storage',
  'storage.check.reported': 'onto.storage',
  'merge.planned': 'onto.storage',
  'merge.conflicts.found': 'onto.storage',
  'merge.applied': 'onto.storage',
  'merge.failed': 'onto.storage',
  'merge.compensated': 'onto.storage',
  'merge.verified': 'onto.storage',
  'merge.staged': 'onto.storage',
  'intelligence.world.provisioned': 'onto.intelligence',
  'intelligence.merge.planned': 'onto.intelligence',
  'intelligence.merge.conflicts.found': 'onto.intelligence',
  'intelligence.merge.applied': 'onto.intelligence',
  'intelligence.merge.failed': 'onto.intelligence',
  'intelligence.merge.compensated': 'onto.intelligence',
  'intelligence.merge.verified': 'onto.intelligence',
  'intelligence.merge.checked': 'onto.intelligence',
  'intelligence.world.dropped': 'onto.intelligence',
  'intelligence.position': 'onto.intelligence',
  'intelligence.check.reported': 'onto.intelligence',
  'intelligence.rules.changed': 'onto.intelligence',
  'world.tag.positioned': 'onto.storage',
  'intelligence.world.tag.positioned': 'onto.intelligence',
  'object.created': 'onto.changes.objects',
  'object.updated': 'onto.changes.objects',
  'object.deleted': 'onto.changes.objects',
  'object.announced': 'onto.changes.objects',
  'link.announced': 'onto.changes.links',
  'link.created': 'onto.changes.links',
  'link.deleted': 'onto.changes.links',
  'series.points.written': 'onto.series.points',
  'alert.raised': 'domain.alerts',
  'alert.cleared': 'domain.alerts',
  'decision.made': 'domain.decisions',
  'decision.executed': 'domain.decisions',
  'action.requested': 'domain.actions',
  'action.step.requested': 'domain.actions',
  'action.step.completed': 'domain.actions',
  'action.step.refused': 'domain.actions',
  'action.completed': 'domain.actions',
  'action.compensated': 'domain.actions',
  'action.failed': 'domain.actions',
  'audit.recorded': 'onto.audit',
} as const satisfies Record<string, TopicName>;

export type EventType = keyof typeof EVENT_TYPES;
export const PRODUCERS = ['control', 'data', 'intelligence'] as const;
export type ProducerName = (typeof PRODUCERS)[number];

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
