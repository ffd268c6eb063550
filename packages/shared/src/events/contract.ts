import type { TSchema } from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import { TOPICS, type TopicName } from '../kafka/topics.js';
import { ownValue } from '../ontology/own.js';
import type { EventType, ProducerName } from './catalogue.js';
import { EVENT_PAYLOADS } from './payloads.js';

/**
 * The event contract (docs/adr/0020): each event type's payload schema at its current version,
 * and who reads each topic. Nothing here imports the envelope's values: envelope.ts checks new
 * events against this module.
 */

/** The version of every event type's schema; a breaking change is a new type (docs/adr/0020). */
export const EVENT_SCHEMA_VERSION = 1;

export const payloadSchemaOf = (type: EventType): TSchema => EVENT_PAYLOADS[type];

/** The JSON Schema id of an event type's payload: also its CloudEvents `dataschema`. */
export const eventSchemaId = (type: string, version = EVENT_SCHEMA_VERSION) => `urn:onto:event:${type}:v${version}`;

/**
 * Events published on a topic by services other than its owner: data's answers to the action
 * saga, and the audit records every service writes of its own changes (docs/adr/0084).
 */
const PRODUCED_ELSEWHERE: Partial<Record<EventType, readonly ProducerName[]>> = {
  'action.step.completed': ['data'],
  'action.step.refused': ['data'],
  'audit.recorded': ['control', 'data', 'intelligence'],
};

/** The services that produce an event type. */
export const producersOf = (type: EventType, topic: TopicName): readonly ProducerName[] =>
  PRODUCED_ELSEWHERE[type] ?? [TOPICS[topic].producer as ProducerName];

/** The consumer groups of each topic: a service and its group's name (before the topic prefix). */
export const TOPIC_CONSUMERS: Record<TopicName, { service: string; group: string }[]> = {
  'onto.schema': [
    { service: 'data', group: 'data-schema' },
    { service: 'intelligence', group: 'intelligence-schema' },
    { service: 'intelligence', group: 'intelligence-definitions' },
  ],
  'onto.worlds': [
    { service: 'data', group: 'data-worlds' },
    { service: 'data', group: 'data-merges' },
    { service: 'intelligence', group: 'intelligence-worlds' },
    { service: 'intelligence', group: 'intelligence-definitions' },
    { service: 'intelligence', group: 'intelligence-merges' },
  ],
  'onto.identity': [
    { service: 'data', group: 'data-identity' },
    { service: 'intelligence', group: 'intelligence-identity' },
  ],
  'onto.storage': [
    { service: 'control', group: 'control-worlds' },
    { service: 'control', group: 'control-merges' },
    { service: 'intelligence', group: 'intelligence-definitions' },
  ],
  'onto.intelligence': [
    { service: 'control', group: 'control-worlds' },
    { service: 'control', group: 'control-merges' },
  ],
  'onto.changes.objects': [{ service: 'intelligence', group: 'intelligence-changes' }],
  'onto.changes.links': [{ service: 'intelligence', group: 'intelligence-changes' }],
  'onto.series.points': [{ service: 'intelligence', group: 'intelligence-changes' }],
  'domain.alerts': [],
  'domain.decisions': [],
  'domain.actions': [
    { service: 'data', group: 'data-actions' },
    { service: 'intelligence', group: 'intelligence-actions' },
  ],
  'onto.audit': [{ service: 'control', group: 'control-audit' }],
};

/** Producers check their events' payloads unless in production, or when asked to (ONTO_EVENT_CONTRACT_CHECKS=on|off). */
export const CONTRACT_CHECKS =
  (process.env.ONTO_EVENT_CONTRACT_CHECKS ?? (process.env.NODE_ENV === 'production' ? 'off' : 'on')) === 'on';

const compiled = new Map<string, TypeCheck<TSchema>>();

/** Where a payload breaks its type's schema (`/payload/…` and why), or null when it fits. */
export function payloadFault(type: string, payload: unknown): { path: string; reason: string } | null {
  let check = compiled.get(type);
  if (!check) {
    // The type comes off the wire: `constructor` is no event type, not Object's constructor.
    const schema = ownValue(EVENT_PAYLOADS as Record<string, TSchema>, type);
    if (!schema) return { path: '/type', reason: `no schema for event type ${JSON.stringify(type)}` };
    check = TypeCompiler.Compile(schema);
    compiled.set(type, check);
  }
  if (check.Check(payload)) return null;
  const first = check.Errors(payload).First();
  return {
    path: `/payload${first?.path ?? ''}`,
    reason: `${first?.message ?? 'does not match'} (got ${JSON.stringify(first?.value)})`,
  };
}
